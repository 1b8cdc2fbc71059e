"""The study builds each attempt bank its runs score on once, before any run is submitted (flows/study.py,
`build_banks`): one bank per distinct bank key among the runs of methods that train a critic, none for the others
or with the bank off. The bank tasks are replaced by recorders; tests/integration/test_bank_run.py runs the real ones."""

import yaml

from binac_core.foundation.files import StageFile
from binac_core.studies.study import grid, load_study
from flows import study as study_flow


def _study(tmp_path, methods, bank=True, variants=None):
    raw = {
        "name": "banks-test",
        "preset": "micro",
        "iterations": 2,
        "eval_every": 1,
        "equal_samples_method": "grpo",
        "methods": methods,
        "seeds": [0, 1],
        "regimes": {"a": {"difficulty": 2}, "b": {"difficulty": 3}},
        "rule_measure": {"group_size": 8, "seed": 0},
        "overrides": {"bank.enabled": bank},
        **({"variants": variants} if variants else {}),
    }
    path = tmp_path / "banks-test.yaml"
    path.write_text(yaml.safe_dump(raw))
    (tmp_path / "banks-test.design.md").write_text("test")
    return load_study(path)


def _recorded(monkeypatch):
    calls = []

    def build(cfg_d, base, weights, seed):
        calls.append(("bank", cfg_d["task"]["difficulty"], cfg_d["bank"]["right"]))
        return StageFile(f"bank-{len(calls)}", "0")

    def frozen(cfg_d, base, bank, seed):
        calls.append(("frozen", bank.path))
        return StageFile(f"frozen-{bank.path}", "0")

    monkeypatch.setattr(study_flow, "build_bank", build)
    monkeypatch.setattr(study_flow, "frozen_bank", frozen)
    return calls


def test_one_bank_per_difficulty_for_the_critic_training_runs(tmp_path, monkeypatch):
    calls = _recorded(monkeypatch)
    st = _study(tmp_path, ["grpo", "fixed_critic", "binac", "critic_only"])
    runs = grid(st, {"a": 2, "b": 3})
    names = study_flow.build_banks(st, runs, StageFile("base", "0"), "ab" * 32)
    # 2 seeds x 2 regimes x 2 critic-training methods share 2 banks (one per difficulty); grpo and fixed_critic
    # train no critic
    assert calls == [("bank", 2, 4), ("frozen", "bank-1"), ("bank", 3, 4), ("frozen", "bank-3")]
    assert len(names) == 2 and all(n.startswith("bank-abababababab-") for n in names)


def test_a_variant_that_changes_the_bank_gets_its_own(tmp_path, monkeypatch):
    calls = _recorded(monkeypatch)
    st = _study(tmp_path, ["binac"], variants={"binac": {"same": {}, "bigger": {"bank.right": 5}}})
    runs = grid(st, {"a": 2, "b": 2})
    study_flow.build_banks(st, runs, StageFile("base", "0"), "ab" * 32)
    assert sorted(c for c in calls if c[0] == "bank") == [("bank", 2, 4), ("bank", 2, 5)]


def test_no_bank_when_off(tmp_path, monkeypatch):
    calls = _recorded(monkeypatch)
    st = _study(tmp_path, ["binac"], bank=False)
    assert study_flow.build_banks(st, grid(st, {"a": 2, "b": 3}), StageFile("base", "0"), "ab" * 32) == []
    assert calls == []

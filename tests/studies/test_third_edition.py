"""The third edition's hypotheses (studies/editions/third_edition.py) on hand-made runs over 20 iterations with
evaluations at 0, 10 and 20 (areas by hand: the trapezoid over them divided by 20), and on a study with a subset of
the methods (the second base's). No model, no Prefect: run dicts as flows/study.py's `collect` returns them."""

import yaml

from binac_core.studies.editions import section
from binac_core.studies.study import load_study

SEEDS = (0, 1, 2)


def _study(tmp_path, methods):
    raw = {
        "name": "v3",
        "preset": "micro",
        "iterations": 20,
        "eval_every": 10,
        "methods": methods,
        "seeds": list(SEEDS),
        "regimes": {"sparse": {"difficulty": 2}},
        "hypotheses": "third_edition",
    }
    path = tmp_path / "v3.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_study(path)


def _run(method: str, seed: int, evals: dict, train: dict | None = None) -> dict:
    metrics = {f"eval/{k}": dict(v) for k, v in evals.items()}
    metrics |= {f"train/{k}": dict(v) for k, v in (train or {}).items()}
    per = {"grpo": (64, 64), "critic_only": (0, 576)}.get(method, (320, 832))
    return {
        "regime": "sparse",
        "difficulty": 2,
        "method": method,
        "variant": "",
        "seed": seed,
        "finished": True,
        "state": "FINISHED",
        "metrics": metrics,
        "actor_train_per_iteration": per[0],
        "generated_per_iteration": per[1],
    }


def _curve(a, b, c):
    return {0: a, 10: b, 20: c}


def _runs():
    """acc_single: grpo 0.1, 0.1, 0.3 (area (1 + 2) / 20 = 15 %); fixed_critic 0.1, 0.5, 0.6 (42.5 %); binac 0.1,
    m, 0.7 with m = 0.7, 0.6, 0.8 by seed (area (0.8 + 2m) / 4 = 55, 50, 60 %). binac − fixed_critic +12.5, +7.5,
    +17.5: mean 12.5, sd 5, t(0.975, 2)·5/√3 = 12.4; fixed_critic − grpo +27.5 on every seed. binac's approval:
    of wrong attempts 0.10 → 0.11, 0.09, 0.10 (change +1, −1, 0: ± 2.5, below the 5-point margin); of right ones
    0.50 → 0.40, 0.38, 0.42 (a fall of 10 ± 5.0 points: its lower end 5.0 is above 0). critic_only: acc_feedback
    0.20 → 0.40, 0.45, 0.35, hits 0.15 → 0.35, 0.30, 0.40. Balanced accuracy at the last evaluation: binac_disc
    0.80, 0.85, 0.90 against binac's 0.60."""
    runs = []
    for i, s in enumerate(SEEDS):
        m = (0.7, 0.6, 0.8)[i]
        runs += [
            _run("grpo", s, {"acc_single": _curve(0.1, 0.1, 0.3)}),
            _run("fixed_critic", s, {"acc_single": _curve(0.1, 0.5, 0.6)}),
            _run(
                "binac",
                s,
                {
                    "acc_single": _curve(0.1, m, 0.7),
                    "critic_approves_wrong": {0: 0.10, 20: (0.11, 0.09, 0.10)[i]},
                    "critic_approves_right": {0: 0.50, 20: (0.40, 0.38, 0.42)[i]},
                    "critic/balanced_accuracy": {0: 0.5, 20: 0.60},
                },
            ),
            _run(
                "critic_only",
                s,
                {
                    "acc_single": _curve(0.1, 0.1, 0.1),
                    "acc_feedback": {0: 0.20, 20: (0.40, 0.45, 0.35)[i]},
                    "critic_hits_first_error": {0: 0.15, 20: (0.35, 0.30, 0.40)[i]},
                },
            ),
            _run(
                "binac_disc",
                s,
                {"acc_single": _curve(0.1, 0.5, 0.6), "critic/balanced_accuracy": {0: 0.5, 20: (0.80, 0.85, 0.90)[i]}},
            ),
        ]
    return runs


def _line(text: str, tag: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(f"- **{tag}**"))


def _block(text: str, tag: str) -> str:
    start = text.index(f"- **{tag}**")
    end = text.find("\n- **", start + 1)
    return text[start : end if end > 0 else None]


def test_h1_on_areas_with_per_seed_differences(tmp_path):
    st = _study(tmp_path, ["grpo", "fixed_critic", "binac", "critic_only", "binac_disc"])
    text = "\n".join(section(st, _runs(), {"actor_train": 1280, "generated": 1280}))
    h1 = _line(text, "H1")
    assert "**supported**" in h1
    assert "binac − fixed_critic +12.5 ± 12.4 (n=3; per seed +12.5, +7.5, +17.5)" in h1
    assert "fixed_critic − grpo +27.5 ± 0.0 (n=3; per seed +27.5, +27.5, +27.5)" in h1


def test_h6_h7_h8_by_their_rules(tmp_path):
    st = _study(tmp_path, ["grpo", "fixed_critic", "binac", "critic_only", "binac_disc"])
    text = "\n".join(section(st, _runs(), {"actor_train": 1280, "generated": 1280}))
    h6 = _block(text, "H6")
    assert _line(text, "H6").endswith("**not supported**."), "approval of right attempts fell 10 ± 5 points"
    assert "approves_wrong last − step 0 +0.0 ± 2.5 (n=3; per seed +1.0, -1.0, +0.0)" in h6
    assert "approves_right last − step 0 -10.0 ± 5.0" in h6
    assert _line(text, "H7").endswith("**supported**.")
    assert "acc_feedback last − step 0 +20.0 ± 12.4" in _block(text, "H7")
    assert _line(text, "H8").endswith("**supported**.")
    assert "binac_disc − binac +25.0 ± 12.4 (n=3; per seed +20.0, +25.0, +30.0)" in _block(text, "H8")


def test_a_study_with_a_subset_of_the_methods_gets_what_it_can_test(tmp_path):
    """The second base's study: fixed_critic, critic_only and binac. H1 lacks grpo (no data) but shows binac −
    fixed_critic; H7 is tested; H4 (binac_lam0) and H8 (binac_disc) have no data."""
    st = _study(tmp_path, ["fixed_critic", "critic_only", "binac"])
    runs = [r for r in _runs() if r["method"] in st.methods]
    text = "\n".join(section(st, runs, {"actor_train": 1280, "generated": 1280}))
    assert "**inconclusive (no data)**" in _line(text, "H1")
    assert "binac − fixed_critic +12.5 ± 12.4" in _line(text, "H1")
    assert _line(text, "H7").endswith("**supported**.")
    assert _line(text, "H4").endswith("**inconclusive (no data)**.")
    assert _line(text, "H8").endswith("**inconclusive (no data)**.")

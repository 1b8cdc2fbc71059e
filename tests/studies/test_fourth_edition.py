"""The fourth edition's hypotheses (studies/editions/fourth_edition.py) on hand-made runs of one base: the margins,
the reward information over the second half, the positive control, each verdict by the rules."""

from __future__ import annotations

import pytest

from binac_core.studies.editions import section
from binac_core.studies.study import equal_budget_totals
from binac_core.studies.study_report import build_study_report
from tests.studies.test_study_report import MEASURED, SIZES, _eval_steps, _run, _study

SEEDS = (0, 1, 2)
STEPS = (0, 10, 20)


def _bank(r: dict, critic_hits: dict, frozen_hits: float = 0.2, alarms: float = 0.5) -> dict:
    for critic, hits in (("critic", critic_hits), ("frozen_critic", dict.fromkeys(STEPS, frozen_hits))):
        r["metrics"][f"bank_eval/{critic}_hits_first_error"] = hits
        r["metrics"][f"bank_eval/{critic}_false_alarm"] = dict.fromkeys(STEPS, alarms)
    return r


def _train(r: dict, name: str, early: float, late: float) -> dict:
    """`train/<name>`: `early` at iterations 1-9 (outside the second half), `late` at 10-20."""
    r["metrics"][f"train/{name}"] = {i: early if i < 10 else late for i in range(1, 21)}
    return r


@pytest.fixture
def study(tmp_path):
    return _study(
        tmp_path,
        name="v4-main",
        iterations=20,
        methods=["grpo", "fixed_critic", "critic_only", "binac"],
        seeds=list(SEEDS),
        regimes={"sparse": {"difficulty": 2}},
        overrides={**SIZES, "bank.enabled": True},
        variants={"binac": {"reference": {}, "chosen": {"train.critic_kl_coef": 0.03}}},
        hypotheses="fourth_edition",
    )


def _runs(st) -> list[dict]:
    """Frozen critic: hits 20 %, false alarm 50 % (J −30). binac [chosen]: hits 40 / 45 / 50 % at 10 and 20 (90 %
    at step 0, outside the window), false alarm 50 %: margins +20, +25, +30 (mean 25, sd 5, half-width
    t(0.975, 2)·5/√3 = 12.4). binac [reference]: hits 30 %: margins +10; chosen − reference +10, +15, +20. Reward
    spread (iterations 10-20) chosen 0.3, reference 0.2 (both 5.0 before); chosen's hint value −0.05 / 0 / +0.05
    (mean 0). critic_only: bank hits 20 % at step 0, 35 % at 20. Held-out acc_single 10 % at step 0, then
    fixed_critic 30 % and binac [chosen] 50, 51, 52 % at every evaluation: +20, +21, +22 points at both
    equal-budget points (1280 samples: iteration 4 on actor training samples, 2 and 3 on generated ones)."""
    fixed = {"acc_single": {x: 0.1 if x == 0 else 0.3 for x in _eval_steps("fixed_critic", 20, 1280)}}
    runs = [_run("grpo", s, "sparse", iterations=20, total=1280) for s in SEEDS]
    runs += [_run("fixed_critic", s, "sparse", iterations=20, total=1280, evals=fixed) for s in SEEDS]
    for s, h in zip(SEEDS, (0.40, 0.45, 0.50), strict=True):
        acc = {"acc_single": {x: 0.1 if x == 0 else 0.5 + 0.01 * s for x in _eval_steps("binac", 20, 1280)}}
        r = _run("binac", s, "sparse", iterations=20, total=1280, variant="chosen", evals=acc)
        r = _bank(r, {0: 0.9, 10: h, 20: h})
        runs.append(_train(_train(r, "critic_reward_spread", 5.0, 0.3), "hint_value", 5.0, (s - 1) * 0.05))
        r = _bank(_run("binac", s, "sparse", iterations=20, total=1280, variant="reference"), dict.fromkeys(STEPS, 0.3))
        runs.append(_train(r, "critic_reward_spread", 5.0, 0.2))
        runs.append(_bank(_run("critic_only", s, "sparse", iterations=20, total=1280), {0: 0.2, 10: 0.3, 20: 0.35}))
    return runs


def _line(text: str, tag: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(f"- **{tag}**"))


def test_the_fourth_editions_verdicts_follow_the_rules(study, tmp_path):
    text = build_study_report(study, {2: MEASURED[2]}, {"sparse": 2}, [], _runs(study), tmp_path / "out")["text"]
    assert "averaged over the evaluations at 10, 20" in text and "## Pilot" not in text
    v1 = _line(text, "V1")
    assert "**supported**" in v1 and "margin of binac [chosen] +25.0 ± 12.4 (n=3; per seed +20.0, +25.0, +30.0)" in v1
    assert "its hits margin +25.0 ± 12.4" in v1
    assert "**supported**" in _line(text, "V2") and "+15.0 ± 12.4 (n=3; per seed +10.0, +15.0, +20.0)" in text
    v4 = _line(text, "V4")
    assert "critic_reward_spread, chosen − reference +10.0 ± 0.0" in v4, "iterations before the second half left out"
    assert "hint_value of binac [chosen] +0.0 ± 12.4" in v4 and "**inconclusive**" in v4
    v5 = _line(text, "V5")
    assert "**supported**" in v5 and "last − step 0 +15.0 ± 0.0" in v5
    v3 = _line(text, "V3")
    assert "**supported**" in v3 and "point on actor training samples (1280) +21.0 ± 2.5 (n=3; per seed +20.0" in v3


def test_an_arm_the_study_lacks_reads_no_data(study):
    runs = [r for r in _runs(study) if r.get("variant") != "reference"]
    lines = section(study, runs, equal_budget_totals(study))
    assert "no data" in _line("\n".join(lines), "V2")

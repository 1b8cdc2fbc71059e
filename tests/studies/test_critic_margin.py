"""The fourth edition's primary endpoint (binac_core/studies/critic_margin.py) on hand-computed runs: the margin
of a critic's discrimination (hits − false alarm) over the frozen critic's, averaged over the second half."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from binac_core.studies import critic_margin

STEPS = (0, 10, 20, 30, 40, 50, 60)


def _run(seed: int, hits: dict, alarms: dict, frozen=(0.2, 0.5), split: str = "eval") -> dict:
    metrics = {
        f"bank_{split}/critic_hits_first_error": hits,
        f"bank_{split}/critic_false_alarm": alarms,
        f"bank_{split}/frozen_critic_hits_first_error": dict.fromkeys(STEPS, frozen[0]),
        f"bank_{split}/frozen_critic_false_alarm": dict.fromkeys(STEPS, frozen[1]),
        f"bank_{split}/critic_verdict_balanced_accuracy": dict.fromkeys(STEPS, 0.5),
        f"bank_{split}/frozen_critic_verdict_balanced_accuracy": dict.fromkeys(STEPS, 0.45),
    }
    return {"seed": seed, "metrics": metrics}


class _Study(SimpleNamespace):
    def config(self):
        return SimpleNamespace(task=SimpleNamespace(eval_split=self.split))


def test_the_window_is_the_second_half_of_the_runs_evaluations():
    assert critic_margin.window(_Study(iterations=60, eval_every=10, split="eval")) == [30, 40, 50, 60]
    assert critic_margin.window(_Study(iterations=25, eval_every=10, split="eval")) == [20, 25]


def test_a_critic_that_flags_everything_has_a_negative_margin_though_its_hits_rise():
    """Hits 50 % with 99 % false alarm (J −49) against the frozen 20 % / 50 % (J −30): −19 points, though its hits
    margin is +30."""
    flags = _run(0, dict.fromkeys(STEPS, 0.5), dict.fromkeys(STEPS, 0.99))
    st = _Study(iterations=60, eval_every=10, split="eval")
    assert critic_margin.margins(st, [flags]) == {0: pytest.approx(-0.19)}
    assert critic_margin.margins(st, [flags], "hits_first_error") == {0: pytest.approx(0.30)}
    assert critic_margin.margins(st, [flags], "verdict_balanced_accuracy") == {0: pytest.approx(0.05)}


def test_the_margin_averages_the_window_steps_only_and_reads_the_studys_split():
    """Hits 90 % before the window (step 10), then 30, 40, 50, 60 % at 30-60 with 40 % false alarm: J −10, 0,
    +10, +20 against the frozen −30: margins +20, +30, +40, +50, mean +35. On the val half nothing is logged."""
    hits = {0: 0.2, 10: 0.9, 20: 0.9, 30: 0.3, 40: 0.4, 50: 0.5, 60: 0.6}
    run = _run(1, hits, dict.fromkeys(STEPS, 0.4))
    assert critic_margin.margins(_Study(iterations=60, eval_every=10, split="eval"), [run]) == {1: pytest.approx(0.35)}
    assert critic_margin.margins(_Study(iterations=60, eval_every=10, split="val"), [run]) == {}


def test_a_run_missing_a_window_evaluation_has_no_margin():
    hits = {s: 0.3 for s in STEPS if s != 50}
    run = _run(2, hits, dict.fromkeys(STEPS, 0.4))
    assert critic_margin.margins(_Study(iterations=60, eval_every=10, split="eval"), [run]) == {}

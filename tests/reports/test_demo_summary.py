"""`binac demo`'s table and picture (binac_core/reports/demo.py) come from the same stored rows: on a planted store
of held-out rows whose measures are counted by hand, the table's step 0 -> last values, the curves and what the
PNG draws are the same numbers, with the problems behind each; the PNG opens and has one curve per method."""

from __future__ import annotations

import re

import pytest

from binac_core.foundation.workspace import Workspace
from binac_core.reports import demo
from binac_core.store import storage
from tests.trajectory_rows import trajectory_row

RUNS = {"grpo": "run-g", "fixed_critic": "run-f", "binac": "run-b"}
STEPS = (0, 5, 10)


def _plant(ws: Workspace) -> dict:
    """10 held-out problems per (run, step): `right` of them right at first (`single` and the feedback rows'
    attempts), the others wrong at step 2, the critic naming step 2 on `hits` of them, the refinements right on
    `fixed` of the rows. Returns {(method, step): (right, hits, frozen hits, fixed)}."""
    truth = {}
    for i, (method, run) in enumerate(RUNS.items()):
        for step in STEPS:
            right, fixed = 1 + step // 5 * (i + 1), 3 + step // 5
            hits, frozen = min(2 + step // 5 * i, 10 - right), min(2, 10 - right)
            truth[method, step] = (right, hits, frozen, fixed)

            def rows(protocol, named, run=run, step=step, right=right, fixed=fixed, method=method):
                out = []
                for p in range(10):
                    wrong = p >= right
                    row = dict(
                        run_id=run,
                        method=method,
                        step=step,
                        protocol=protocol,
                        problem_id=f"q{p}",
                        attempt_reward=0.0 if wrong else 1.0,
                        first_wrong_step=2 if wrong else None,
                    )
                    if protocol != "single":
                        row |= dict(
                            round=1,
                            refined_reward=1.0 if p < fixed else 0.0,
                            feedback_step=2 if wrong and p - right < named else None,
                        )
                    out.append(trajectory_row(**row))
                return out

            storage.write_shard(ws, run, "single", step, rows("single", 0))
            storage.write_shard(ws, run, "feedback", step, rows("feedback", hits))
            if method == "binac":
                storage.write_shard(ws, run, "feedback_frozen", step, rows("feedback_frozen", frozen))
            storage.write_shard(
                ws, run, "train", step + 1, [trajectory_row(run_id=run, split="train", protocol="train", step=step + 1)]
            )
    return truth


@pytest.fixture
def planted(tmp_path):
    ws = Workspace(tmp_path / "home")
    return ws, _plant(ws)


def test_the_curves_are_the_stored_rows_measures_with_their_counts(planted):
    ws, truth = planted
    curves = demo.held_out_curves(ws, RUNS)
    assert set(curves) == set(RUNS) and all(sorted(c) == list(STEPS) for c in curves.values())
    for (method, step), (right, hits, frozen, fixed) in truth.items():
        at = curves[method][step]
        assert at["acc_single"] == (right / 10, 10)
        assert at["acc_feedback"] == (fixed / 10, 10)
        assert at["critic_hits_first_error"] == (hits / (10 - right), 10 - right)
        if method == "binac":
            assert at["frozen_critic_hits_first_error"] == (frozen / (10 - right), 10 - right)
        else:
            assert "frozen_critic_hits_first_error" not in at


def test_the_table_and_the_png_show_the_same_numbers(planted, tmp_path):
    ws, _ = planted
    curves = demo.held_out_curves(ws, RUNS)
    lines = demo.table(curves)
    drawn = demo.plot(curves, tmp_path / "curves.png", "demo")
    # The table: one block per method; each measure's step 0 -> last value, in %, and the problems behind them.
    printed, method = {}, None
    for line in lines[1:]:
        if m := re.match(r"  (\w+) \(iterations ([\d, ]+)\):", line):
            method, steps = m.group(1), [int(x) for x in m.group(2).split(", ")]
            continue
        label, cells = re.match(r"    (.+?)  +(\S.*)$", line).groups()
        values = [re.fullmatch(r"\s*(\S+) \(n=(\d+)\)\s*", c).groups() for c in cells.split(" -> ")]
        measure = next(k for k, v in demo.LABELS.items() if v == label)
        printed[method, measure] = (steps, [float(v) for v, _ in values], [int(n) for _, n in values])
    assert {m for m, _ in printed} == set(RUNS)
    for (method, measure), (steps, values, counts) in printed.items():
        xs, ys = drawn[method, measure]  # what the PNG draws, read back from its lines
        assert xs == steps == list(STEPS)
        assert values == [round(y, 1) for y in ys]
        assert (xs, ys) == demo.series(curves, method, measure)
        assert counts == [curves[method][s][measure][1] for s in STEPS]
    # every drawn curve is a printed row, and acc_single has one curve per method
    assert set(drawn) == set(printed)
    assert {m for m, k in drawn if k == "acc_single"} == set(RUNS)


def test_the_png_opens(planted, tmp_path):
    import matplotlib.image

    ws, _ = planted
    demo.plot(demo.held_out_curves(ws, RUNS), tmp_path / "curves.png", "demo")
    image = matplotlib.image.imread(tmp_path / "curves.png")
    assert image.shape[0] > 300 and image.shape[1] > 1000


def _plant_bank(ws: Workspace) -> dict:
    """binac's bank rows on the bank's `eval` half at every step (and, to be left out, on its `val` half): 10
    attempts, 6 wrong at step 2 and 4 right with every step right; its critic names step 2 on `hits` wrong ones
    and a step on `alarms` right ones, the frozen critic on 2 and 1. Returns {step: (hits, alarms)}."""
    truth = {}
    for step in STEPS:
        hits, alarms = 2 + step // 5, step // 5
        truth[step] = (hits, alarms)
        for protocol, (h, a) in (("bank", (hits, alarms)), ("bank_frozen", (2, 1))):
            for split in ("bank_eval", "bank_val"):
                rows = [
                    trajectory_row(
                        run_id=RUNS["binac"],
                        method="binac",
                        step=step,
                        split=split,
                        protocol=protocol,
                        problem_id=f"b{p}",
                        round=1,
                        attempt_reward=0.0 if p < 6 else 1.0,
                        first_wrong_step=2 if p < 6 else None,
                        feedback_step=(2 if p < h else None) if p < 6 else (3 if p - 6 < a else None),
                    )
                    for p in range(10)
                ]
                if split == "bank_val":  # a different half, to be left out: every feedback names step 2
                    rows = [trajectory_row(**{**r, "feedback_step": 2}) for r in rows]
                storage.write_shard(ws, RUNS["binac"], f"{protocol}-{split}", step, rows)
    return truth


def test_with_a_bank_the_critic_panels_read_its_eval_half(planted, tmp_path):
    ws, _ = planted
    truth = _plant_bank(ws)
    curves = demo.held_out_curves(ws, RUNS)
    for step, (hits, alarms) in truth.items():
        at = curves["binac"][step]
        assert at["bank_critic_hits_first_error"] == (hits / 6, 6)
        assert at["bank_critic_false_alarm"] == (alarms / 4, 4)
        assert at["bank_frozen_critic_hits_first_error"] == (2 / 6, 6)
        assert at["bank_frozen_critic_false_alarm"] == (1 / 4, 4)
    assert "bank_critic_hits_first_error" not in curves["grpo"][0]
    drawn = demo.plot(curves, tmp_path / "curves.png")
    measures = demo.drawn_measures(curves)
    assert "critic_hits_first_error" not in measures, "the bank's panels replace the moving attempts'"
    assert {k for _, k in drawn} == set(measures) - {"critic_hits_first_error"}
    lines = demo.table(curves)
    binac_rows = [line for line in lines if line.startswith("    bank:")]
    assert len(binac_rows) == 4, "binac's critic and the frozen critic, hits and false alarm"
    assert binac_rows[0].split("  ")[-1].strip().endswith(f"{100 * truth[10][0] / 6:.1f} (n=6)")

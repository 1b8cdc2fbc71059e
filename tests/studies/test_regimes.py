"""The base-model measurement before a study's RL runs (binac_core/studies/regimes.py): the shortcut check on scripted
students whose behaviour after approval is known, so the instrument is tested before the study reads it."""

import pytest

from binac_core.benchmarks import synthetic as syn
from binac_core.foundation.config import load_config
from binac_core.model.generation import Generation
from binac_core.studies.regimes import measure_base

PROBLEMS = [syn.make_row(q) for q in ("07+5-9", "50+1+2", "98+5-3", "11-2-2")]


def _wrong(question: str) -> str:
    """A trace whose first result is off by one and whose later steps build on it (step 1 is the first wrong step
    and the answer is wrong)."""
    start, ops = syn.parse_question(question)
    value, steps = start, []
    for k, (op, b) in enumerate(ops):
        c = syn.apply_op(value, op, b, 100) + (1 if k == 0 else 0)
        steps.append(syn.Step(value, op, b, c % 100, 2))
        value = c % 100
    return syn.render_trace(steps)


class ScriptedStudent:
    """First attempts alternate wrong (step 1) / right; the critic role always approves; a refinement after
    approval copies the attempt (`after_approval="copy"`), restates its answer line alone (`"answer"`, the form
    of `task.approval_refinement: answer`) or writes the correct solution (`"solve"`: the first edition's
    shortcut); after any other feedback it writes the correct solution."""

    def __init__(self, after_approval: str):
        self.after_approval, self.calls = after_approval, 0

    def generate(self, prompts, adapter, params):
        return [Generation(self._answer(m), [1], [2], [0.0]) for m in prompts]

    def _answer(self, messages) -> str:
        last = messages[-1]["content"]
        if last.startswith("Check:"):
            return syn.LOOKS_CORRECT
        question = last.rsplit("Solve: ", 1)[1]
        if len(messages) == 1:
            self.calls += 1
            return _wrong(question) if self.calls % 2 else syn.make_row(question)["solution"]
        if syn.LOOKS_CORRECT in last and self.after_approval == "copy":
            return messages[1]["content"]
        if syn.LOOKS_CORRECT in last and self.after_approval == "answer":
            return f"A: {syn.final_answer(messages[1]['content'])}"
        return syn.make_row(question)["solution"]


@pytest.mark.parametrize("after_approval, right, copy", [("copy", 0.0, 1.0), ("answer", 0.0, 1.0), ("solve", 1.0, 0.0)])
def test_the_shortcut_check_tells_a_copying_student_from_a_shortcut(after_approval, right, copy):
    gen = load_config("micro").generation
    out = measure_base(ScriptedStudent(after_approval), PROBLEMS, group_size=2, gen=gen, seed=0, benchmark="synthetic")
    assert out["single"] == 0.5 and out["shortcut_n"] == 4  # one wrong attempt per problem
    assert out["shortcut_right"] == right and out["shortcut_copy"] == copy
    # the initial critic (always "Looks correct.") approves every wrong attempt and names no step
    assert out["critic_approves_wrong"] == 1.0 and out["critic_false_alarm"] == 0.0
    assert out["critic_hits_first_error"] == 0.0
    assert out["critic_approved_wrong_n"] == 4 and out["critic_approved_wrong_right"] == right
    # the oracle fixes every wrong attempt of a student that follows hints, and breaks nothing
    assert out["oracle"] == 1.0 and out["oracle_broken"] == 0.0 and out["oracle_fixed"] == 0.5
    # the preconditions: this student solves after any hint, so the hint's content is worth nothing (G2, G4), and
    # its critic approves everything (G3); one greedy attempt per problem (the alternation goes on: 2 of 4 right)
    pre = {k: v["value"] for k, v in out["preconditions"].items()}
    assert pre["fix_first_error"] == pre["fix_other_step"] == pre["fix_self_correct"] == 1.0 and pre["hint_gap"] == 0
    assert pre["approves_right"] == pre["approves_wrong"] == 1.0 and pre["approval_gap"] == 0.0
    assert pre["critic_hits"] == 0.0 and pre["oracle_over_verifier"] == 0.0
    assert out["greedy_single"] == 0.5 and out["preconditions"]["greedy_single"]["n"] == 4


def test_the_base_checks_script_measures_a_micro_base(tmp_path, micro_base):
    """scripts/base_checks.py, the checks of a base without a study: measures a base it finds in `<out>/model` (the
    session's micro base; building one is `build_base_model`, tested in tests/model/test_base_model.py) and writes the
    measurements."""
    import json
    import shutil
    import subprocess
    import sys

    from conftest import REPO

    shutil.copytree(micro_base, tmp_path / "model")
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "base_checks.py"),
            "--preset",
            "micro",
            "--difficulties",
            "2",
            "--group-size",
            "2",
            "--split",
            "eval",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "d2: single" in proc.stdout and "right after approval" in proc.stdout
    checks = json.loads((tmp_path / "checks.json").read_text())["2"]
    assert checks["problems"] == 16 and checks["group_size"] == 2 and {"shortcut_right", "oracle"} <= set(checks)


def test_the_base_checks_script_applies_a_study_files_rules_and_gates(tmp_path, micro_base):
    """With `--study`, the script measures the validation split, chooses the regimes by the file's rules, applies its
    gates per regime and exits 1 naming each failing gate, its regime and its value (an all-wrong share of at least 1
    cannot hold at 16 problems: the Wilson interval's lower end stays below 1; greedy accuracy is always at most 1)."""
    import json
    import shutil
    import subprocess
    import sys

    from conftest import REPO

    shutil.copytree(micro_base, tmp_path / "model")
    study = tmp_path / "s.yaml"
    study.write_text(
        "name: s\npreset: micro\niterations: 1\nmethods: [grpo]\nseeds: [0]\n"
        "regimes: {easy: {rule: {single_closest_to: 0.3, search: [2, 3]}}}\n"
        "rule_measure: {group_size: 2, seed: 0}\n"
        "gates: {all: {all_wrong_frac_at_least: 1.0}, easy: {greedy_single_at_most: 1.0}}\n"
    )
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "base_checks.py"), "--study", str(study), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=REPO,
    )
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    checks = json.loads((tmp_path / "checks.json").read_text())
    d = checks["difficulties"]["easy"]
    assert d in (2, 3) and checks["measured"][str(d)]["problems"] == 16  # micro's n_val
    (line,) = checks["failures"]
    assert line.startswith(f"regime easy (difficulty {d}): gate all_wrong_frac_at_least 1 fails: G1")
    assert line in proc.stdout
    assert "critic_hits_chance" in proc.stdout and "1 gate(s) failed" in proc.stdout

"""The kinds of binac_core/rl/kinds.py and the adapter roles (`binac_core.model.stage_io.AdapterRole`): a stored
feedback source reads back as its member whether it holds the identifier or a label stored runs hold (an evaluation
file, studies/archive's tags), reports show the label, the enums render as their values; and outside kinds.py no
code compares with a kind's string: it compares with the members (an AST walk over the project's code, with a
hand-made case it must flag)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from report_meta import report_meta

from binac_core.errors import BinacError
from binac_core.model.stage_io import AdapterRole
from binac_core.rl.kinds import (
    FEEDBACK_SOURCE_LABELS,
    STORED_LABELS,
    CriticRewardForm,
    EvalProtocol,
    FeedbackSource,
)

REPO = Path(__file__).resolve().parents[1]
ROOTS = ("binac_core", "tasks", "flows", "bench", "scripts")
KINDS_MODULE = Path("binac_core/rl/kinds.py")
KIND_STRINGS = frozenset(
    {
        *(m.value for kind in (FeedbackSource, CriticRewardForm, EvalProtocol, AdapterRole) for m in kind),
        *STORED_LABELS,
        *FEEDBACK_SOURCE_LABELS.values(),
    }
)
NOT_KINDS = {
    ("binac_core/model/stage_io.py", "'feedback' not in d"): "a ScoredBatch's JSON key",
    ("flows/study.py", "'oracle' not in measured[d]"): "a base measurement's key (the oracle's bound)",
    ("scripts/base_checks.py", "'oracle' not in results[d]"): "a base measurement's key (the oracle's bound)",
    ("scripts/base_checks.py", "'oracle' in m"): "a base measurement's key (the oracle's bound)",
}
"""Comparisons with a string that is also a kind's, where the string is not that kind (file, comparison: why)."""

ARCHIVED_RUN = """{"run_key": "43e1a91d3d3d", "run_name": "binac_lam0-testbed-s2", "status": "FINISHED",
 "tags": {"benchmark": "synthetic", "eval_feedback_source": "critic (trained)", "method": "binac_lam0"}}"""
"""An excerpt of studies/archive/runs/43e1a91d3d3d/run.json: a stored run whose tag holds a label."""


def _strings(node: ast.AST):
    """The string constants `node` is or (a tuple, list or set display) holds."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node.value
    elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        for element in node.elts:
            yield from _strings(element)


def kind_comparisons(source: str) -> list[tuple[int, str]]:
    """(line, code) of every comparison (==, !=, in, not in, is, ...; a `match` case's value) in `source` with a
    string constant that is a kind's value or label. Subscripts, keyword arguments and other uses of such a string
    are not comparisons."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(s in KIND_STRINGS for operand in operands for s in _strings(operand)):
                found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.MatchValue) and any(s in KIND_STRINGS for s in _strings(node.value)):
            found.append((node.lineno, f"case {ast.unparse(node.value)}"))
    return found


def test_the_walk_flags_comparisons_with_a_kinds_string_and_nothing_else():
    flagged = kind_comparisons("""
if form == "penalty": pass
if protocol in ("single", "gated"): pass
if "critic (trained)" != label: pass
match form:
    case "after": pass
rows["feedback"] = f(protocol="single", source="oracle")
if form == CriticRewardForm.PENALTY or name == "binac": pass
if role == AdapterRole.CRITIC or row.role in tuple(AdapterRole): pass
if source == "critic" or adapter.name != "actor": pass
""")
    assert [line for line, _ in flagged] == [2, 3, 4, 6, 10, 10]


def test_no_code_compares_with_a_kinds_string_outside_its_enum():
    found = []
    for root in ROOTS:
        for path in sorted((REPO / root).rglob("*.py")):
            rel = path.relative_to(REPO)
            if rel == KINDS_MODULE:
                continue
            found += [
                f"{rel}:{line}: {code}"
                for line, code in kind_comparisons(path.read_text())
                if (rel.as_posix(), code) not in NOT_KINDS
            ]
    assert not found, "compare with the enum members (binac_core/rl/kinds.py):\n" + "\n".join(found)


def test_every_not_a_kind_exception_is_still_there():
    """An exception whose comparison is gone is removed from `NOT_KINDS` (it would excuse a new one)."""
    present = {(file, code) for file, _ in NOT_KINDS for _, code in kind_comparisons((REPO / file).read_text())}
    assert set(NOT_KINDS) <= present


def test_identifiers_are_the_values_and_labels_live_in_one_mapping():
    assert [s.value for s in FeedbackSource] == ["critic", "critic_frozen", "critic_adapter", "fixed", "oracle"]
    assert set(FEEDBACK_SOURCE_LABELS) == set(FeedbackSource)
    assert FeedbackSource.CRITIC_BASE.label == "critic (base, frozen)"
    assert [f.value for f in CriticRewardForm] == ["r1", "penalty", "after"]
    assert [r.value for r in AdapterRole] == ["actor", "critic"]  # the adapters' names and folders
    assert [p.value for p in EvalProtocol] == [
        "single",
        "single_greedy",
        "feedback",
        "gated",
        "feedback_exec",
        "gated_exec",
        "feedback_frozen",
        "bank",
        "bank_frozen",
    ]
    # a member written anywhere is its identifier: shard names, tags, params and messages stay byte-identical
    assert f"eval-{EvalProtocol.FEEDBACK_FROZEN}" == "eval-feedback_frozen"
    assert str(FeedbackSource.FIXED) == "fixed" and json.dumps([CriticRewardForm.AFTER]) == '["after"]'


def test_a_stored_source_reads_back_from_its_identifier_or_a_stored_label():
    for source in FeedbackSource:
        assert FeedbackSource.parse(source.value) is source
    assert {label: FeedbackSource.parse(label) for label in STORED_LABELS} == {
        "critic (trained)": FeedbackSource.CRITIC_TRAINED,
        "critic (base, frozen)": FeedbackSource.CRITIC_BASE,
        "critic (adapter)": FeedbackSource.CRITIC_ADAPTER,
        "fixed instruction": FeedbackSource.FIXED,
        "oracle (rule-based)": FeedbackSource.ORACLE,
    }
    archived = json.loads(ARCHIVED_RUN)["tags"]["eval_feedback_source"]
    assert FeedbackSource.parse(archived) is FeedbackSource.CRITIC_TRAINED
    with pytest.raises(BinacError, match="unknown feedback source 'critic trained' .*critic_frozen"):
        FeedbackSource.parse("critic trained")


def test_an_evaluation_file_with_a_label_reads_back_and_is_written_with_the_identifier(tmp_path):
    from binac_core.reports.report import build_report
    from binac_core.rl.evaluation import Evaluation

    attempt = {
        "problem_id": "p1",
        "sample_idx": 0,
        "prompt_text": "Q: 1+1",
        "prompt_ids": [3],
        "text": "A: 2",
        "token_ids": [1],
        "logprobs": [0.0],
    }
    stored = {
        "metrics": {"acc_single": 0.0},
        "feedback_source": "fixed instruction",
        "single": {"attempts": [attempt], "r0": [0.0]},
    }  # an evaluation file that holds the label
    result = Evaluation.from_json(stored)
    assert result.feedback_source is FeedbackSource.FIXED
    assert result.to_json()["feedback_source"] == "fixed"
    assert Evaluation.from_json(result.to_json()).feedback_source is FeedbackSource.FIXED
    ev = {"eval/acc_single": 0.5, "eval/acc_feedback": 0.25, "eval/acc_gated_k2": 0.5}
    runs = [
        {
            "method": "self_correct",
            "seed": 0,
            "feedback_source": "fixed",
            "samples_per_iteration": 4,
            "evals": {0: ev, 1: ev},
        }
    ]  # a run's source as a stored string
    text = build_report(runs, report_meta(), tmp_path)["text"]
    assert f"| self_correct | {result.feedback_source.label} |" in text
    assert "| self_correct | fixed instruction |" in text

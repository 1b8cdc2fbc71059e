"""What a benchmark provides: `Benchmark`, a frozen dataclass of functions (one instance per benchmark name).

The pipeline reads a benchmark only through these fields, so a new benchmark is a new module that builds one
`Benchmark` and one registration line in `binac_core/benchmarks/__init__.py`. This module imports nothing from the
benchmark modules (they import it), so the registry can import them without an import cycle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from binac_core.benchmarks.verdict import VERDICT_LINE, VerdictSyntax

if TYPE_CHECKING:
    from binac_core.foundation.config import TaskConfig

Messages = list[dict]
"""Chat messages, `[{"role": ..., "content": ...}]`; the tokenizer's chat template renders them."""


@dataclass(frozen=True)
class FeedbackAnalysis:
    """Feedback read against the known first error of an attempt: the critic measures' columns
    (`first_wrong_step`, `feedback_step`: binac_core/store/records.py, binac_core/reports/measures.py)."""

    first_wrong_step: Callable[[str, str], int | None]
    """(question, attempt) -> the 1-based number of the attempt's first wrong step, or None when every step is
    right."""
    named_step: Callable[[str], int | None]
    """feedback -> the number of the step it names as wrong, or None when it names none."""
    approves: Callable[[str], bool]
    """feedback -> whether it approves the attempt (says it is correct)."""
    approval: str
    """The feedback text that approves an attempt (the shortcut check of `binac_core.studies.regimes` gives it to every
    attempt)."""
    right_steps: Callable[[str, str], list[int]] | None = None
    """(question, attempt) -> the numbers of the attempt's locally right steps (right for their written operands);
    with `critique`, the other-step hint of the precondition checks (`binac_core.studies.preconditions`)."""
    critique: Callable[[dict, str, int | None], str] | None = None
    """(row, attempt, step) -> a feedback in the form the critic writes for that row that names `step` as wrong,
    or approves the attempt when `step` is None: the written feedback of the base checks (approval, another
    step's hint), so that they ask the actor what the critic's own feedback would."""


@dataclass(frozen=True)
class Benchmark:
    """One benchmark: its rows, the prompts of the three roles, its one grader, and what only some have."""

    name: str
    """The registry's key, the value of `task.benchmark`."""
    required_fields: tuple[str, ...]
    """Row fields `grade` reads besides the response; a row lacking one is a configuration error."""
    load_rows: Callable[[TaskConfig, str], list[dict]]
    """(task config, split `train` | `eval`) -> rows with at least `id` and `question`, in a fixed order; the
    eval split holds at most `task.n_test` rows."""
    actor_messages: Callable[[dict], Messages]
    """row -> the first-attempt prompt."""
    critic_messages: Callable[[dict, str, str | None, bool], Messages]
    """(row, attempt, execution result or None, verdict) -> the critic's prompt; with `verdict` (`critic.verdict`)
    it also asks for a last verdict line (`binac_core.benchmarks.prompts.VERDICT`). Never the reference: it reads the row's
    question only, and the execution result only when `critic_sees_execution`."""
    refine_messages: Callable[[dict, str, str], Messages]
    """(row, attempt, feedback) -> the second-attempt prompt."""
    grade: Callable[[dict, str], tuple[bool, str | None]]
    """(row, response) -> (correct, the failure reason the critic may be shown, or None): THE grading function,
    for RL rewards and evaluation alike. It may raise: `binac_core.grading` counts, logs and scores that 0."""
    critic_sees_execution: bool = False
    """The critic may be shown the attempt's execution result (`grade`'s failure reason, or `All tests passed.`):
    the code benchmarks, which also get the `_exec` evaluation protocols."""
    runs_code: bool = False
    """`grade` runs untrusted code from the response (MBPP's programs, in `binac_core.grading.sandbox`): every
    entry point then checks, before any compute, that the sandbox's isolation is the one `grading.sandbox`
    requires (`binac_core.runs.plans.check_sandbox`)."""
    check_data: Callable[[str], object] | None = None
    """split -> raises a one-line `BinacError` when the split's data is missing or the benchmark lacks the split
    (checked before any compute); None for a benchmark that builds its rows (the synthetic task)."""
    oracle_feedback: Callable[[dict, str], str] | None = None
    """Optional: (row, attempt) -> a rule-based critic's feedback, which reads the reference (`oracle_critic`)."""
    verdict_syntax: VerdictSyntax = VERDICT_LINE
    """How its feedback states a verdict on the attempt (`binac_core.benchmarks.verdict`): the `Verdict: ...` line the
    benchmarks' critic prompts ask for, or the synthetic task's own phrases."""
    feedback_analysis: FeedbackAnalysis | None = None
    """Optional: the analysis of feedback against the known first error (the critic measures, a study's regimes)."""

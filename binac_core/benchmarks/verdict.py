"""The critic's verdict on an attempt, read from its feedback: `correct`, `incorrect`, or `none`.

One parser for every benchmark (`parse_verdict`); what differs is the wording, a `VerdictSyntax` of two patterns
that each benchmark holds (`Benchmark.verdict_syntax`):

- the benchmarks (math, gsm8k, mbpp, gpqa): the critic is asked (`critic.verdict`, `binac_core.benchmarks.prompts.VERDICT`)
  to end with one line `Verdict: correct` or `Verdict: incorrect` (`VERDICT_LINE`: any case, markdown emphasis
  around the word or the value allowed, `**Verdict:** Incorrect`);
- the synthetic task: its feedback is a verdict already (`binac_core.benchmarks.synthetic.VERDICT_SYNTAX`).

The rule, the same everywhere: a feedback that says only "correct" is `correct`, only "incorrect" is `incorrect`;
one that says neither (no verdict line, a truncated one, "Verdict: partly correct") or both (contradictory) is
`none`. A verdict is never guessed from the rest of the text, and its position does not matter (a verdict line
first is read as well as one last).

What the verdicts are measured against is the verifier on the first attempt (`binac_core.reports.measures`,
`critic_verdict_measures`); the critic's optional reward for a matching verdict is
`binac_core.rl.critic_reward.verdict_bonus` (`train.critic_verdict_weight`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CORRECT, INCORRECT, NONE = "correct", "incorrect", "none"
"""The values of a verdict (the `feedback_verdict` column of `trajectories`)."""


@dataclass(frozen=True)
class VerdictSyntax:
    """How a benchmark's feedback says its verdict: a pattern for each value (searched anywhere in the text)."""

    correct: re.Pattern
    incorrect: re.Pattern


_LINE = r"\bverdict\W{0,4}?\s*[:\-=]\s*[*_`\"']{0,3}\s*%s\b"
VERDICT_LINE = VerdictSyntax(
    correct=re.compile(_LINE % "correct", re.IGNORECASE),
    incorrect=re.compile(_LINE % "incorrect", re.IGNORECASE),
)
"""`Verdict: correct` / `Verdict: incorrect` (the benchmarks' verdict line). `correct` does not match inside
`incorrect`: the value must follow the colon and its emphasis directly."""


def parse_verdict(feedback: str, syntax: VerdictSyntax = VERDICT_LINE) -> str:
    """`correct`, `incorrect` or `none` (module docstring): `none` when the text says neither or both."""
    says_correct = syntax.correct.search(feedback) is not None
    says_incorrect = syntax.incorrect.search(feedback) is not None
    if says_correct == says_incorrect:
        return NONE
    return CORRECT if says_correct else INCORRECT


def verifier_verdict(attempt_reward: float) -> str:
    """The verdict the verifier gives the attempt: `correct` when it is rewarded (reward > 0), else `incorrect`."""
    return CORRECT if attempt_reward > 0 else INCORRECT


def verdict_matches(verdict: str, attempt_reward: float) -> bool:
    """Whether the critic's verdict is the verifier's on the attempt (`none` never matches)."""
    return verdict == verifier_verdict(attempt_reward)

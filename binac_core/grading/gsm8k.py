"""GSM8K grader: the response's final number against the gold number (the text after `####`), as numbers.

The final number is the one after the last explicit answer marker, whichever comes last in the text: `#### N`
(GSM8K's own format, https://github.com/openai/grade-school-math), `The answer is N` (lm-eval's
gsm8k-cot filter), or `\\boxed{N}` (the last number inside the box); with no marker, the last number of the
response (lm-eval's "flexible-extract"). Thousands separators and `$` are ignored; `18`, `18.0` and `18.00` are
equal (exact rational comparison, no float rounding). It does not read words ("eighteen") or fractions ("3/4").
"""

from __future__ import annotations

import re
from fractions import Fraction

from binac_core.grading.extract import last_boxed

# A leading minus only when it cannot be a binary minus ("10-5" reads as 10 and 5, "= -5" as -5).
NUMBER = r"(?:(?<![\w)\].])-)?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
_NUMBER_RE = re.compile(rf"(?<![\d.]){NUMBER}")
_MARKERS = (
    re.compile(rf"####\s*\\?\$?\s*({NUMBER})"),
    re.compile(rf"(?i)answer\s+is\s*:?\s*\\?\$?\s*({NUMBER})"),
)


def final_number(response: str) -> str | None:
    """The final answer number of a response as written (commas kept), or None when it has no number."""
    found: list[tuple[int, str]] = []
    for pattern in _MARKERS:
        found += [(m.start(), m.group(1)) for m in pattern.finditer(response)]
    boxed_at = max(response.rfind("\\boxed"), response.rfind("\\fbox"))
    boxed = last_boxed(response) if boxed_at >= 0 else None
    inside = _NUMBER_RE.findall(boxed) if boxed else []
    if inside:
        found.append((boxed_at, inside[-1]))
    if found:
        return max(found)[1]
    numbers = _NUMBER_RE.findall(response)
    return numbers[-1] if numbers else None


def to_number(text: str) -> Fraction | None:
    try:
        return Fraction(text.replace(",", "").replace("$", "").strip())
    except (ValueError, ZeroDivisionError):
        return None


def is_correct(row: dict, response: str) -> bool:
    """True when the response's final number equals `row["answer"]` exactly (as rationals)."""
    pred = final_number(response)
    gold = to_number(str(row["answer"]))
    if gold is None:
        raise ValueError(f"gold answer is not a number: {row['answer']!r}")
    return pred is not None and to_number(pred) == gold

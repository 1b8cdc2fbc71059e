"""GPQA (multiple choice) grader: the letter of the last `Answer: X` line against the gold letter.

The pattern is simple-evals' `ANSWER_PATTERN_MULTICHOICE`, `(?i)Answer[ \\t]*:[ \\t]*\\$?([A-D])\\$?`
(https://github.com/openai/simple-evals, common.py; gpqa_eval.py scores the exact letter). Two documented
departures: the LAST match counts (the final line the prompt asks for), and markdown bold markers (`**`) are
removed first so that `**Answer:** B` reads as `Answer: B`. Like simple-evals, the match is case-insensitive
and does not need a word boundary: `Answer: because` reads as B.
"""

from __future__ import annotations

import re

ANSWER_PATTERN_MULTICHOICE = r"(?i)Answer[ \t]*:[ \t]*\$?([A-D])\$?"
_ANSWER_RE = re.compile(ANSWER_PATTERN_MULTICHOICE)


def answer_letter(response: str) -> str | None:
    """The upper-case letter of the last `Answer: X` in the response, or None."""
    found = _ANSWER_RE.findall(response.replace("**", ""))
    return found[-1].upper() if found else None


def is_correct(row: dict, response: str) -> bool:
    return answer_letter(response) == str(row["answer"]).strip().upper()

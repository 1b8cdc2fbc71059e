"""Final-answer extraction shared by the graders and the data loaders: the last `\\boxed{...}` of a text.

Follows Hendrycks MATH's `last_boxed_only_string` / `remove_boxed` (also used by lm-eval and verl,
https://github.com/volcengine/verl/blob/b178a3cd56f58b2d502255daba591e92833930a7/verl/utils/reward_score/math_reward.py):
the last `\\boxed` or `\\fbox` wins, braces are matched, the `\\boxed 5` form (no braces) reads up to the next
space or `$`. An unclosed last box (a truncated response) gives None rather than a guess.
"""

from __future__ import annotations

import re

_BOX_RE = re.compile(r"\\(?:boxed|fbox)")


def last_boxed(text: str) -> str | None:
    """The content of the last `\\boxed{...}` / `\\fbox{...}` in `text`, or None when there is none."""
    matches = list(_BOX_RE.finditer(text))
    if not matches:
        return None
    rest = text[matches[-1].end() :]
    if rest.startswith("{"):
        return _balanced(rest)
    if rest[:1] == " ":
        token = re.match(r" +([^\s$]+)", rest)
        return token.group(1) if token else None
    return None


def _balanced(rest: str) -> str | None:
    """The text inside the brace group that `rest` opens, or None when it never closes."""
    depth = 0
    for i, ch in enumerate(rest):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return rest[1:i]
    return None

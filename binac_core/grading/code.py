"""MBPP grader: the program from the response runs with the task's setup and its asserts in the sandbox.

Extraction: the last ```python (or ```py) fenced block; else the last fenced block of any language; else the
whole response (a model that answers with bare code). A final block left open by a truncated response is taken
up to the end. Then `run_python(program, row["tests"], row["setup"])`: program, setup, asserts, in that order
(stack notes, "Running untrusted code"). Passing means every assert held, judged outside the sandbox on
the plain values the program's calls returned (see `sandbox`), so the program cannot forge it. This mirrors lm-eval's MBPP
task (https://github.com/EleutherAI/lm-evaluation-harness/blob/main/lm_eval/tasks/mbpp/mbpp.yaml), with a
fenced block instead of its `[BEGIN]`/`[DONE]` markers.
"""

from __future__ import annotations

import re

from binac_core.grading.sandbox import DEFAULT_TIMEOUT_S, ExecResult, run_python

_FENCE_RE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
PYTHON_TAGS = ("python", "py", "python3")


def extract_program(response: str) -> str:
    """The code the response proposes (see the module docstring)."""
    blocks = [(tag.lower(), body) for tag, body in _FENCE_RE.findall(response)]
    python = [body for tag, body in blocks if tag in PYTHON_TAGS]
    if python:
        return python[-1]
    if blocks:
        return blocks[-1][1]
    return response


def check_response(row: dict, response: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> ExecResult:
    return run_python(extract_program(response), list(row["tests"]), setup=row.get("setup") or "", timeout_s=timeout_s)


def verdict(row: dict, response: str) -> tuple[bool, str | None]:
    """Whether the program passes its tests and, when it fails, the sandbox's reason (the execution error the
    critic is shown), from one sandbox run."""
    res = check_response(row, response)
    return res.passed, (None if res.passed else res.reason)

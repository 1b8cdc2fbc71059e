"""MATH / MATH-500 grader: the last `\\boxed{}` of the response against the gold answer.

1. Extract the last `\\boxed{...}` (`extract.last_boxed`); none means 0.
2. A normalised string match (whitespace, `\\left`/`\\right`, `\\dfrac`, `\\text{}`... removed) scores 1 at once:
   the notes' "fallback normalised string match", taken first because it is exact and cheap.
3. Two guards answer "no" where math-verify is known to be too lenient (both found by this project's perturbation
   tests): different base subscripts (`52_8` vs `52_9`; math-verify drops subscripts), and two plain decimals
   that differ (math-verify rounds floats to 6 places, so `.0000672` equalled `.0000673`); plain decimals are
   compared exactly.
4. Otherwise math-verify 0.9 decides: `parse` of gold and prediction, each wrapped in `\\boxed{}`, then
   `verify(gold, pred)` (order matters), as verl does
   (https://github.com/volcengine/verl/blob/b178a3cd56f58b2d502255daba591e92833930a7/verl/utils/reward_score/math_verify.py;
   https://github.com/huggingface/math-verify).

math-verify's own timeouts use `signal.alarm`, which only works in a main thread; peers saw every score silently
become 0 in worker threads. So verification runs in a pool of persistent worker processes (`verify_worker`) that
pass `parsing_timeout=None` / `timeout_seconds=None` and `raise_on_error=True`, and this module enforces a
wall-clock limit of its own (VERIFY_TIMEOUT_S): a worker that overruns or dies is killed and replaced, and the
call raises GraderTimeout / GraderError, which `benchmarks.grade.grade` counts, logs and scores 0. Up to POOL_SIZE workers
start on first use (about 2 s each) and live until the process exits.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import re
import select
import subprocess
import sys
import threading
import time
from fractions import Fraction
from pathlib import Path

from binac_core.grading.extract import last_boxed

VERIFY_TIMEOUT_S = 10.0
STARTUP_TIMEOUT_S = 120.0
WORKER_MEMORY_BYTES = 4 << 30
POOL_SIZE = max(1, min(4, os.cpu_count() or 1))


class GraderTimeout(RuntimeError):
    """math-verify ran past VERIFY_TIMEOUT_S; its worker was killed."""


class GraderError(RuntimeError):
    """math-verify raised, or its worker died."""


def is_correct(row: dict, response: str) -> bool:
    """True when the last boxed answer of `response` equals `row["answer"]` (see the module docstring)."""
    pred = last_boxed(response)
    if not pred or not pred.strip():
        return False
    gold = str(row["answer"])
    if normalise(pred) == normalise(gold):
        return True
    if _bases_differ(gold, pred):
        return False
    decimals = _plain_decimals(gold, pred)
    if decimals is not None:
        return decimals[0] == decimals[1]
    return verify_equal(gold, pred)


def verify_equal(gold: str, pred: str, timeout_s: float | None = None) -> bool:
    """math-verify's judgement of `pred` against `gold` (both box contents), in a worker process.

    Raises GraderTimeout after `timeout_s` (default VERIFY_TIMEOUT_S, read at call time) and GraderError."""
    return _pool().verify(gold, pred, VERIFY_TIMEOUT_S if timeout_s is None else timeout_s)


_SPACING_RE = re.compile(r"\\[!,;: ]|\\left|\\right|\\displaystyle|\s+|\$")
_TEXT_RE = re.compile(r"\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}")


def normalise(answer: str) -> str:
    """A conservative canonical form: only spacing, sizing and wrapper commands go (never digits or symbols)."""
    text = _TEXT_RE.sub(r"\1", answer)
    text = text.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    text = text.replace("^\\circ", "").replace("^{\\circ}", "")
    return _SPACING_RE.sub("", text).rstrip(".")


_BASE_RE = re.compile(r"_\{?(\d+)\}?\s*$")
_DECIMAL_RE = re.compile(r"-?(?:\d+\.?\d*|\.\d+)")


def _bases_differ(gold: str, pred: str) -> bool:
    """Both end in a base subscript (`52_8`) and the bases differ: math-verify drops subscripts (52_8 == 52_9)."""
    g, p = _BASE_RE.search(normalise(gold)), _BASE_RE.search(normalise(pred))
    return bool(g and p and g.group(1) != p.group(1))


def _plain_decimals(gold: str, pred: str) -> tuple[Fraction, Fraction] | None:
    """Both plain decimal numbers: their exact values (math-verify rounds floats to 6 places: .0000672 == .0000673)."""
    g, p = normalise(gold), normalise(pred)
    if _DECIMAL_RE.fullmatch(g) and _DECIMAL_RE.fullmatch(p):
        return Fraction(g), Fraction(p)
    return None


# --------------------------------------------------------------------------- worker processes


class _Worker:
    """One `verify_worker` subprocess answering requests over its stdin/stdout (JSON lines)."""

    def __init__(self):
        package_root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")])))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "binac_core.grading.verify_worker", str(WORKER_MEMORY_BYTES)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            bufsize=0,
        )
        self._buffer = b""
        try:
            self._receive(time.monotonic() + STARTUP_TIMEOUT_S, STARTUP_TIMEOUT_S, "start")
        except BaseException:
            self.close()
            raise

    def ask(self, gold: str, pred: str, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s  # set before the request: no reply can precede it
        try:
            self.proc.stdin.write((json.dumps([gold, pred]) + "\n").encode())
        except OSError as exc:
            raise _WorkerLost(f"math-verify worker died (exit code {self.proc.poll()})") from exc
        return self._receive(deadline, timeout_s, "verify")["equal"]

    def _receive(self, deadline: float, timeout_s: float, what: str) -> dict:
        """The next reply line, if it is read before `deadline` (`time.monotonic`); else GraderTimeout. A reply read
        after it is a timeout too (this thread was descheduled past the deadline): the limit holds at any load."""
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.proc.stdout], [], [], left)[0]:
                raise GraderTimeout(f"math-verify {what} took longer than {timeout_s:g} s")
            chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
            if not chunk:
                raise _WorkerLost(f"math-verify worker died (exit code {self.proc.wait()})")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        if time.monotonic() > deadline:
            raise GraderTimeout(f"math-verify {what} took longer than {timeout_s:g} s")
        reply = json.loads(line)
        if not reply["ok"]:
            raise GraderError(reply["error"])
        return reply

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            pipe.close()


class _WorkerLost(GraderError):
    pass


class _Pool:
    """At most `size` workers; a request borrows an idle one (or starts one) and returns it when healthy."""

    def __init__(self, size: int):
        self._slots = threading.BoundedSemaphore(size)
        self._idle: queue.SimpleQueue[_Worker] = queue.SimpleQueue()

    def verify(self, gold: str, pred: str, timeout_s: float) -> bool:
        with self._slots:
            worker = self._take()
            try:
                result = worker.ask(gold, pred, timeout_s)
            except GraderError as exc:
                if isinstance(exc, _WorkerLost):
                    worker.close()
                else:
                    self._idle.put(worker)  # math-verify raised: the worker itself is fine
                raise
            except BaseException:
                worker.close()  # timeout (or interrupt): the worker may be stuck in sympy for good
                raise
            self._idle.put(worker)
            return result

    def _take(self) -> _Worker:
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            return _Worker()

    def close(self) -> None:
        while True:
            try:
                self._idle.get_nowait().close()
            except queue.Empty:
                return


_pool_lock = threading.Lock()
_pool_instance: _Pool | None = None


def _pool() -> _Pool:
    global _pool_instance
    with _pool_lock:
        if _pool_instance is None:
            _pool_instance = _Pool(POOL_SIZE)
            atexit.register(_pool_instance.close)
        return _pool_instance

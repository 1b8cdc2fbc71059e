"""The math-verify worker process: `python -m binac_core.grading.verify_worker [memory_bytes]`.

Protocol, one JSON document per line: the parent writes `[gold, pred]` (box contents), the worker answers
`{"ok": true, "equal": bool}` or `{"ok": false, "error": "..."}`; its first line is `{"ok": true, "ready": true}`.
It exits at end of input, so it never outlives its parent's pipe.

math-verify runs with `parsing_timeout=None` / `timeout_seconds=None` (its signal.alarm timeouts only work in a
main thread, and the parent enforces a wall-clock limit by killing this process) and `raise_on_error=True`, so its
internal errors reach the parent and are counted instead of silently scoring 0. It is a plain subprocess rather
than a multiprocessing worker so that it never re-imports the caller's `__main__` (spawn does, and breaks scripts
without a main guard).
"""

from __future__ import annotations

import json
import logging
import resource
import sys


def main(memory_bytes: int) -> None:
    # sympy can blow up on adversarial input: a MemoryError here is an error reply, not a starved machine.
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    # math-verify warns once that its timeouts are off; the parent enforces the limit, so that line is noise.
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    gold_cfg, pred_cfg = [LatexExtractionConfig()], [LatexExtractionConfig(), ExprExtractionConfig()]

    def equal(gold: str, pred: str) -> bool:
        g = parse(f"\\boxed{{{gold}}}", extraction_config=gold_cfg, parsing_timeout=None, raise_on_error=True)
        p = parse(f"\\boxed{{{pred}}}", extraction_config=pred_cfg, parsing_timeout=None, raise_on_error=True)
        return bool(verify(g, p, timeout_seconds=None, raise_on_error=True))

    _reply({"ok": True, "ready": True})
    for line in sys.stdin:
        try:
            gold, pred = json.loads(line)
            reply = {"ok": True, "equal": equal(str(gold), str(pred))}
        except Exception as exc:  # reported to the parent, which counts and logs it
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
        _reply(reply)


def _reply(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 4 << 30)

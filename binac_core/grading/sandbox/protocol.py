"""The sandbox's result protocol (`binac_core.grading.sandbox`, docs/sandbox.md): what goes in, what comes back
and how a verdict is read from it.

`_BOOT` is the harness that runs inside the sandbox; `_payload` is what it reads (program, setup and the leaves'
sources); `_Results.parse` reads strictly what it wrote (one record per leaf, plain values tagged and hex-encoded,
`_decode`); `_verdict` and `_judge` decide, here, whether every assert held and give the one-line reason.
"""

from __future__ import annotations

import ast
import contextlib
import re
import signal
from dataclasses import dataclass

from binac_core.grading.sandbox.plan import _compute, _LeafFailed, _LeafMissing, _Test, parse_python

OUTPUT_CAP = 16 << 10
RESULT_CAP = 1 << 20  # bytes of encoded leaf values a run may return; over it, the run fails
MAX_DEPTH = 100  # nesting of a returned value (the parser allows 200 nested brackets)


# Runs inside the sandbox before any untrusted code: read the program and the leaves from an inherited descriptor
# (so they are never a file in the sandbox), compile the leaves, set the limits, run program and setup as a clean
# __main__ module, then write `('ready',)` and one record per leaf to the result descriptor. Everything the
# harness uses after the program started is a local or closure variable bound before it (functions defined here
# look names up in __main__, which the program owns). A program can still reach and change all of this (frames,
# gc): it then only chooses the values written, which it could have returned.
_BOOT = r"""
import os, resource, sys
def _encoder(budget, max_depth):
    type_, issub, list_, reversed_, len_, str_, base = type, issubclass, list, reversed, len, str, BaseException
    name_of = type.__dict__["__name__"].__get__
    int_hex, float_hex, str_str, str_repr = int.__format__, float.hex, str.__str__, str.__repr__
    real, imag = complex.real.__get__, complex.imag.__get__
    bytes_hex, bytearray_hex, list_copy, tuple_iter = bytes.hex, bytearray.hex, list.copy, tuple.__iter__
    dict_items, set_iter, frozenset_iter = dict.items, set.__iter__, frozenset.__iter__
    int_, float_, complex_, bytes_, bytearray_ = int, float, complex, bytes, bytearray
    tuple_, dict_, set_, frozenset_ = tuple, dict, set, frozenset
    close = object()
    left = [budget]
    class NotPlain(Exception):
        pass
    def text_of(value):
        out, stack = [], [(value, 0)]
        while stack:
            v, depth = stack.pop()
            if v is close:
                out.append("),")
                continue
            if depth > max_depth:
                raise NotPlain(f"value nested more than {max_depth} deep")
            tp = type_(v)
            tag = None
            if v is None or v is True or v is False:
                piece = ("None,", "True,", "False,")[0 if v is None else 1 if v is True else 2]
            elif issub(tp, int_):
                piece = "('i','" + int_hex(v, "x") + "'),"
            elif issub(tp, float_):
                piece = "('f','" + float_hex(v) + "'),"
            elif issub(tp, complex_):
                piece = "('c','" + float_hex(real(v)) + "','" + float_hex(imag(v)) + "'),"
            elif issub(tp, str_):
                piece = "('s'," + str_repr(str_str(v)) + "),"
            elif issub(tp, bytes_):
                piece = "('y','" + bytes_hex(v) + "'),"
            elif issub(tp, bytearray_):
                piece = "('Y','" + bytearray_hex(v) + "'),"
            elif issub(tp, list_):
                tag, items = "l", list_copy(v)
            elif issub(tp, tuple_):
                tag, items = "t", list_(tuple_iter(v))
            elif issub(tp, dict_):
                tag, items = "d", []
                for key, val in dict_items(v):
                    items.append(key)
                    items.append(val)
            elif issub(tp, frozenset_):
                tag, items = "F", list_(frozenset_iter(v))
            elif issub(tp, set_):
                tag, items = "S", list_(set_iter(v))
            else:
                raise NotPlain(name_of(tp))
            if tag is not None:
                piece = "('" + tag + "',"
                stack.append((close, 0))
                for item in reversed_(items):
                    stack.append((item, depth + 1))
            left[0] -= len_(piece)
            if left[0] < 0:
                raise NotPlain("value too large to return")
            out.append(piece)
        return "".join(out)
    def record(k, value):
        try:
            return f"({k},'v',{text_of(value)})\n".encode()
        except NotPlain as exc:
            what = exc.args[0]
        except base as exc:
            what = "value that could not be converted (" + name_of(type_(exc)) + ")"
        return f"({k},'n',{str_repr(what)})\n".encode()
    def error(k, exc):
        try:
            message = str_str(str_(exc))[:300]
        except base:
            message = ""
        return f"({k},'e',{str_repr(name_of(type_(exc)))},{str_repr(message)})\n".encode()
    return record, error
def _boot(fd, out, limits, budget, max_depth):
    import sys  # the module globals are cleared below; keep what this frame needs as locals
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    os.close(fd)
    head, _, body = b"".join(chunks).partition(b"\n")
    parts, at = [], 0
    for size in head.split():
        parts.append(body[at:at + int(size)])
        at += int(size)
    leaves = [compile(part, "test", "eval") for part in parts[1:]]
    record, error = _encoder(budget, max_depth)
    write, evaluate, enumerate_, base = os.write, eval, enumerate, BaseException
    for item in limits.split(","):
        name, soft, hard = item.split(":")
        resource.setrlimit(getattr(resource, name), (int(soft), int(hard)))
    code = compile(parts[0], "program.py", "exec")
    main = sys.modules["__main__"].__dict__
    keep = main["__builtins__"]
    main.clear()
    main.update(__name__="__main__", __builtins__=keep, __file__="program.py")
    sys.argv = ["program.py"]
    exec(code, main)
    write(out, b"('ready',)\n")
    for k, leaf in enumerate_(leaves):
        try:
            value = evaluate(leaf, main)
        except base as exc:
            line = error(k, exc)
        else:
            line = record(k, value)
        write(out, line)
_boot(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
"""


@dataclass(frozen=True)
class _Span:
    name: str
    first: int
    last: int
    text: str


def _assemble(program: str, setup: str) -> tuple[str, list[_Span]]:
    """The script (program, setup) and the line span of each part, for error reasons."""
    lines: list[str] = []
    spans = []
    for name, text in (("program", program), ("setup", setup)):
        # Python counts a lone CR as a line break; normalise so that our line numbers match its tracebacks.
        body = text.replace("\r\n", "\n").replace("\r", "\n").rstrip("\n")
        first = len(lines) + 1
        lines.extend(body.split("\n") if body.strip() else [])
        spans.append(_Span(name, first, len(lines), body.strip()))
        lines.append("")
    return "\n".join(lines) + "\n", spans


def _payload(script: str, sources: list[str]) -> bytes:
    """What _BOOT reads: a line of byte lengths, then the script and each leaf's source."""
    parts = [script.encode("utf-8", "replace")] + [s.encode("utf-8", "replace") for s in sources]
    return " ".join(str(len(p)) for p in parts).encode() + b"\n" + b"".join(parts)


@dataclass
class _Results:
    """What the sandbox wrote to the result descriptor, read strictly."""

    ready: bool
    """Program and setup ran to the end."""
    records: dict[int, tuple]
    """leaf number -> ('v', value) | ('e', exception type, message) | ('n', what it returned instead)."""
    problem: str | None
    """Why reading stopped early: a malformed, out-of-order or extra record, or too much data."""

    @classmethod
    def parse(cls, data: bytes, leaves: int) -> _Results:
        results = cls(False, {}, None)
        if len(data) > RESULT_CAP:
            results.problem = f"over {RESULT_CAP} bytes of results"
            return results
        lines = data.split(b"\n")
        if lines[-1]:
            results.problem = "an unterminated record"
        for position, line in enumerate(lines[:-1]):
            try:
                record = ast.literal_eval(parse_python(line.decode("utf-8").lstrip(" \t"), "eval"))
                if position == 0:
                    if not (type(record) is tuple and record == ("ready",)):
                        raise ValueError("no start record")
                    results.ready = True
                else:
                    results.records[position - 1] = _record(record, position - 1, leaves)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError, UnicodeDecodeError) as exc:
                results.problem = f"malformed record {position}: {str(exc)[:100]}"
                break
        return results


def _record(record, number: int, leaves: int) -> tuple:
    if type(record) is not tuple or len(record) < 3 or type(record[0]) is not int or record[0] != number:
        raise ValueError("not the next record")
    if number >= leaves:
        raise ValueError("more records than leaves")
    kind, rest = record[1], record[2:]
    if kind == "v" and len(rest) == 1:
        return ("v", _decode(rest[0], 0))
    if kind == "e" and len(rest) == 2 and all(type(r) is str for r in rest):
        return ("e", *rest)
    if kind == "n" and len(rest) == 1 and type(rest[0]) is str:
        return ("n", rest[0])
    raise ValueError("unknown record")


_HEX_INT = re.compile(r"-?[0-9a-f]+")


def _decode(node, depth: int):
    """A plain value from its tagged encoding (see _BOOT); ValueError on anything else."""
    if node is None or node is True or node is False:
        return node
    if depth > MAX_DEPTH or type(node) is not tuple or not node or type(node[0]) is not str:
        raise ValueError("not an encoded value")
    tag, rest = node[0], node[1:]
    if tag in ("i", "f", "c", "y", "Y") and not (
        len(rest) == (2 if tag == "c" else 1)
        and all(type(r) is str for r in rest)
        and (tag != "i" or _HEX_INT.fullmatch(rest[0]))
    ):
        raise ValueError(f"bad {tag!r} value")
    if tag == "i":
        return int(rest[0], 16)
    if tag == "f":
        return float.fromhex(rest[0])
    if tag == "c":
        return complex(float.fromhex(rest[0]), float.fromhex(rest[1]))
    if tag == "s" and len(rest) == 1 and type(rest[0]) is str:
        return rest[0]
    if tag == "y":
        return bytes.fromhex(rest[0])
    if tag == "Y":
        return bytearray.fromhex(rest[0])
    if tag not in ("l", "t", "d", "S", "F"):
        raise ValueError(f"unknown tag {tag!r}")
    items = [_decode(r, depth + 1) for r in rest]
    if tag == "l":
        return items
    if tag == "t":
        return tuple(items)
    if tag == "S":
        return set(items)  # TypeError for an unhashable item: malformed
    if tag == "F":
        return frozenset(items)
    if len(items) % 2:
        raise ValueError("odd dict")
    return dict(zip(items[::2], items[1::2], strict=True))


def _verdict(plans, results: _Results, timed_out, rc, stderr, spans, timeout_s) -> tuple[bool, str]:
    """(passed, reason). A test's failure found before a timeout or crash is reported as that test's failure."""
    if not results.ready:
        if timed_out:
            return False, f"timed out after {timeout_s:g} s"
        return False, _program_reason(rc, stderr, spans)
    for test in plans:
        outcome = _judge(test, results)
        if outcome is None:
            continue
        if outcome is _LeafMissing:
            if timed_out:
                return False, f"timed out after {timeout_s:g} s"
            if results.problem:
                return False, f"the test results were tampered with ({results.problem})"
            return False, f"test {test.number} failed: {test.text[:200]} ({_exit_note(rc, stderr)})"
        return False, f"test {test.number} failed: {test.text[:200]} ({outcome})"
    if results.problem:
        return False, f"the test results were tampered with ({results.problem})"
    if timed_out:
        return False, f"timed out after {timeout_s:g} s"
    if rc != 0:
        return False, f"the tests held but then {_exit_note(rc, stderr)}"
    return True, "passed"


def _judge(test: _Test, results: _Results):
    """None when the assert holds; else the failure's detail, or _LeafMissing when a needed value never came."""
    seen: list[tuple[str, object]] = []

    def leaf(number: int, source: str):
        record = results.records.get(number)
        if record is None:
            raise _LeafMissing
        if record[0] == "e":
            raise _LeafFailed(f"{record[1]}: {record[2]}" if record[2] else record[1])
        if record[0] == "n":
            raise _LeafFailed(f"{_short(source, 60)} returned {_article(record[1])}, not a plain value")
        seen.append((source, record[1]))
        return record[1]

    try:
        holds = bool(_compute(test.expr, test, leaf))
    except _LeafMissing:
        return _LeafMissing
    except _LeafFailed as exc:
        return str(exc)
    except Exception as exc:  # what Python would raise evaluating the assert on these values (a TypeError...)
        return f"{type(exc).__name__}: {str(exc)[:200]}" if str(exc) else type(exc).__name__
    if holds:
        return None
    notes = []
    if test.msg is not None:
        with contextlib.suppress(Exception):
            notes.append(_safe_repr(_compute(test.msg, test, leaf), str_=True))
    if len(seen) == 1:
        notes.append(f"got {_safe_repr(seen[0][1])}")
    elif seen:
        notes.append("got " + ", ".join(f"{_short(s, 40)} = {_safe_repr(v)}" for s, v in seen))
    return "AssertionError: " + "; ".join(notes) if notes else "AssertionError"


def _safe_repr(value, str_: bool = False) -> str:
    try:
        text = str(value) if str_ else repr(value)
    except ValueError:  # an int over the 4300-digit conversion limit, possibly nested
        text = "<value too large to show>"
    return _short(text, 150)


def _short(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


def _article(what: str) -> str:
    if what.startswith("value"):
        return f"a {what}"
    return f"an {what!r} object" if what[:1].lower() in "aeiou" else f"a {what!r} object"


def _exit_note(rc, stderr) -> str:
    if rc == 0:
        return "exited with status 0 before the tests finished"
    error = next((ln.strip() for ln in reversed(stderr.splitlines()) if ln.strip()), "")
    return error[:200] if error else f"exited with status {rc}{_signal_note(rc)}"


def _read(fh) -> str:
    """The first OUTPUT_CAP bytes of a captured stream."""
    fh.seek(0)
    data = fh.read(OUTPUT_CAP + 1)
    text = data[:OUTPUT_CAP].decode("utf-8", "replace")
    return text + "\n[output truncated]" if len(data) > OUTPUT_CAP else text


_FRAME_RE = re.compile(r'File "program\.py", line (\d+)')


def _program_reason(rc, stderr, spans) -> str:
    """Why program or setup did not run to the end (no start record): from the last traceback in stderr."""
    if rc == 0:
        return "exited with status 0 before the tests finished"
    error = next((ln.strip() for ln in reversed(stderr.splitlines()) if ln.strip()), "")
    if not error:
        return f"exited with status {rc}{_signal_note(rc)}"
    last_traceback = stderr.rsplit("Traceback (most recent call last):", 1)[-1]
    frames = [int(n) for n in _FRAME_RE.findall(last_traceback)]
    span = _span_at(spans, frames[0]) if frames else None
    if span is None:
        return error[:300]
    return f"error in {span.name} (line {frames[-1]}): {error[:300]}"


def _span_at(spans: list[_Span], line: int) -> _Span | None:
    return next((s for s in spans if s.first <= line <= s.last), None)


def _signal_note(rc: int | None) -> str:
    # bwrap reports a child killed by signal N as status 128+N; a plain subprocess as -N.
    number = -rc if rc is not None and rc < 0 else (rc - 128 if rc and rc > 128 else None)
    try:
        return f" (killed by {signal.Signals(number).name})" if number else ""
    except ValueError:
        return ""

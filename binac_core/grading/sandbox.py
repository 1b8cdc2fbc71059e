"""Run an untrusted Python program against assert tests: `run_python(program, tests, setup, timeout_s)`.

The program, then `setup` (MBPP's `test_setup_code`: two tasks set up objects from classes the program defines,
so it must come after the program), then the tests' operands run in a fresh `/usr/bin/python3 -I` process (the
system interpreter: an unprivileged user cannot read a venv under /root). See the project's stack notes, "Running
untrusted code", and the practice in https://github.com/openai/human-eval (execution.py, which itself is not a
sandbox).

The verdict is decided here, in the grading process, where no untrusted code ever ran. Each test must be one
`assert` statement (anything else raises `TestFormatError`: it could not be graded without trusting the program).
Its expression is split (`_plan`): comparisons, `and`/`or`/`not` and the checkers `math.isclose` and `isinstance`
are evaluated here; an operand that names nothing but literals and a few pure builtins (`[1, 2]`, `-3.5`,
`set([1, 2])`, `float('inf')`, `math.pi`; see `PURE_CALLS`) is evaluated here too, by a small evaluator (never
`eval`); every other operand (one that names a program or setup name: `remove_Occ("hello", "l")`,
`set(f(x))`) is a *leaf*, sent to the sandbox as source. So the expected values never enter the sandbox. The
sandbox compiles the leaves before the program runs, runs program and setup in a clean `__main__`, evaluates each
leaf there and writes its value to a result file (an inherited descriptor) as a *plain value*: None, bool, int,
float, complex, str, bytes, bytearray, and lists, tuples, dicts, sets and frozensets of them. Subclasses of these
are converted to the base type through the base type's own methods (`int.__format__`, `list.copy`,
`dict.items`...), so an overridden `__eq__`, `__ne__`, `__bool__`, `__iter__` or `__hash__` is never consulted;
anything else (a generator, a map, a custom object, a type) fails the test, naming the type. A leaf that raises
fails its test with the exception's type and message (later leaves still run: the sandbox cannot know which
assert failed). This process reads the file strictly (size cap; a malformed, duplicated, reordered or missing
record is a failure), decodes the values (floats and ints in hex, so inf, nan and huge ints survive), evaluates
each assert with Python's own semantics on them and passes the run only if every assert holds, the run exited
with status 0 and did not time out. Whatever the program prints, patches (builtins, `AssertionError`,
`sys.excepthook`, the harness's own frames), writes to the result file or exits with, it can only choose the
leaf values, which it could equally have returned: it cannot turn a failing assert into a passing one.

What it does not protect against (verdict):
- A program can still special-case the visible test inputs (MBPP shows the asserts in the prompt), and it can
  read a leaf's source, so a constant inside a leaf (the 3.14 of `abs(f(x) - 3.14) < 1e-6`) is visible to it.
- Leaves are evaluated eagerly and in order: a leaf that raises fails its test even where `and`/`or` would have
  skipped it in plain Python; `is` compares the decoded values (only `None`, `True`, `False` keep identity).
- With no tests, a pass only says that program and setup ran to the end without an error, which the program
  controls anyway.

What it protects against (escapes and resources), with bubblewrap (`bwrap`, Debian package `bubblewrap`):
- Runaway resources: rlimits set before the program runs (CPU seconds, address space, file size, processes
  and threads, open files, no core dumps) and a wall-clock timeout that SIGKILLs bwrap, whose pid namespace
  takes every process the program started down with it: loops, fork, memory and disk bombs end the run only.
- Memory per run: the program's processes and threads together number at most MAX_TASKS (RLIMIT_NPROC, counted
  per run uid, bwrap's own init process added), each with at most MEMORY_BYTES of address space, plus the
  TMP_BYTES tmpfs: 4 x 512 MiB + 64 MiB, about 2.1 GiB per run (bwrap's two small processes aside). The
  graders (`binac_core.grading.grade_batch*`) run max(2, cpu_count) sandboxes at once, so about 2.1 GiB per core
  in all. No cgroup is used (the bound holds without a writable cgroup v2). Run as non-root (no uid per run),
  the process limit counts the user's other processes too and is set above their number at the start of the run:
  then the bound is per run only as long as those do not exit.
- Escapes into the machine: as root, each run gets an unprivileged uid of its own (it appears as 65534,
  `nobody`, inside), so it cannot signal or read other processes, and one run's fork bomb cannot use up the
  process budget of runs beside it. New user, pid, network, ipc and uts namespaces (`--unshare-all`): no
  network (connections are refused), no view of the host's processes, killing its parent does nothing.
- Reading or changing files: the root is a read-only view of the system folders only (/usr, /etc, /bin, /lib...;
  not /root, /home, the repository or the data folder); /tmp is a private tmpfs of TMP_BYTES whose empty
  /tmp/work is the working folder; the environment is cleared; stdin is /dev/null (reads get EOF).
- Output floods: stdout, stderr and the result file go to anonymous files bounded by the file-size limit;
  OUTPUT_CAP bytes of each stream are kept, and results over RESULT_CAP bytes fail the run.

What it does not protect against (escapes and resources):
- Kernel exploits and hardware side channels: these are Linux namespaces, not a virtual machine.
- Contention: a run may use a full core and its memory bound until its limits stop it.
- Without a working bwrap (not installed, or no user namespaces, e.g. some containers) it falls back to rlimits,
  the uid drop, a scrubbed environment and an owned temporary folder, with a loud warning: the program can then
  reach the network, read world-readable files and write world-writable folders; leftover processes are killed by
  uid (root only), and disk use is bounded per file, not in total. Run as non-root in that fallback, the program
  has the grader's uid and could tamper with the grading process itself (ptrace, where the system allows it).
- Run as non-root, there is no uid drop: the program runs as the caller's user inside bwrap's namespaces.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import logging
import math
import operator
import os
import re
import secrets
import select
import shutil
import signal
import subprocess
import tempfile
import time
import warnings
from dataclasses import dataclass

from binac_core.errors import BinacError

log = logging.getLogger("binac.grading.sandbox")

PYTHON = "/usr/bin/python3"
DEFAULT_TIMEOUT_S = 10.0
MEMORY_BYTES = 512 << 20
FILE_BYTES = 16 << 20
TMP_BYTES = 64 << 20
MAX_TASKS = 4  # processes and threads of the program, its own included (RLIMIT_NPROC; MBPP programs need 1)
MAX_FILES = 256
OUTPUT_CAP = 16 << 10
RESULT_CAP = 1 << 20  # bytes of encoded leaf values a run may return; over it, the run fails
MAX_DEPTH = 100  # nesting of a returned value (the parser allows 200 nested brackets)
WORKDIR = "/tmp/work"
SANDBOX_UID = 65534  # the uid the program sees inside bwrap's user namespace
UID_BASE, UID_SPAN = 2_000_000_000, 100_000_000  # host uids of runs: unused by accounts, distinct per run
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": WORKDIR}

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


class SandboxError(RuntimeError):
    """The sandbox itself failed (could not start, bwrap refused): not the program's fault."""


class TestFormatError(ValueError):
    """A test this module cannot grade without trusting the program: not one `assert` statement, or an operand
    that names no program name yet is beyond the evaluator here (see `_plan`). The caller's fault, not the
    program's."""

    __test__ = False  # not a pytest class


@dataclass(frozen=True)
class ExecResult:
    passed: bool
    """Every assert held (decided outside the sandbox on the values it returned), exit status 0, no timeout."""
    reason: str
    """One line: `passed`, `timed out after N s`, `test 2 failed: assert ... (AssertionError: got 5)`, ..."""
    returncode: int | None
    timed_out: bool
    stdout: str
    """The first OUTPUT_CAP bytes of stdout."""
    stderr: str
    """The first OUTPUT_CAP bytes of stderr."""
    duration_s: float
    isolation: str
    """`bwrap` or `rlimits` (the fallback)."""


@dataclass(frozen=True)
class _Span:
    name: str
    first: int
    last: int
    text: str


def run_python(program: str, tests: list[str], setup: str = "", timeout_s: float = DEFAULT_TIMEOUT_S) -> ExecResult:
    """Run `program`, then `setup`, then the program-dependent operands of each assert of `tests` in the sandbox;
    decide here whether each assert holds. Never raises for program faults.

    Raises TestFormatError for a test it cannot grade safely, SandboxError when the sandbox cannot run at all,
    IsolationRequired when bwrap does not work and the process has not accepted rlimits (`accept`)."""
    plans, sources = _plan(list(tests))
    script, spans = _assemble(program, setup)
    payload = _payload(script, sources)
    mode = require_isolation(ACCEPTED["mode"])
    uid = _run_uid()
    with contextlib.ExitStack() as stack:
        src, out, err, res = (stack.enter_context(tempfile.TemporaryFile()) for _ in range(4))
        src.write(payload)
        src.seek(0)
        start = time.monotonic()
        with _WorkDir(mode, uid) as cwd:
            argv = _command(mode, src.fileno(), res.fileno(), _limits(timeout_s, uid, mode))
            timed_out, rc = _execute(argv, (src.fileno(), res.fileno()), out, err, uid, cwd, timeout_s)
        duration = time.monotonic() - start
        stdout, stderr = _read(out), _read(err)
        res.seek(0)
        results = _Results.parse(res.read(RESULT_CAP + 1), len(sources))
    # bwrap's own failures (before the program starts) print "bwrap: ..." and exit 1. A program that fakes this
    # line only turns its own failure into a counted grader error.
    if mode == "bwrap" and rc != 0 and stderr.startswith("bwrap: ") and not results.ready:
        raise SandboxError(f"bubblewrap failed: {stderr.splitlines()[0]}")
    passed, reason = _verdict(plans, results, timed_out, rc, stderr, spans, timeout_s)
    return ExecResult(passed, reason, rc, timed_out, stdout, stderr, duration, mode)


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


# --------------------------------------------------------------------------- tests: planned and judged here

PURE_CALLS = {
    f.__name__: f
    for f in (abs, bool, chr, complex, dict, float, frozenset, int, len, list, max, min, ord, range, round, set,
              sorted, str, sum, tuple)
}
"""Builtins an operand made of literals may call and still be evaluated here (pure, bounded)."""
PURE_KEYWORDS = {"reverse", "base", "ndigits", "start", "default", "rel_tol", "abs_tol"}
MATH_CONSTANTS = {"pi": math.pi, "e": math.e, "tau": math.tau, "inf": math.inf, "nan": math.nan}
MATH_CALLS = {f.__name__: f for f in (math.sqrt, math.floor, math.ceil, math.fabs, math.log, math.log2,
                                     math.log10, math.exp, math.isclose)}
TYPE_NAMES = {t.__name__: t for t in (bool, bytearray, bytes, complex, dict, float, frozenset, int, list, set,
                                      str, tuple, type(None))}
_SIZE_LIMIT = 10**7  # elements or bits an expression evaluated here may build
_COMPARE = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt,
    ast.GtE: operator.ge, ast.Is: operator.is_, ast.IsNot: operator.is_not,
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
}
_BINARY = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow, ast.LShift: operator.lshift,
    ast.RShift: operator.rshift, ast.BitOr: operator.or_, ast.BitAnd: operator.and_, ast.BitXor: operator.xor,
}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert, ast.Not: operator.not_}


@dataclass
class _Test:
    number: int
    text: str
    expr: ast.expr
    msg: ast.expr | None
    leaves: dict[int, tuple[int, str]]
    """id(node) -> (leaf number, source) for the operands the sandbox evaluates."""


def _plan(tests: list[str]) -> tuple[list[_Test], list[str]]:
    """Each test as an expression to evaluate here, and the sources of all leaves, in order.

    A test must be one `assert` statement. Its expression is walked from the top: a part whose free names are
    all pure (PURE_CALLS, `math`) is evaluated here, and must then be within `_is_pure` (else TestFormatError:
    it cannot be sent to the program either, since that would let it choose the expected value); comparisons,
    `and`/`or`/`not`, `math.isclose(...)` and `isinstance(x, T)` are evaluated here with their operands planned
    the same way; any other part is a leaf."""
    plans, sources = [], []
    for number, text in enumerate(tests, 1):
        try:
            module = ast.parse(text.strip())
        except SyntaxError as exc:
            raise TestFormatError(f"test {number} is not valid Python ({exc.msg}): {text[:200]!r}") from exc
        if len(module.body) != 1 or not isinstance(module.body[0], ast.Assert):
            raise TestFormatError(f"test {number} is not one assert statement: {text[:200]!r}")
        stmt = module.body[0]
        test = _Test(number, text.strip(), stmt.test, None, {})
        _split(stmt.test, test, sources)
        if stmt.msg is not None and _free_names(stmt.msg) <= _PURE_NAMES and _is_pure(stmt.msg):
            test.msg = stmt.msg  # shown in the reason; a message naming program names is left out
        plans.append(test)
    return plans, sources


_PURE_NAMES = frozenset(PURE_CALLS) | {"math"}


def _split(node: ast.expr, test: _Test, sources: list[str]) -> None:
    if _free_names(node) <= _PURE_NAMES:
        if not _is_pure(node):
            raise TestFormatError(
                f"test {test.number}: {ast.unparse(node)[:100]!r} names nothing of the program but is not an "
                "expression this grader evaluates (literals, arithmetic, pure builtins)"
            )
        return
    if isinstance(node, ast.Compare):
        for part in [node.left, *node.comparators]:
            _split(part, test, sources)
    elif isinstance(node, ast.BoolOp):
        for part in node.values:
            _split(part, test, sources)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        _split(node.operand, test, sources)
    elif _is_checker(node, "isclose"):
        for part in [*node.args, *(k.value for k in node.keywords)]:
            _split(part, test, sources)
    elif _is_checker(node, "isinstance") and _is_type_spec(node.args[1]):
        _split(node.args[0], test, sources)
    else:
        test.leaves[id(node)] = (len(sources), ast.unparse(node))
        sources.append(ast.unparse(node))


def _is_checker(node: ast.expr, name: str) -> bool:
    if not isinstance(node, ast.Call) or any(isinstance(a, ast.Starred) for a in node.args):
        return False
    if name == "isclose":
        return _is_math(node.func, "isclose") and len(node.args) == 2 and all(k.arg for k in node.keywords)
    return isinstance(node.func, ast.Name) and node.func.id == name and len(node.args) == 2 and not node.keywords


def _is_math(node: ast.expr, attr: str | None = None) -> bool:
    return (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "math"
            and (attr is None or node.attr == attr))


def _is_type_spec(node: ast.expr) -> bool:
    if isinstance(node, ast.Tuple):
        return all(_is_type_spec(e) for e in node.elts)
    return isinstance(node, ast.Name) and node.id in TYPE_NAMES


def _free_names(node: ast.AST) -> set[str]:
    """Names read in `node` that it does not bind itself (comprehension targets, lambda arguments)."""
    read, bound = set(), set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            (read if isinstance(sub.ctx, ast.Load) else bound).add(sub.id)
        elif isinstance(sub, ast.arg):
            bound.add(sub.arg)
    return read - bound


def _is_pure(node: ast.expr) -> bool:
    """Whether `_evaluate` can compute `node` here with no leaf: literals and the operations listed below."""
    pure = _is_pure
    if isinstance(node, ast.Constant):
        return node.value is not Ellipsis
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return all(pure(e) for e in node.elts)
    if isinstance(node, ast.Dict):
        return all(k is not None and pure(k) for k in node.keys) and all(pure(v) for v in node.values)
    if isinstance(node, ast.UnaryOp):
        return type(node.op) in _UNARY and pure(node.operand)
    if isinstance(node, ast.BinOp):
        return type(node.op) in _BINARY and pure(node.left) and pure(node.right)
    if isinstance(node, ast.BoolOp):
        return all(pure(v) for v in node.values)
    if isinstance(node, ast.Compare):
        return pure(node.left) and all(pure(c) for c in node.comparators)
    if isinstance(node, ast.IfExp):
        return pure(node.test) and pure(node.body) and pure(node.orelse)
    if isinstance(node, ast.Subscript):
        return pure(node.value) and pure(node.slice)
    if isinstance(node, ast.Slice):
        return all(p is None or pure(p) for p in (node.lower, node.upper, node.step))
    if isinstance(node, ast.Attribute):
        return _is_math(node) and node.attr in MATH_CONSTANTS
    if isinstance(node, ast.Call):
        known = (isinstance(node.func, ast.Name) and node.func.id in PURE_CALLS) or (
            _is_math(node.func) and node.func.attr in MATH_CALLS)
        return (known and all(not isinstance(a, ast.Starred) and pure(a) for a in node.args)
                and all(k.arg in PURE_KEYWORDS and pure(k.value) for k in node.keywords))
    return False


class _LeafMissing(Exception):
    """The sandbox wrote no record for a leaf this test needs (the run ended or timed out before it)."""


class _LeafFailed(Exception):
    """A leaf raised in the sandbox, or returned something that is not a plain value."""


def _evaluate(node: ast.expr, test: _Test, leaf) -> object:
    """`node` with Python's semantics, reading leaf values through `leaf(number, source)`; never runs code of
    the program or calls `eval`. Raises what Python would (ValueError, TypeError...) and _LeafMissing/_LeafFailed."""
    ev = functools.partial(_evaluate, test=test, leaf=leaf)
    if id(node) in test.leaves:
        return leaf(*test.leaves[id(node)])
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.List):
        return [ev(e) for e in node.elts]
    if isinstance(node, ast.Tuple):
        return tuple(ev(e) for e in node.elts)
    if isinstance(node, ast.Set):
        return {ev(e) for e in node.elts}
    if isinstance(node, ast.Dict):
        return {ev(k): ev(v) for k, v in zip(node.keys, node.values, strict=True)}
    if isinstance(node, ast.UnaryOp):
        return _UNARY[type(node.op)](ev(node.operand))
    if isinstance(node, ast.BinOp):
        return _binary(node.op, ev(node.left), ev(node.right))
    if isinstance(node, ast.BoolOp):
        value = None
        for part in node.values:
            value = ev(part)
            if bool(value) == isinstance(node.op, ast.Or):
                return value
        return value
    if isinstance(node, ast.Compare):
        left = ev(node.left)
        for op, part in zip(node.ops, node.comparators, strict=True):
            right = ev(part)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.IfExp):
        return ev(node.body) if ev(node.test) else ev(node.orelse)
    if isinstance(node, ast.Subscript):
        return ev(node.value)[ev(node.slice)]
    if isinstance(node, ast.Slice):
        return slice(*(None if p is None else ev(p) for p in (node.lower, node.upper, node.step)))
    if isinstance(node, ast.Attribute):
        return MATH_CONSTANTS[node.attr]
    if isinstance(node, ast.Call):
        if isinstance(node.func, ast.Name) and node.func.id == "isinstance":  # a checker (_split)
            return isinstance(ev(node.args[0]), _type_spec(node.args[1]))
        func = MATH_CALLS[node.func.attr] if isinstance(node.func, ast.Attribute) else PURE_CALLS[node.func.id]
        args = [ev(a) for a in node.args]
        if func is range and len(range(*args)) > _SIZE_LIMIT:
            raise ValueError("range too long to evaluate here")
        return func(*args, **{k.arg: ev(k.value) for k in node.keywords})
    raise TestFormatError(f"cannot evaluate {ast.unparse(node)[:100]!r}")  # _plan lets no such node through


def _type_spec(node: ast.expr):
    return tuple(_type_spec(e) for e in node.elts) if isinstance(node, ast.Tuple) else TYPE_NAMES[node.id]


def _binary(op: ast.operator, a, b):
    """Python's operator, refusing results too large to build here (a test is data, not a program)."""
    ints = isinstance(a, int) and isinstance(b, int)
    if isinstance(op, ast.Pow) and ints and b > 0 and abs(a) > 1 and a.bit_length() * b > _SIZE_LIMIT:
        raise ValueError("power too large to evaluate here")
    if isinstance(op, ast.LShift) and ints and b > _SIZE_LIMIT:
        raise ValueError("shift too large to evaluate here")
    if isinstance(op, ast.Mult):
        for seq, n in ((a, b), (b, a)):
            if isinstance(seq, (str, bytes, list, tuple)) and isinstance(n, int) and len(seq) * n > _SIZE_LIMIT:
                raise ValueError("repetition too large to evaluate here")
    return _BINARY[type(op)](a, b)


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
                record = ast.literal_eval(line.decode("utf-8"))
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
        len(rest) == (2 if tag == "c" else 1) and all(type(r) is str for r in rest)
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
        holds = bool(_evaluate(test.expr, test, leaf))
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
            notes.append(_safe_repr(_evaluate(test.msg, test, leaf), str_=True))
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


def _limits(timeout_s: float, uid: int, mode: str) -> list[tuple[str, int, int]]:
    cpu = math.ceil(timeout_s) + 1
    # RLIMIT_NPROC counts the tasks of the uid: in bwrap, its init process (pid 1 of the namespace) counts too.
    tasks = MAX_TASKS + (1 if mode == "bwrap" else 0)
    procs = tasks if os.geteuid() == 0 else _tasks_of(uid) + tasks
    return [
        ("RLIMIT_CPU", cpu, cpu + 1), ("RLIMIT_AS", MEMORY_BYTES, MEMORY_BYTES),
        ("RLIMIT_FSIZE", FILE_BYTES, FILE_BYTES), ("RLIMIT_NPROC", procs, procs),
        ("RLIMIT_NOFILE", MAX_FILES, MAX_FILES), ("RLIMIT_CORE", 0, 0),
    ]


def _command(mode: str, fd: int, results_fd: int, limits: list) -> list[str]:
    spec = ",".join(f"{name}:{soft}:{hard}" for name, soft, hard in limits)  # json would cost 10 ms to import
    budget = RESULT_CAP // 2  # values; the rest is room for the records around them
    python = [PYTHON, "-I", "-c", _BOOT, str(fd), str(results_fd), spec, str(budget), str(MAX_DEPTH)]
    return _bwrap_prefix() + python if mode == "bwrap" else python


def _bwrap_prefix() -> list[str]:
    argv = [shutil.which("bwrap") or "bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--clearenv",
            "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
    for path in SYSTEM_PATHS:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    argv += ["--dev", "/dev", "--proc", "/proc", "--size", str(TMP_BYTES), "--tmpfs", "/tmp", "--dir", WORKDIR]
    for key, value in ENV.items():
        argv += ["--setenv", key, value]
    # Last: the root bwrap built (a tmpfs holding the mount points) becomes read-only; /tmp stays writable.
    return argv + ["--remount-ro", "/", "--chdir", WORKDIR]


def _execute(argv, fds, out, err, uid, cwd, timeout_s) -> tuple[bool, int | None]:
    """Start, wait up to `timeout_s`, SIGKILL the whole process group on timeout; returns (timed_out, status)."""
    prefix, identity = _as_user(uid)
    env = dict(ENV, HOME=cwd, TMPDIR=cwd) if cwd else {"PATH": ENV["PATH"]}
    try:
        proc = subprocess.Popen(
            prefix + argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, pass_fds=fds, cwd=cwd or "/",
            env=env, start_new_session=True, **identity,
        )
    except OSError as exc:
        raise SandboxError(f"cannot start the sandbox: {exc}") from exc
    timed_out = not _exited_within(proc, timeout_s)
    if timed_out:
        # Not yet reaped, so its pid still names its group: the kill cannot hit a recycled pid.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    if os.geteuid() == 0:
        # The uid is this run's alone. Fallback: stragglers (no pid namespace). bwrap: its namespace may still
        # be tearing down when bwrap returns (the kernel is killing it); wait until it is gone.
        _kill_uid(uid, thorough=cwd is not None)  # cwd is set in fallback mode only
    return timed_out, proc.returncode


def _as_user(uid: int) -> tuple[list[str], dict]:
    """How to start as `uid`: a `setpriv` prefix (root), Popen's user/group (root, no setpriv), or as is.

    setpriv keeps Popen on vfork: with `user=`, Python must fork() the whole (large) parent, ~20 ms a run."""
    if os.geteuid() != 0:
        return [], {}
    setpriv = shutil.which("setpriv")
    if setpriv:
        return [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--no-new-privs", "--"], {}
    return [], {"user": uid, "group": uid, "extra_groups": []}


def _exited_within(proc: subprocess.Popen, timeout_s: float) -> bool:
    """Wait for the exit without reaping it. A pidfd wakes us at once; `Popen.wait(timeout)` polls with
    growing sleeps (up to 50 ms), which would double the cost of a typical 35 ms run."""
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # no pidfd (old kernel or Python): poll, then leave reaping to wait()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return True
            time.sleep(0.005)
        return False
    try:
        return bool(select.select([pidfd], [], [], timeout_s)[0])
    finally:
        os.close(pidfd)


class _WorkDir:
    """Fallback mode only: an empty temporary folder owned by the run's uid (bwrap makes its own on a tmpfs)."""

    def __init__(self, mode: str, uid: int):
        self.mode, self.uid, self.path = mode, uid, None

    def __enter__(self) -> str | None:
        if self.mode == "bwrap":
            return None
        self.path = tempfile.mkdtemp(prefix="binac-run-")
        os.chmod(self.path, 0o700)
        if os.geteuid() == 0:
            os.chown(self.path, self.uid, self.uid)
        return self.path

    def __exit__(self, *exc) -> None:
        if self.path:
            shutil.rmtree(self.path, ignore_errors=True)


def _run_uid() -> int:
    return UID_BASE + secrets.randbelow(UID_SPAN) if os.geteuid() == 0 else os.getuid()


def _kill_uid(uid: int, thorough: bool) -> None:
    """SIGKILL every process of `uid` until none is left (a fork loop may still be spawning)."""
    for _ in range(1000):
        pids = _pids_of(uid, thorough)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.002)
    log.warning("sandbox: processes of uid %d survived 1000 kill rounds", uid)


def _pids_of(uid: int, thorough: bool = False) -> list[int]:
    """Live processes of `uid`; zombies are skipped (already dead, their new parent reaps them).

    The quick test is the owner of /proc/PID, which a process can turn to root by making itself non-dumpable;
    `thorough` reads the real uid from /proc/PID/status instead (3x slower; used where no pid namespace helps)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if _uid_of(entry, thorough) == uid and not _is_zombie(entry):
                    pids.append(int(entry))
            except (FileNotFoundError, ProcessLookupError):
                pass
    return pids


def _uid_of(pid: str, thorough: bool) -> int:
    if not thorough:
        return os.stat(f"/proc/{pid}").st_uid
    with open(f"/proc/{pid}/status", "rb") as fh:
        return int(next(line for line in fh if line.startswith(b"Uid:")).split()[1])


def _is_zombie(pid: str) -> bool:
    with open(f"/proc/{pid}/stat", "rb") as fh:
        return fh.read().rsplit(b")", 1)[-1].split()[0] == b"Z"


def _tasks_of(uid: int) -> int:
    """Threads and processes of `uid` now: RLIMIT_NPROC counts them all, so a non-root limit starts above them."""
    total = 0
    for pid in _pids_of(uid):
        try:
            total += len(os.listdir(f"/proc/{pid}/task"))
        except FileNotFoundError:
            pass
    return total


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


# --------------------------------------------------------------------------- choosing the isolation


ACCEPTED = {"mode": "bwrap"}
"""Process-wide: the weakest isolation this process accepts, set by the run from its `grading.sandbox` (`accept`;
listed in `binac_core.model.runtime`). `bwrap` (default): `run_python` refuses to run without a working bwrap."""


class IsolationRequired(BinacError):
    """Only the rlimits fallback works here and the run did not accept it (`grading.sandbox: rlimits`): a setup
    fault, raised before any compute by the entry points' plans and again by `run_python`; never scored as a
    grader error (binac_core/benchmarks/grade.py lets it through)."""


def accept(mode: str) -> None:
    """Set the process's accepted isolation: `bwrap` (bubblewrap required) or `rlimits` (the fallback accepted)."""
    if mode not in ("bwrap", "rlimits"):
        raise BinacError(f"grading.sandbox must be bwrap or rlimits (got {mode!r})")
    ACCEPTED["mode"] = mode


def require_isolation(accepted: str) -> str:
    """The isolation `run_python` will use here under `accepted`; IsolationRequired (one line naming the fix and
    the setting) when bwrap does not work and `accepted` is not `rlimits`. Probes bwrap once per process."""
    mode = isolation()
    if mode != "bwrap" and accepted != "rlimits":
        problem = _probe_result()[1] or "bwrap is not used"
        raise IsolationRequired(
            f"the code sandbox needs a working bubblewrap: {problem}; install it (Debian: apt-get install "
            "bubblewrap) or accept the weaker rlimits-only sandbox, where programs can reach the network and read "
            "world-readable files, with `grading.sandbox: rlimits`"
        )
    if mode != "bwrap":
        _warn_rlimits()
    return mode


@functools.lru_cache(maxsize=1)
def _warn_rlimits() -> None:
    message = ("binac sandbox: bubblewrap does not work here; running with rlimits only, as `grading.sandbox: "
               "rlimits` accepts: programs can reach the network and read world-readable files")
    warnings.warn(message, RuntimeWarning, stacklevel=3)
    log.warning(message)


def isolation() -> str:
    """`bwrap` when bubblewrap works on this machine, else `rlimits`. Probed once per process."""
    return _probe_result()[0]


@functools.lru_cache(maxsize=1)
def _probe_result() -> tuple[str, str | None]:
    return _choose_isolation()


def _choose_isolation() -> tuple[str, str | None]:
    """(`bwrap`, None) when bubblewrap works, else (`rlimits`, why it does not)."""
    if not os.access(PYTHON, os.X_OK):
        raise SandboxError(f"sandbox interpreter not found: {PYTHON}")
    bwrap = shutil.which("bwrap")
    if not bwrap:
        return "rlimits", "bwrap is not installed"
    probe = _probe_bwrap()
    if probe is None:
        return "bwrap", None
    return "rlimits", f"bwrap does not work here ({probe})"


def _probe_bwrap() -> str | None:
    """None when bwrap runs a trivial program as the sandbox will; else its first error line."""
    prefix, identity = _as_user(_run_uid())
    argv = prefix + _bwrap_prefix() + [PYTHON, "-I", "-c", "pass"]
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=30, env={}, **identity)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{type(exc).__name__}: {exc}"
    if done.returncode != 0:
        return (done.stderr.decode("utf-8", "replace").strip().splitlines() or [f"status {done.returncode}"])[0]
    return None

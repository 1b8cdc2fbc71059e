"""Assert planning and the small pure evaluator of the sandbox (`binac_core.grading.sandbox`, docs/sandbox.md).

`_plan` splits each test, one `assert` statement, into what is evaluated here (comparisons, `and`/`or`/`not`,
`math.isclose`, `isinstance`, and operands of literals and `PURE_CALLS`) and the *leaves*, the operands naming a
program or setup name, whose sources go to the sandbox. `_compute` computes an assert with Python's semantics
from the leaves' returned values; it never runs code of the program nor calls `eval`.
"""

from __future__ import annotations

import ast
import functools
import math
import operator
import threading
from dataclasses import dataclass

PURE_CALLS = {
    f.__name__: f
    for f in (
        abs,
        bool,
        chr,
        complex,
        dict,
        float,
        frozenset,
        int,
        len,
        list,
        max,
        min,
        ord,
        range,
        round,
        set,
        sorted,
        str,
        sum,
        tuple,
    )
}
"""Builtins an operand made of literals may call and still be evaluated here (pure, bounded)."""


PURE_KEYWORDS = {"reverse", "base", "ndigits", "start", "default", "rel_tol", "abs_tol"}
MATH_CONSTANTS = {"pi": math.pi, "e": math.e, "tau": math.tau, "inf": math.inf, "nan": math.nan}


MATH_CALLS = {
    f.__name__: f
    for f in (math.sqrt, math.floor, math.ceil, math.fabs, math.log, math.log2, math.log10, math.exp, math.isclose)
}


TYPE_NAMES = {
    t.__name__: t
    for t in (bool, bytearray, bytes, complex, dict, float, frozenset, int, list, set, str, tuple, type(None))
}


_AST_LOCK = threading.Lock()


def parse_python(text: str, mode: str = "exec") -> ast.AST:
    """`ast.parse` under one process-wide lock. Graders run in pool threads, and on CPython 3.11 two threads in
    `ast.parse` at once can fail with "SystemError: AST constructor recursion depth mismatch"
    (python/cpython#106905): a test would then read as unplannable, or a sandbox's result as malformed."""
    with _AST_LOCK:
        return ast.parse(text, mode=mode)


_SIZE_LIMIT = 10**7  # elements or bits an expression evaluated here may build


_COMPARE = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Is: operator.is_,
    ast.IsNot: operator.is_not,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}


_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
    ast.BitOr: operator.or_,
    ast.BitAnd: operator.and_,
    ast.BitXor: operator.xor,
}


_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert, ast.Not: operator.not_}


class TestFormatError(ValueError):
    """A test this module cannot grade without trusting the program: not one `assert` statement, or an operand
    that names no program name yet is beyond the evaluator here (see `_plan`). The caller's fault, not the
    program's."""

    __test__ = False  # not a pytest class


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
            module = parse_python(text.strip())
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
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "math"
        and (attr is None or node.attr == attr)
    )


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
    """Whether `_compute` can compute `node` here with no leaf: literals and the operations listed below."""
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
            _is_math(node.func) and node.func.attr in MATH_CALLS
        )
        return (
            known
            and all(not isinstance(a, ast.Starred) and pure(a) for a in node.args)
            and all(k.arg in PURE_KEYWORDS and pure(k.value) for k in node.keywords)
        )
    return False


class _LeafMissing(Exception):
    """The sandbox wrote no record for a leaf this test needs (the run ended or timed out before it)."""


class _LeafFailed(Exception):
    """A leaf raised in the sandbox, or returned something that is not a plain value."""


def _compute(node: ast.expr, test: _Test, leaf) -> object:
    """`node` with Python's semantics, reading leaf values through `leaf(number, source)`; never runs code of
    the program or calls `eval`. Raises what Python would (ValueError, TypeError...) and _LeafMissing/_LeafFailed."""
    ev = functools.partial(_compute, test=test, leaf=leaf)
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

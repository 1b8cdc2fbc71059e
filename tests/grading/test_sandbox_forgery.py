"""Reward hacks against the code grader, written the way a policy would find them, and the pieces of the verdict.

Each hostile program below gets its wrong answer (or no answer) through the old grader (pass = exit status 0 and
a per-run marker line on stdout, asserts run in the sandboxed process) and must fail now: the verdict is taken
outside the sandbox from plain values (see `binac_core.grading.sandbox`). The last part checks the evaluator and
the strict reader of the results on hand-computed cases, and the memory bound of a run.
"""

from __future__ import annotations

import ast
import collections
import os
import re

import pytest

from binac_core.grading.sandbox import TestFormatError, protocol, run_python
from binac_core.grading.sandbox import plan as planning
from binac_core.grading.sandbox.isolation import MAX_TASKS, MEMORY_BYTES

TESTS = ["assert square(2) == 4", "assert square(3) == 9", "assert square(-1) == 1"]

# Find every 32-hex-digit token the harness might hold (the old per-run marker) and print it on its own line.
_PRINT = "\nfor _token in _found:\n    os.write(1, b'\\n' + _token + b'\\n')\n"
FORGE_FROM_FRAMES = (
    "import os, re, sys\n_found = set()\n_frame = sys._getframe()\nwhile _frame is not None:\n"
    "    for _value in list(_frame.f_locals.values()) + list(_frame.f_code.co_consts):\n"
    "        for _item in (_value if isinstance(_value, list) else [_value]):\n"
    "            if isinstance(_item, (bytes, str)):\n"
    "                _data = _item if isinstance(_item, bytes) else _item.encode()\n"
    "                _found.update(re.findall(rb'(?<![0-9a-f])[0-9a-f]{32}(?![0-9a-f])', _data))\n"
    "    _frame = _frame.f_back\n" + _PRINT
)
FORGE_FROM_GC = (
    "import gc, os, re\n_found = set()\nfor _obj in gc.get_objects():\n"
    "    if isinstance(_obj, list):\n        for _item in _obj:\n            if isinstance(_item, bytes):\n"
    "                _found.update(re.findall(rb'(?<![0-9a-f])[0-9a-f]{32}(?![0-9a-f])', _item))\n" + _PRINT
)
FORGE_WITH_INSPECT = (
    "import inspect, os, re\n_found = set()\nfor _info in inspect.stack():\n"
    "    for _const in _info.frame.f_code.co_consts:\n        if isinstance(_const, bytes):\n"
    "            _found.update(re.findall(rb'[0-9a-f]{32}', _const))\n" + _PRINT
)
WRONG = "def square(x):\n    return x + 1\n"


def _fails(result) -> None:
    assert not result.passed, result.reason
    assert result.reason != "passed"


@pytest.mark.parametrize(
    "forge", [FORGE_FROM_FRAMES, FORGE_FROM_GC, FORGE_WITH_INSPECT], ids=["frames", "gc", "inspect"]
)
def test_a_forged_end_marker_and_exit_zero_does_not_pass(forge):
    result = run_python(WRONG + forge + "os._exit(0)\n", TESTS)
    _fails(result)
    assert result.reason == "exited with status 0 before the tests finished"


def test_a_forged_marker_then_system_exit_inside_the_function_does_not_pass():
    program = (
        "def square(x):\n    import os, sys, re\n    _found = set()\n    _frame = sys._getframe(1)\n"
        "    for _const in _frame.f_code.co_consts:\n        if isinstance(_const, bytes):\n"
        "            _found.update(re.findall(rb'[0-9a-f]{32}', _const))\n"
        "    for _token in _found:\n        os.write(1, b'\\n' + _token + b'\\n')\n    raise SystemExit(0)\n"
    )
    result = run_python(program, TESTS)
    _fails(result)
    assert result.reason == "test 1 failed: assert square(2) == 4 (SystemExit: 0)"


def test_an_excepthook_that_forges_the_marker_does_not_pass():
    program = WRONG + (
        "import os, re, sys\n"
        "def _hook(kind, value, tb):\n    _found = set()\n    while tb is not None:\n"
        "        for _const in tb.tb_frame.f_code.co_consts:\n            if isinstance(_const, bytes):\n"
        "                _found.update(re.findall(rb'[0-9a-f]{32}', _const))\n        tb = tb.tb_next\n"
        "    for _token in _found:\n        os.write(1, b'\\n' + _token + b'\\n')\n    os._exit(0)\n"
        "sys.excepthook = _hook\n"
    )
    result = run_python(program, TESTS)
    _fails(result)
    assert result.reason == "test 1 failed: assert square(2) == 4 (AssertionError: got 3)"


@pytest.mark.parametrize(
    ("program", "detail"),
    [
        ("class Yes:\n    __eq__ = lambda self, other: True\n", "returned a 'Yes' object, not a plain value"),
        (
            "class Yes(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\n",
            "AssertionError: got 0",
        ),
        (
            "class Yes(str):\n    def __eq__(self, other):\n        return True\n    __hash__ = str.__hash__\n",
            "AssertionError: got ''",
        ),
        (
            "class Yes(float):\n    __eq__ = lambda self, other: True\n    __hash__ = float.__hash__\n",
            "AssertionError: got 0.0",
        ),
        ("class Yes(list):\n    __eq__ = lambda self, other: True\n", "AssertionError: got []"),
        (
            "class Yes(tuple):\n    __eq__ = lambda self, other: True\n    __hash__ = tuple.__hash__\n",
            "AssertionError: got ()",
        ),
        ("class Yes(dict):\n    __eq__ = lambda self, other: True\n", "AssertionError: got {}"),
    ],
    ids=["object", "int", "str", "float", "list", "tuple", "dict"],
)
def test_a_value_that_equals_everything_does_not_pass(program, detail):
    result = run_python(program + "def square(x):\n    return Yes()\n", TESTS)
    _fails(result)
    assert (
        result.reason == f"test 1 failed: assert square(2) == 4 ({'square(2) ' if 'plain' in detail else ''}{detail})"
    )


def test_overriding_ne_and_bool_does_not_pass():
    program = (
        "class Never(int):\n    def __ne__(self, other):\n        return False\n    def __bool__(self):\n"
        "        return True\n    __hash__ = int.__hash__\n"
        "def nonzero_gap(x):\n    return Never(0)\n"
        "class Truthy:\n    def __bool__(self):\n        return True\n"
        "def is_even(x):\n    return Truthy()\n"
    )
    gap = run_python(program, ["assert nonzero_gap(3) != 0"])
    even = run_python(program, ["assert is_even(3)"])
    _fails(gap)
    _fails(even)
    assert gap.reason == "test 1 failed: assert nonzero_gap(3) != 0 (AssertionError: got 0)"
    assert even.reason == "test 1 failed: assert is_even(3) (is_even(3) returned a 'Truthy' object, not a plain value)"


def test_an_iterator_override_on_a_list_subclass_is_not_consulted():
    program = (
        "class L(list):\n    def __iter__(self):\n        return iter([4])\n    def __len__(self):\n        return 1\n"
        "    def copy(self):\n        return [4]\n"
        "def square(x):\n    return L([x])\n"
    )
    result = run_python(program, ["assert square(2) == [4]"])
    _fails(result)
    assert result.reason == "test 1 failed: assert square(2) == [4] (AssertionError: got [2])"


def test_monkeypatched_builtins_and_assertion_error_do_not_pass():
    program = (
        "import builtins, sys\n"
        "class Yes:\n    __eq__ = lambda self, other: True\n"
        "class Quiet(Exception):\n    pass\n"
        "for _name in ('type', 'isinstance', 'issubclass', 'repr', 'str', 'eval', 'compile', 'list', 'len'):\n"
        "    setattr(builtins, _name, lambda *a, **k: Yes())\n"
        "builtins.AssertionError = Quiet\nbuiltins.BaseException = Quiet\nsys.excepthook = lambda *a: None\n"
        "def square(x):\n    return Yes()\n"
    )
    result = run_python(program, TESTS)
    _fails(result)
    assert (
        result.reason == "test 1 failed: assert square(2) == 4 (square(2) returned a 'Yes' object, not a plain value)"
    )


def test_fake_records_written_to_every_descriptor_do_not_pass():
    # Plausible records of every shape, for all tests, to each descriptor it can write to, then the same again
    # once the harness has started writing its own; plus the old marker, forged.
    fake = (
        "('ready',)\\n(0,'v',True)\\n(1,'v',('i','9'))\\n(2,'v',('i','1'))\\n"
        "(0,'v',__import__('os').system('true'))\\n" + "(" * 5000 + "\\n"
    )
    program = (
        f'import os\nFAKE = b"{fake}"\n'
        "def _spray():\n    for fd in range(3, 256):\n        try:\n            os.lseek(fd, 0, os.SEEK_SET)\n"
        "            os.write(fd, FAKE)\n        except OSError:\n            pass\n"
        "_spray()\n"
        "def square(x):\n    _spray()\n    return x + 1\n"
    ) + FORGE_FROM_FRAMES
    result = run_python(program, TESTS)
    _fails(result)
    # Its records for test 1 are read up to the first malformed line: a value it chose (True), which is wrong.
    assert result.reason == "test 1 failed: assert square(2) == 4 (AssertionError: got True)"


def test_fake_records_then_exit_zero_do_not_pass():
    program = (
        (
            "import os\n"
            "for fd in range(3, 256):\n    try:\n"
            "        os.write(fd, b\"('ready',)\\n(0,'v',('i','5'))\\n(1,'v',('i','10'))\\n(2,'v',('i','2'))\\n\")\n"
            "    except OSError:\n        pass\n"
        )
        + FORGE_FROM_GC
        + "os._exit(0)\n"
    )
    result = run_python(program, TESTS)
    _fails(result)
    # The records it wrote are values it chose, as if square had returned them: and they are wrong.
    assert result.reason == "test 1 failed: assert square(2) == 4 (AssertionError: got 5)"


def test_reading_the_expected_values_is_not_possible():
    # The expected values never enter the sandbox: nothing it can read holds them.
    secret = 7219938421175
    program = (
        "import gc, sys\nseen = []\n"
        "def probe(x):\n    _f = sys._getframe(1)\n    _text = repr([(_f.f_locals, _f.f_code.co_consts)])\n"
        "    for _o in gc.get_objects():\n        try:\n            _text += repr(_o)[:10000]\n"
        "        except Exception:\n            pass\n"
        f"    return str(int('{secret - 1}') + 1) in _text\n"
    )
    result = run_python(program, [f"assert probe(1) == {secret}"])
    _fails(result)
    assert result.reason == f"test 1 failed: assert probe(1) == {secret} (AssertionError: got False)"


def test_honest_subclass_values_and_containers_pass():
    program = (
        "import collections\nPoint = collections.namedtuple('Point', 'x y')\n"
        "def f():\n    return Point(1, 2)\n"
        "def g():\n    return collections.OrderedDict([('a', [1.5, float('inf')]), ('b', {2, 3})])\n"
        "def h():\n    return collections.Counter('aab')\n"
        "def big():\n    return 2 ** 20000\n"
        "def nothing():\n    return None\n"
    )
    tests = [
        "assert f() == (1, 2)",
        "assert g() == {'b': {3, 2}, 'a': [1.5, float('inf')]}",
        "assert h() == {'a': 2, 'b': 1}",
        "assert big() == 2 ** 20000 and big() % 7 == pow(2, 20000, 7)",
        "assert nothing() is None",
        "assert set(h()) == {'a', 'b'}",
        "assert math.isclose(f()[0], 1.0000000001)",
        "assert isinstance(f(), tuple) and not isinstance(g(), list)",
        "assert 'a' in g() and 'z' not in h()",
    ]
    result = run_python(program, tests.copy())
    assert result.passed, result.reason


# --------------------------------------------------------------------------- planning and evaluating here


def _holds(test: str, values: list | None = None):
    """Plan `test` and evaluate it here with the given leaf values (in order)."""
    plans, sources = planning._plan([test])
    results = protocol._Results(True, {i: ("v", v) for i, v in enumerate(values or [])}, None)
    return protocol._judge(plans[0], results), sources


@pytest.mark.parametrize(
    "test",
    [
        "assert 2 ** 10 == 1024",
        "assert -7 // 2 == -4 and -7 % 2 == 1",
        "assert 7 / 2 == 3.5",
        "assert sorted({3, 1, 2}) == [1, 2, 3]",
        "assert sorted([1, 3, 2], reverse=True) == [3, 2, 1]",
        "assert round(2.675, 2) == 2.67",
        "assert float('inf') > 10 ** 300",
        "assert [1, 2] * 2 == [1, 2, 1, 2]",
        "assert dict([('a', 1)]) == {'a': 1}",
        "assert math.isclose(0.1 + 0.2, 0.3)",
        "assert (1, 2)[::-1] == (2, 1)",
        "assert 1 < 2 < 3 and not 3 < 2",
        "assert 1 if True else 0",
        "assert abs(-3) + len('ab') + sum([1, 2]) == 8",
        "assert frozenset([1]) == {1} and 1 == 1.0 == True",
        "assert int('ff', base=16) == 255",
        "assert max([1, 5, 2]) - min(4, 3) == 2",
        "assert str(12) + chr(65) == '12A' and ord('a') == 97",
        "assert list(range(3)) == [0, 1, 2] and tuple('ab') == ('a', 'b')",
        "assert 1 << 3 | 1 == 9",
        "assert math.pi > 3.14 and math.sqrt(16) == 4.0",
        "assert None is None and 1 in [1] and 2 not in (1,)",
    ],
)
def test_pure_tests_hold_here_without_a_leaf(test):
    outcome, sources = _holds(test)
    assert (outcome, sources) == (None, [])


@pytest.mark.parametrize(
    ("test", "outcome"),
    [
        ("assert 2 ** 10 == 1000", "AssertionError"),
        ("assert 1 / 0 == 1", "ZeroDivisionError: division by zero"),
        ("assert 'a' < 1", "TypeError: '<' not supported between instances of 'str' and 'int'"),
        ("assert 10 ** 10 ** 10 == 0", "ValueError: power too large to evaluate here"),
        ("assert 'x' * 10 ** 9 == ''", "ValueError: repetition too large to evaluate here"),
        ("assert len(list(range(10 ** 12))) == 0", "ValueError: range too long to evaluate here"),
        ("assert 1 == 2, 'one is not two'", "AssertionError: one is not two"),
    ],
)
def test_pure_tests_fail_here_with_pythons_reason(test, outcome):
    assert _holds(test) == (outcome, [])


@pytest.mark.parametrize(
    ("test", "leaves", "values", "outcome"),
    [
        ("assert f(2) == 4", ["f(2)"], [4], None),
        ("assert f(2) == 4", ["f(2)"], [5], "AssertionError: got 5"),
        ("assert set(f(x)) == set([1, 2])", ["set(f(x))"], [{2, 1}], None),
        (
            "assert f(1) == [1, 2] and g(2) == 3",
            ["f(1)", "g(2)"],
            [[1, 2], 4],
            "AssertionError: got f(1) = [1, 2], g(2) = 4",
        ),
        ("assert f(1) == 1 or g(1)", ["f(1)", "g(1)"], [1], None),  # short-circuit: g(1)'s value is not needed
        ("assert not f(0)", ["f(0)"], [[]], None),
        ("assert 0 < f(1) <= 2", ["f(1)"], [2], None),
        ("assert math.isclose(f(1), 2.5, rel_tol=0.01)", ["f(1)"], [2.51], None),
        ("assert isinstance(f(1), (list, tuple))", ["f(1)"], [(1,)], None),
        (
            "assert sum(10, 15) == 6",
            [],
            [],
            "TypeError: 'int' object is not iterable",
        ),  # the builtin, never the program's
        ("assert f(1) == 1, 2", ["f(1)"], [3], "AssertionError: 2; got 3"),
        ("assert f(1) == 1, g(2)", ["f(1)"], [3], "AssertionError: got 3"),  # a message naming the program is not run
    ],
)
def test_operands_naming_the_program_are_leaves(test, leaves, values, outcome):
    assert _holds(test, values) == (outcome, leaves)


@pytest.mark.parametrize(
    "test",
    [
        "x = f(2)",
        "assert f(1) == 1\nassert f(2) == 2",
        "assert [i for i in range(3)] == [0, 1, 2]",
        "assert (",
        "assert 'abc'.upper() == 'ABC'",
    ],
)
def test_tests_that_cannot_be_graded_safely_are_refused(test):
    with pytest.raises(TestFormatError):
        run_python("def f(x):\n    return x\n", [test])


def _encoded(value) -> bytes:
    """What the sandbox's encoder writes for `value` (run here: it is plain Python)."""
    namespace: dict = {}
    exec(protocol._BOOT.split("def _boot")[0].replace("import os, resource, sys", ""), namespace)
    record, _ = namespace["_encoder"](1 << 20, protocol.MAX_DEPTH)
    return record(0, value)


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        0,
        -(2**20000),
        1.5,
        float("inf"),
        -0.0,
        1 + 2j,
        "é\n'\"\ud800",
        b"\x00\xff",
        bytearray(b"ab"),
        [1, [2, (3,)]],
        (),
        {"a": {1: frozenset({2})}},
        {1, 2},
        frozenset(),
        [[[]]],
    ],
    ids=lambda value: type(value).__name__,
)
def test_values_survive_the_encoding(value):
    results = protocol._Results.parse(b"('ready',)\n" + _encoded(value), 1)
    assert results.problem is None and results.records[0][0] == "v"
    got = results.records[0][1]
    assert type(got) is type(value) and got == value
    assert not isinstance(value, float) or float.hex(got) == float.hex(value)  # -0.0 keeps its sign


def test_nan_survives_the_encoding():
    got = protocol._Results.parse(b"('ready',)\n" + _encoded(float("nan")), 1).records[0][1]
    assert got != got


@pytest.mark.parametrize(
    ("value", "what"),
    [((x for x in []), "'generator'"), (map(abs, []), "'map'"), (int, "'type'"), (object(), "'object'")],
)
def test_values_that_are_not_plain_are_named(value, what):
    assert _encoded(value) == f"(0,'n',{what})\n".encode()


def test_deeply_nested_values_are_refused():
    value: list = []
    for _ in range(protocol.MAX_DEPTH + 5):
        value = [value]
    assert _encoded(value) == f"(0,'n','value nested more than {protocol.MAX_DEPTH} deep')\n".encode()


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"('ready',)\n(1,'v',True)\n", "not the next record"),
        (b"('ready',)\n(0,'v',True)\n(0,'v',True)\n", "not the next record"),
        (b"('ready',)\n(0,'v',True)\n(1,'v',True)\n", "more records than leaves"),
        (b"('ready',)\n(0,'v',('x', 1))\n", "unknown tag"),
        (b"('ready',)\n(0,'v',('i', '12g'))\n", "bad 'i' value"),
        (b"('ready',)\n(0,'v',('S', ('l',)))\n", "unhashable"),
        (b"('ready',)\n(0,'v',1)\n", "not an encoded value"),
        (b"('ready',)\n(0,'v',('d', True))\n", "odd dict"),
        (b"('ready',)\n(0,'v',__import__('os'))\n", "malformed node"),
        (b"('ready',)\n" + b"(" * 1000 + b"\n", "too many nested parentheses"),
        (b"('ready',)\n(0,'v',True)", "an unterminated record"),
        (b"('ready' ,)\n" + b"x" * protocol.RESULT_CAP, "over"),
    ],
)
def test_the_results_are_read_strictly(data, problem):
    results = protocol._Results.parse(data, 1)
    assert results.problem is not None and problem in results.problem


def test_a_start_record_alone_is_not_a_pass_when_there_are_tests():
    plans, _ = planning._plan(["assert f(1) == 1"])
    results = protocol._Results.parse(b"('ready',)\n", 1)
    passed, reason = protocol._verdict(plans, results, False, 0, "", [], 10)
    assert not passed and reason == "test 1 failed: assert f(1) == 1 (exited with status 0 before the tests finished)"


# --------------------------------------------------------------------------- the memory bound of one run

SPAWN = """\
import os, threading
report_r, report_w = os.pipe()
gate_r, gate_w = os.pipe()  # the helpers block on it until this process exits
started = 0
def allocate():
    try:
        held = bytearray(MEMORY // 2)
    except MemoryError:
        return b"m"
    try:
        bytearray(MEMORY)
    except MemoryError:
        return b"a"  # half fits, the whole limit on top does not
    return b"X"
def helper():
    os.write(report_w, allocate())
    os.read(gate_r, 1)
while started < 64:
    try:
        if KIND == "process":
            pid = os.fork()
            if pid == 0:
                os.close(gate_w)
                helper()
                os._exit(0)
        else:
            threading.Thread(target=helper, daemon=True).start()
    except (OSError, RuntimeError):
        break
    started += 1
reports = b"".join(os.read(report_r, 1) for _ in range(started)).decode()
print(started, reports)
"""


@pytest.mark.parametrize("kind", ["process", "thread"])
def test_a_run_cannot_start_more_than_max_tasks(kind):
    program = f"MEMORY = {MEMORY_BYTES}\nKIND = {kind!r}\n" + SPAWN
    result = run_python(program, [])
    started, reports = result.stdout.split()
    # Deterministic: each helper reports before the count is printed, and all stay alive until the end.
    assert 1 <= int(started) <= MAX_TASKS - 1, result.stdout
    if kind == "process":
        assert reports == "a" * int(started)  # each process holds at most MEMORY_BYTES
    assert (int(started) + 1) * MEMORY_BYTES <= MAX_TASKS * MEMORY_BYTES


@pytest.mark.needs_tool("bwrap")
def test_the_process_budget_is_exact_as_root():
    if os.geteuid() != 0:
        pytest.skip("as non-root the limit counts the user's other processes")
    result = run_python(f"MEMORY = {MEMORY_BYTES}\nKIND = 'process'\n" + SPAWN, [])
    assert result.stdout.split()[0] == str(MAX_TASKS - 1)


def test_reference_shapes_of_mbpp_asserts_are_planned_as_one_leaf():
    # MBPP asserts compare one call of the program with a literal: the literal never enters the sandbox.
    plans, sources = planning._plan(['assert remove_Occ("hello","l") == "heo"', "assert f([1,2]) == (1, -2.5)"])
    assert sources == ["remove_Occ('hello', 'l')", "f([1, 2])"]
    assert all("heo" not in s and "2.5" not in s for s in sources)
    assert [len(p.leaves) for p in plans] == [1, 1]
    assert isinstance(ast.parse(sources[0], mode="eval").body, ast.Call)
    assert re.fullmatch(r"\w+", collections.Counter(sources).most_common(1)[0][0].split("(")[0])


def test_plans_and_result_records_are_parsed_under_the_one_ast_lock(monkeypatch):
    """Graders run in pool threads and `ast.parse` is not thread-safe on CPython 3.11 (python/cpython#106905):
    planning a test and reading a sandbox's records both parse under `plan._AST_LOCK`, and only there."""
    held = []

    class Recording:
        def __enter__(self):
            held.append(True)

        def __exit__(self, *exc):
            held[-1] = False

    real_parse = ast.parse

    def parse_only_under_the_lock(*args, **kwargs):
        assert held and held[-1], "ast.parse outside the lock"
        return real_parse(*args, **kwargs)

    monkeypatch.setattr(planning, "_AST_LOCK", Recording())
    monkeypatch.setattr(ast, "parse", parse_only_under_the_lock)
    plans, sources = planning._plan(["assert f(1) == 2"])
    assert sources == ["f(1)"] and len(held) == 1
    results = protocol._Results.parse(b"('ready',)\n" + _encoded(2), 1)
    assert results.ready and results.problem is None and len(held) == 3  # the start record and one leaf's

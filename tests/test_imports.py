"""The import graph of the project's own code has no circle, counting every import statement (those inside
functions too: a function-level import that closes a circle only hides it until the function runs)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ROOTS = ("binac_core", "tasks", "flows", "bench", "scripts")


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for root in ROOTS for p in (REPO / root).rglob("*.py")}


def _imports(path: Path, name: str, known: dict[str, Path]) -> set[str]:
    """The project modules `path` imports (a `from pkg import sub` names `pkg.sub` when that is a module)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            names = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in known] or [base]
        else:
            continue
        for n in names:
            while n and n not in known:  # `import a.b.c` where a.b.c is a function or class: its module
                n = n.rpartition(".")[0]
            # Importing a.b.c also runs a.b's and a's __init__, unless the importer is inside that package
            # (its package is then already being imported).
            while n and n != name and not name.startswith(n + "."):
                out.add(n)
                n = n.rpartition(".")[0]
    return out


def import_graph() -> dict[str, set[str]]:
    known = _modules()
    return {name: _imports(path, name, known) for name, path in known.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_cycle_finder_sees_a_circle_through_a_function_level_import():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_reads_imports_inside_functions_and_the_packages_they_run(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("def f():\n    from other import g\n")
    (tmp_path / "other.py").write_text("import pkg.sub\n")
    (tmp_path / "pkg" / "sub.py").write_text("from pkg import sibling\n")
    (tmp_path / "pkg" / "sibling.py").write_text("")
    known = {"pkg": tmp_path / "pkg" / "__init__.py", "other": tmp_path / "other.py",
             "pkg.sub": tmp_path / "pkg" / "sub.py", "pkg.sibling": tmp_path / "pkg" / "sibling.py"}
    graph = {name: _imports(path, name, known) for name, path in known.items()}
    assert graph == {"pkg": {"other"}, "other": {"pkg.sub", "pkg"}, "pkg.sub": {"pkg.sibling"}, "pkg.sibling": set()}
    assert cycles(graph) == [["other", "pkg"]]  # the old grading/__init__ -> benchmarks -> grading.code circle


@pytest.mark.parametrize("root", ROOTS)
def test_no_import_circle(root):
    found = [c for c in cycles(import_graph()) if any(m == root or m.startswith(root + ".") for m in c)]
    assert not found, "import circles: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_library_is_folders_by_concern_with_no_flat_module_left():
    """Every module lives in a subpackage; the old flat paths (binac_core/<module>.py) are gone, with no
    shim: only the package marker and the one error type stay at the top (scripts/relayout.py holds the moves)."""
    top = sorted(p.name for p in (REPO / "binac_core").glob("*.py"))
    assert top == ["__init__.py", "errors.py"]
    folders = {p.name for p in (REPO / "binac_core").iterdir() if (p / "__init__.py").is_file()}
    assert folders == {"model", "rl", "benchmarks", "grading", "store", "runs", "reports", "presets"}

"""The import graph of the project's own code has no circle, counting every import statement (those inside
functions too: a function-level import that closes a circle only hides it until the function runs)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ROOTS = ("binac_core", "studies", "tasks", "flows", "bench", "scripts")


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
    known = {
        "pkg": tmp_path / "pkg" / "__init__.py",
        "other": tmp_path / "other.py",
        "pkg.sub": tmp_path / "pkg" / "sub.py",
        "pkg.sibling": tmp_path / "pkg" / "sibling.py",
    }
    graph = {name: _imports(path, name, known) for name, path in known.items()}
    assert graph == {"pkg": {"other"}, "other": {"pkg.sub", "pkg"}, "pkg.sub": {"pkg.sibling"}, "pkg.sibling": set()}
    assert cycles(graph) == [["other", "pkg"]]  # the old grading/__init__ -> benchmarks -> grading.code circle


@pytest.mark.parametrize("root", ROOTS)
def test_no_import_circle(root):
    found = [c for c in cycles(import_graph()) if any(m == root or m.startswith(root + ".") for m in c)]
    assert not found, "import circles: " + "; ".join(" <-> ".join(c) for c in found)


def layers() -> list[str]:
    """The floors of the code, lowest first (pyproject.toml `[tool.binac] layers`)."""
    import tomllib

    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["binac"]["layers"]


def floor(module: str, order: list[str]) -> int:
    """The index in `order` of the floor `module` lives on (the longest entry that is it or a package above it);
    -1 for the bare `binac_core` package marker, which every import of a binac_core module runs."""
    if module == "binac_core":
        return -1
    found = [i for i, entry in enumerate(order) if module == entry or module.startswith(entry + ".")]
    if not found:
        raise AssertionError(f"{module} lives on no floor of pyproject.toml's [tool.binac] layers")
    return max(found, key=lambda i: len(order[i]))


def upward_imports(graph: dict[str, set[str]], order: list[str]) -> list[str]:
    """Every import that runs from a floor to a higher one, as `importer -> imported`."""
    return sorted(f"{m} -> {n}" for m, deps in graph.items() for n in deps if floor(n, order) > floor(m, order))


def test_the_layer_check_sees_an_upward_import_inside_a_function_and_under_type_checking(tmp_path):
    (tmp_path / "low.py").write_text("def f():\n    import high\n")
    (tmp_path / "high.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import top\n")
    (tmp_path / "top.py").write_text("import low\n")
    known = {name: tmp_path / f"{name}.py" for name in ("low", "high", "top")}
    graph = {name: _imports(path, name, known) for name, path in known.items()}
    assert upward_imports(graph, ["low", "high", "top"]) == ["high -> top", "low -> high"]
    assert upward_imports(graph, ["top", "high", "low"]) == ["top -> low"]
    with pytest.raises(AssertionError, match="no floor"):
        floor("elsewhere.x", ["low"])


def test_no_import_runs_from_a_lower_floor_to_a_higher_one():
    order = layers()
    assert not upward_imports(import_graph(), order), "imports that run up: " + "; ".join(
        upward_imports(import_graph(), order)
    )


def test_every_library_folder_has_a_floor_and_the_package_marker_imports_nothing():
    order = layers()
    folders = {f"binac_core.{p.name}" for p in (REPO / "binac_core").iterdir() if (p / "__init__.py").is_file()}
    modules = {f"binac_core.{p.stem}" for p in (REPO / "binac_core").glob("*.py") if p.stem != "__init__"}
    assert folders | modules == {e for e in order if e.startswith("binac_core.")}
    assert import_graph()["binac_core"] == set()


def test_the_readme_states_the_floors_in_their_order():
    """README's "The folders" names the floors as pyproject.toml lists them (backticked, lowest first)."""
    readme = (REPO / "README.md").read_text()
    line = next(ln for ln in readme.splitlines() if ln.startswith("Floors, lowest first:"))
    named = [n.strip().strip("`").rstrip("/").replace("/", ".") for n in line.split(":", 1)[1].rstrip(".").split(" < ")]
    assert named == layers(), line

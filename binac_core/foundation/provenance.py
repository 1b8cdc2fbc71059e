"""What code computed a result: digests of source files, part of cache keys.

A stage's cache key is its inputs, its task's source (Prefect's TASK_SOURCE) and `stage_code_digest()`. The task
source alone misses the code that does the work (a loss, a grader, a prompt lives in `binac_core`), so without
the digest a re-run after a library edit would silently serve results the old code computed.

- `stage_code_digest()` covers every file of `tasks/` (the stages and their shared helpers) and every
  `binac_core` module they import, transitively (imports inside functions included; read from the bytecode
  `compile` makes of the source, as the standard library's `modulefinder` does; nothing is imported or run): any edit to that code, even to a comment, recomputes every cached stage.
  Modules no stage imports (the comparison and study reports, the study file reader) are left out, so a report
  can be rewritten while a study's runs are cached. Whole modules, not functions: per-function dependency
  tracking is easy to get subtly wrong, and a stale result is the worse error.
- `module_digest(name)` covers one module and every `binac_core` module it imports, transitively. The tiny base
  model's folder is named by it (`Config.base_digest`), so a base model is rebuilt when pretraining code changes
  but not when a loss does: pretraining costs minutes.

Neither covers third-party packages (torch, transformers, math-verify; pinned in `pyproject.toml`), modules
reached only through `importlib` with a computed name (binac has none), nor data files outside the package:
after changing those, force a recomputation with `binac train|compare ... --fresh`.
"""

from __future__ import annotations

import dis
import functools
import hashlib
import types
from collections.abc import Iterator
from pathlib import Path

LIBRARY = Path(__file__).resolve().parent.parent
STAGES = LIBRARY.parent / "tasks"
PACKAGE = "binac_core"


@functools.lru_cache(maxsize=1)
def stage_code_digest() -> str:
    """sha256 (16 hex digits) over `tasks/*.py` and the transitive `binac_core` imports of those files."""
    files = sorted(STAGES.glob("*.py"))
    modules: set[str] = set()
    for f in files:
        for name in _imports_of(f, "tasks"):
            modules |= module_closure(name)
    return _digest(files + [_path(m) for m in modules])


@functools.cache
def module_digest(module: str) -> str:
    """sha256 (16 hex digits) over `module` (e.g. `binac_core.model.pretrain`) and its transitive binac_core imports."""
    return _digest([_path(m) for m in sorted(module_closure(module))])


def module_closure(module: str) -> set[str]:
    """`module` and every binac_core module it imports, directly or through other binac_core modules."""
    seen, todo = set(), [module.rsplit(".", i)[0] for i in range(module.count(".") + 1)]  # its packages run too
    while todo:
        name = todo.pop()
        if name in seen or _path(name) is None:
            continue
        seen.add(name)
        todo.extend(_imports(name))
    return seen


def _digest(files: list[Path]) -> str:
    h = hashlib.sha256()
    for path in sorted(files):
        h.update(path.relative_to(LIBRARY.parent).as_posix().encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()[:16]


def _path(module: str) -> Path | None:
    """The source file of a binac_core module or package, or None when `module` is not one."""
    if module != PACKAGE and not module.startswith(PACKAGE + "."):
        return None
    parts = module.split(".")[1:]
    if not parts:
        return LIBRARY / "__init__.py"
    for candidate in (LIBRARY.joinpath(*parts[:-1], parts[-1] + ".py"), LIBRARY.joinpath(*parts, "__init__.py")):
        if candidate.is_file():
            return candidate
    return None


def _imports(module: str) -> set[str]:
    """The binac_core modules `module` names in its import statements (`from pkg import sub` counts `pkg.sub`)."""
    path = _path(module)
    return _imports_of(path, module if path.name == "__init__.py" else module.rpartition(".")[0])


def _imports_of(path: Path, package: str) -> set[str]:
    """The binac_core modules the file at `path` (a module of `package`) names in its import statements.

    Read from the compiled bytecode, not from `ast.parse`: on CPython 3.11 two threads in `ast.parse` at once can
    fail with "SystemError: AST constructor recursion depth mismatch" (python/cpython#106905; seen in CI, where a
    stage's cache key was computed while another thread parsed), and `compile` to bytecode builds no Python AST
    objects. Dead code the compiler drops (`if False:`) is not read; binac has none."""
    out: set[str] = set()
    code = compile(path.read_bytes(), str(path), "exec", dont_inherit=True, optimize=0)
    for name, level, fromlist in _import_statements(code):
        base = name
        if level:
            parent = package.split(".")[: len(package.split(".")) - level + 1]
            base = ".".join(parent + ([name] if name else []))
        out.add(base)
        out.update(f"{base}.{alias}" for alias in fromlist or ())
    # A submodule import also runs its package's __init__.
    out.update(m.rsplit(".", i)[0] for m in list(out) for i in range(1, m.count(".") + 1))
    return {m for m in out if _path(m) is not None}


def _import_statements(code: types.CodeType) -> Iterator[tuple[str, int, tuple[str, ...] | None]]:
    """(module, level, names) of every import in `code` and the code objects nested in it (functions, classes,
    comprehensions): `IMPORT_NAME module` follows `LOAD_CONST level` and `LOAD_CONST names` (None for `import m`)."""
    ops = list(dis.get_instructions(code))
    for i, op in enumerate(ops):
        if op.opname == "IMPORT_NAME":
            level, names = ops[i - 2], ops[i - 1]
            if i < 2 or level.opname != "LOAD_CONST" or names.opname != "LOAD_CONST":
                raise RuntimeError(f"{code.co_filename}:{op.positions.lineno}: an import this reader does not know")
            yield op.argval, level.argval, names.argval
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _import_statements(const)

"""What code computed a result: digests of `binac_core` source, part of cache keys.

A stage's cache key is its inputs, its task's source (Prefect's TASK_SOURCE) and `library_digest()`. The task
source alone misses the code that does the work (a loss, a grader, a prompt lives in `binac_core`), so without
the digest a re-run after a library edit would silently serve results the old code computed.

- `library_digest()` covers every `.py` and `.yaml` file of the `binac_core` package (path and bytes): any edit,
  even to a comment, recomputes every cached stage. Coarse on purpose: per-function dependency tracking is easy
  to get subtly wrong, and a stale result is the worse error.
- `module_digest(name)` covers one module and every `binac_core` module it imports, transitively (imports inside
  functions included; read from the source with `ast`, nothing is imported). The tiny base model's folder is
  named by it (`Config.base_digest`), so a base model is rebuilt when pretraining code changes but not when a
  loss does: pretraining costs minutes.

Neither covers third-party packages (torch, transformers, math-verify; pinned in `pyproject.toml`) nor data
files outside the package: after changing those, force a recomputation with `binac train|compare ... --fresh`.
"""

from __future__ import annotations

import ast
import functools
import hashlib
from pathlib import Path

LIBRARY = Path(__file__).resolve().parent
PACKAGE = "binac_core"
SUFFIXES = (".py", ".yaml")


@functools.lru_cache(maxsize=1)
def library_digest() -> str:
    """sha256 (16 hex digits) over the relative path and bytes of every library source file, sorted."""
    files = [p for p in LIBRARY.rglob("*") if p.suffix in SUFFIXES and p.is_file() and "__pycache__" not in p.parts]
    return _digest(files)


@functools.cache
def module_digest(module: str) -> str:
    """sha256 (16 hex digits) over `module` (e.g. `binac_core.pretrain`) and its transitive binac_core imports."""
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
        h.update(path.relative_to(LIBRARY).as_posix().encode() + b"\0")
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
    is_pkg = path.name == "__init__.py"
    package = module if is_pkg else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            out.add(base)
            out.update(f"{base}.{alias.name}" for alias in node.names)
    # A submodule import also runs its package's __init__.
    out.update(m.rsplit(".", i)[0] for m in list(out) for i in range(1, m.count(".") + 1))
    return {m for m in out if _path(m) is not None}

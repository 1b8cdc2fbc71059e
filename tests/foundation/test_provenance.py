"""`binac_core.foundation.provenance` reads a module's imports from its bytecode: every import form, at any depth, on
hand-written files, and without `ast.parse` (which is not thread-safe on CPython 3.11, python/cpython#106905)."""

import ast
import textwrap

import pytest

from binac_core.foundation import provenance


def imports_in(tmp_path, source: str, package: str = "binac_core.rl") -> set[str]:
    path = tmp_path / "module.py"
    path.write_text(textwrap.dedent(source))
    return provenance._imports_of(path, package)


def test_every_import_form_at_every_depth_is_read(tmp_path):
    found = imports_in(
        tmp_path,
        """
        from __future__ import annotations
        import os
        import binac_core.errors
        from binac_core.foundation import config
        from . import losses as renamed
        from .update import policy_update
        from ..store.storage import columns

        def late():
            from binac_core.grading import math

        class Holder:
            def method(self):
                import binac_core.model.tokenizer as tok
                return [__import__("x") for _ in ()]

        squares = [lambda: __import__("binac_core.nothing") for _ in range(2)]
        """,
    )
    assert found == {
        "binac_core",
        "binac_core.errors",
        "binac_core.foundation",
        "binac_core.foundation.config",
        "binac_core.rl",
        "binac_core.rl.losses",
        "binac_core.rl.update",
        "binac_core.store",
        "binac_core.store.storage",
        "binac_core.grading",
        "binac_core.grading.math",
        "binac_core.model",
        "binac_core.model.tokenizer",
    }  # os, __future__, names that are no module (policy_update, columns) and __import__ calls are not modules here


def test_a_package_init_resolves_relative_imports_from_itself(tmp_path):
    init = tmp_path / "__init__.py"
    init.write_text("from .losses import k3_kl\nfrom . import update\n")
    assert provenance._imports_of(init, "binac_core.rl") == {
        "binac_core",
        "binac_core.rl",
        "binac_core.rl.losses",
        "binac_core.rl.update",
    }


def test_the_closure_never_calls_ast_parse(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("ast.parse called")

    monkeypatch.setattr(ast, "parse", refuse)
    closure = provenance.module_closure("binac_core.model.pretrain")
    assert {"binac_core.model.pretrain", "binac_core.model.tokenizer", "binac_core.errors"} <= closure


@pytest.mark.parametrize("module", ["binac_core.rl.loop", "binac_core.model.pretrain", "binac_core.studies.regimes"])
def test_the_bytecode_reader_finds_what_the_syntax_tree_names(module):
    """The same modules an `ast` walk of each file finds (single-threaded here), for real modules of the library."""

    def by_ast(name: str) -> set[str]:
        path = provenance._path(name)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        out: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                out.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(
                        package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                    )
                out.add(base)
                out.update(f"{base}.{a.name}" for a in node.names)
        out.update(m.rsplit(".", i)[0] for m in list(out) for i in range(1, m.count(".") + 1))
        return {m for m in out if provenance._path(m) is not None}

    assert provenance._imports(module) == by_ast(module) != set()

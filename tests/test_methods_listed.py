"""`binac_core.rl.methods.METHODS` is the one list of the methods: every other listing of them in the project's code,
docs, queries and deployments (a run of method names separated only by commas, bars, quotes, brackets, spaces,
comment markers, `and` / `or`; or a Markdown table with a row per method) names exactly those methods, in
`METHODS`' order, so that a new method fails here until every listing names it. A listing is a run or table of at
least `LISTING_MIN` distinct methods: fewer is a chosen subset (the demo's three methods, an example). Records keep
what they were written with (`RECORDS`)."""

from __future__ import annotations

import re
from pathlib import Path

from binac_core.reports.plots import METHOD_ORDER
from binac_core.rl.methods import METHODS

REPO = Path(__file__).resolve().parents[1]
SUFFIXES = (".py", ".md", ".sql", ".yaml", ".yml", ".toml", ".sh", ".cfg", ".txt")
LISTING_MIN = 6
"""Distinct method names from which a run or a table is a listing of the methods (two thirds of them)."""
RECORDS = ("studies/", "docs/results", "bench/results.md", "binac_core/rl/methods.py", "tests/test_methods_listed.py")
"""Paths (prefixes) not scanned: dated records (study files and designs, results pages) stay as written, and the
list itself and this test's examples are not copies of it."""
ORDERINGS = {"binac_core/reports/plots.py": "METHOD_ORDER, the order reports and plots show the methods in"}
"""Files whose listing is another order of the methods (file: what it is): it names the same methods."""
NOT_LISTINGS = {
    "tests/integration/test_study.py": "the methods studies/sparse-feedback.yaml, a record, names",
}
"""Files whose listing names a chosen set of methods, not every method (file: why)."""

_NAME = "(?:" + "|".join(sorted(map(re.escape, METHODS), key=len, reverse=True)) + r")(?![\w-])"
_METHOD = re.compile(rf"(?<![\w/.-]){_NAME}")
_SEPARATOR = r"(?:[\s`'\",|()\[\]]|--|#|\band\b|\bor\b)+"
_RUN = re.compile(rf"(?<![\w/.-]){_NAME}(?:{_SEPARATOR}{_NAME})+")
_TABLE_ROW = re.compile(rf"^\|\s*`?({_NAME})`?\s*\|")


def _distinct(names: list[str]) -> list[str]:
    return list(dict.fromkeys(names))


def listings(text: str) -> list[tuple[int, list[str]]]:
    """(line, the distinct methods in order) of every listing in `text`: runs of method names and Markdown tables
    whose first column names a method per row, each of at least `LISTING_MIN` methods."""
    found = [(text.count("\n", 0, m.start()) + 1, _distinct(_METHOD.findall(m.group()))) for m in _RUN.finditer(text)]
    table: list[str] = []
    for number, line in enumerate([*text.splitlines(), ""], start=1):
        row = _TABLE_ROW.match(line)
        if row:
            table.append(row.group(1))
        elif table:
            found.append((number - len(table), _distinct(table)))
            table = []
    return sorted((line, names) for line, names in found if len(names) >= LISTING_MIN)


def _scanned() -> list[Path]:
    """The project's text files: everything under the repository but hidden folders, the virtual environment and
    `RECORDS`."""
    out = []
    for path in sorted(REPO.rglob("*")):
        rel = path.relative_to(REPO).as_posix()
        hidden = any(part.startswith(".") for part in path.relative_to(REPO).parts)
        wanted = path.suffix in SUFFIXES or path.name == "Makefile"
        if path.is_file() and wanted and not hidden and not rel.startswith(RECORDS):
            out.append(path)
    return out


def stale_listings(rel: str, text: str) -> list[str]:
    """Every listing in `text` (file `rel`) that is not `METHODS`: in its order, or as a set in `ORDERINGS`."""
    if rel in NOT_LISTINGS:
        return []
    wanted = set(METHODS) if rel in ORDERINGS else list(METHODS)
    return [
        f"{rel}:{line}: {', '.join(names)}"
        for line, names in listings(text)
        if (set(names) if rel in ORDERINGS else names) != wanted
    ]


def test_the_scan_finds_runs_and_tables_of_methods_and_not_a_chosen_few():
    every = ", ".join(f"`{m}`" for m in METHODS)
    text = f"""Methods: {every}.
-- a method: {" | ".join(METHODS[:3])} |
--   {" | ".join(METHODS[3:7])} | eval
compared = ["grpo", "fixed_critic", "binac"]
binac_core/rl/methods.py, binac-local, binac_core

| method | what it trains |
| --- | --- |
""" + "".join(f"| `{m}` | ... |\n" for m in METHODS[:-1])
    assert listings(text) == [(1, list(METHODS)), (2, list(METHODS[:7])), (9, list(METHODS[:-1]))]
    assert [entry.split(":")[1] for entry in stale_listings("x.md", text)] == ["2", "9"]
    shuffled = ", ".join(reversed(METHODS))
    assert stale_listings("x.md", shuffled) and not stale_listings("binac_core/reports/plots.py", shuffled)


def test_every_listing_of_the_methods_is_methods():
    stale = [
        entry for path in _scanned() for entry in stale_listings(path.relative_to(REPO).as_posix(), path.read_text())
    ]
    assert not stale, "list every method of binac_core/rl/methods.py's METHODS, in its order:\n" + "\n".join(stale)


def test_each_exception_still_has_its_listing():
    """An exception whose listing is gone is removed (it would excuse a new one)."""
    for rel in {**ORDERINGS, **NOT_LISTINGS}:
        assert listings((REPO / rel).read_text()), rel


def test_the_reports_order_names_every_method_once():
    assert sorted(METHOD_ORDER) == sorted(METHODS)

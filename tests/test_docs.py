"""The README and docs/: every relative link reaches a file (and a heading, when it names one), reference pages and
the code (its docstrings, comments, queries, presets, tests, scripts, benches and study files) tell no project
history, every results page opens with its date, commit, status and conclusion, and docs/layout.md lists every
module as `scripts/layout.py` writes it."""

import re
import sys

from conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
import layout  # noqa: E402

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
REFERENCE = [
    REPO / "README.md",
    *(p for p in sorted((REPO / "docs").glob("*.md")) if not p.name.startswith("results-")),
]
CODE_FOLDERS = ("binac_core", "flows", "tasks", "sql", "studies/editions", "tests", "scripts")
CODE = sorted(
    {
        *(
            p
            for folder in CODE_FOLDERS
            for p in (REPO / folder).rglob("*")
            if p.suffix in (".py", ".sql", ".yaml", ".md") and "__pycache__" not in p.parts
        ),
        *(REPO / "bench").glob("*.py"),
        *(REPO / "studies").glob("*.yaml"),
        *(REPO / name for name in ("prefect.yaml", "Makefile", "setup.py", "pyproject.toml", ".ci/run")),
    }
)
"""The code, its tests, scripts, benches and study files. Dated records keep their history: the design files
(studies/*.design.md), the results pages (docs/results-*.md) and bench/results.md."""
HISTORY = re.compile(r"issue [0-9]+|previous\ssession", flags=re.I)
"""History lives in git and in the dated records. Written so that it does not match itself (this file is scanned)."""
LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but '-' and '_' dropped, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page) -> set[str]:
    text = re.sub(r"^(    |\t).*$", "", page.read_text(), flags=re.M)  # headings inside code blocks do not count
    return {slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, flags=re.M)}


def test_every_relative_link_reaches_a_file_and_heading():
    broken = []
    for page in PAGES:
        for target in LINK.findall(page.read_text()):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.relative_to(REPO)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{page.relative_to(REPO)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_reference_pages_and_code_tell_no_project_history():
    assert len(REFERENCE) > 5 and len(CODE) > 50
    hits = [
        f"{page.relative_to(REPO)}:{i}: {line.strip()}"
        for page in [*REFERENCE, *CODE]
        for i, line in enumerate(page.read_text().splitlines(), 1)
        if HISTORY.search(line)
    ]
    assert not hits, "\n".join(hits)


def test_readme_stays_a_map():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    assert "make test " in readme and "make demo " in readme and "BINAC_REQUIRE_SYSTEM_TOOLS=1" in readme
    results = sorted(p.name for p in (REPO / "docs").glob("results-*.md"))
    assert results and all(f"(docs/{name})" in readme for name in results), "every results page linked"


def test_results_pages_open_with_date_commit_status_and_conclusion():
    for page in sorted((REPO / "docs").glob("results-*.md")):
        head = page.read_text().split("\n## ", 1)[0]
        missing = [f for f in ("**Date:**", "**Commit", "**Status:**", "**Conclusion:**") if f not in head]
        assert not missing, f"{page.name}: its opening lacks {missing}"


def test_layout_md_lists_every_module_with_its_docstrings_first_sentence():
    assert not layout.problems(), "\n".join(layout.problems())
    current = layout.PAGE.read_text()
    assert layout.page(current) == current, "docs/layout.md's module list is stale: run python scripts/layout.py"
    listed = re.findall(r"^- `([^`]+\.py)`: ", current, flags=re.M)
    assert len(listed) > 100 and "errors.py" in listed and "train.py" in listed


def test_a_first_sentence_ends_at_the_first_full_stop_outside_parentheses_and_code():
    assert layout.first_sentence("A model (e.g. a hub\nid). More.") == "A model (e.g. a hub id)."
    assert layout.first_sentence("Runs `python -m a.b`. Then.") == "Runs `python -m a.b`."
    assert layout.first_sentence("Stops at the paragraph:\n\n- a list. Item.") == "Stops at the paragraph:"

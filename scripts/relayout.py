"""The library's layers (issue 34), as a script: `git mv` each module that sat on a floor above its users, then
rewrite every reference to it in the repository's text files (code, docstrings, docs, SQL comments, presets, the
Makefile). Run once from the repository root: `python scripts/relayout.py`; a second run finds nothing to move and
rewrites nothing. The order of the floors is `binac_core.LAYERS`; tests/test_imports.py checks it.

What moves (module names are unchanged, so `config.load_config`, `stats.mean_ci` and the like stay as they are):
- the foundation every floor uses (config, files, statistics, workspace, faults, code provenance) down to
  `binac_core/foundation/`;
- the verdict syntax beside the benchmarks that declare it (`benchmarks/verdict.py`), the stage records beside
  the model that produces them (`model/stage_io.py`);
- the study's modules (its file and plans, regimes, preconditions, verdict rules, pilot rule, report) up to
  `binac_core/studies/`;
- their tests to the folders that mirror the library.

What it rewrites, in every tracked text file but this one and the study archives:
- `binac_core.<package>.<module>` and `binac_core/<package>/<module>` (a dotted name or a path) of a moved module;
- `<package>/<module>.py` written without the `binac_core/` prefix;
- `from binac_core.<package> import a, b as c` lines, split per package where some names moved;
- `tests/<folder>/test_x.py` paths and `tests.<folder>.test_x` names of the moved tests.
Import order inside a file is left to `ruff check --fix --select I` afterwards.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

MOVES = {
    "runs.config": "foundation.config",
    "runs.config_reference": "foundation.config_reference",
    "runs.workspace": "foundation.workspace",
    "runs.faults": "foundation.faults",
    "runs.provenance": "foundation.provenance",
    "store.files": "foundation.files",
    "reports.stats": "foundation.stats",
    "rl.verdict": "benchmarks.verdict",
    "rl.stage_io": "model.stage_io",
    "runs.study": "studies.study",
    "runs.regimes": "studies.regimes",
    "runs.preconditions": "studies.preconditions",
    "reports.study_report": "studies.study_report",
    "reports.hypotheses_v3": "studies.hypotheses_v3",
    "reports.pilot_rule": "studies.pilot_rule",
    "reports.verdicts": "studies.verdicts",
    "reports.run_values": "studies.run_values",
}
"""Old `<package>.<module>` under binac_core -> new."""
PACKAGE_DOC = {
    "foundation": "What every floor of the library uses: the typed config, stage files, statistics, the workspace, "
    "fault points, code provenance. It imports no other binac_core folder.",
    "studies": "Studies: the study file and its run plans, regimes, preconditions and gates, verdict rules, the "
    "pilot rule, the study report.",
}
TEST_MOVES = {
    "runs/test_config_reference": "foundation",
    "runs/test_provenance": "foundation",
    "store/test_files": "foundation",
    "rl/test_verdict": "benchmarks",
    "runs/test_preconditions": "studies",
    "runs/test_regimes": "studies",
    "reports/test_hypotheses_v3": "studies",
    "reports/test_pilot_rule": "studies",
    "reports/test_study_report": "studies",
}
"""Old `tests/<folder>/<name>` -> its new folder under tests/."""
SKIPPED = ("scripts/relayout.py", "studies/archive/")
TEXT_SUFFIXES = {".py", ".md", ".sql", ".yaml", ".yml", ".toml", ".txt", ".cfg", ".ini", ".html", ""}

_OLD = "|".join(re.escape(m).replace(r"\.", "[./]") for m in sorted(MOVES, key=len, reverse=True))
_DOTTED = re.compile(r"\bbinac_core([./])(" + _OLD + r")(?![\w])")
_BARE_PATH = re.compile(r"(?<![\w/.])(" + "|".join(re.escape(m.replace(".", "/")) for m in MOVES) + r")\.py\b")
_TEST_PATH = re.compile(r"\btests/(" + "|".join(re.escape(t) for t in TEST_MOVES) + r")\.py\b")
_TEST_DOTTED = re.compile(r"\btests\.(" + "|".join(re.escape(t).replace("/", r"\.") for t in TEST_MOVES) + r")\b")
_FROM_IMPORT = re.compile(
    r"^(?P<indent>[ \t]*)from binac_core\.(?P<package>\w+) import (?P<names>\w+(?: as \w+)?"
    r"(?:, \w+(?: as \w+)?)*)$",
    re.MULTILINE,
)


def _new(old: str, sep: str) -> str:
    """The new `<package><sep><module>` of an old one written with `sep` (a dot or a slash)."""
    return MOVES[old.replace("/", ".")].replace(".", sep)


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=root, check=True)


def move_modules(root: Path) -> None:
    for package, doc in PACKAGE_DOC.items():
        init = root / "binac_core" / package / "__init__.py"
        if not init.exists():
            init.parent.mkdir(exist_ok=True)
            init.write_text(f'"""{doc}"""\n')
            _git(root, "add", str(init))
    for old, new in MOVES.items():
        src, dst = (root / "binac_core" / f"{m.replace('.', '/')}.py" for m in (old, new))
        if src.exists():
            _git(root, "mv", str(src), str(dst))
    for old, folder in TEST_MOVES.items():
        src = root / "tests" / f"{old}.py"
        if src.exists():
            (root / "tests" / folder).mkdir(exist_ok=True)
            _git(root, "mv", str(src), str(root / "tests" / folder / src.name))


def _split_from_import(match: re.Match) -> str:
    indent, package = match["indent"], match["package"]
    groups: dict[str, list[str]] = {}
    for name in (n.strip() for n in match["names"].split(",")):
        module = name.split(" as ")[0].strip()
        target = MOVES.get(f"{package}.{module}", f"{package}.{module}").rpartition(".")[0]
        groups.setdefault(target, []).append(name)
    return "\n".join(
        f"{indent}from binac_core.{target} import {', '.join(names)}" for target, names in sorted(groups.items())
    )


def rewrite(text: str, path: Path) -> str:
    text = _DOTTED.sub(lambda m: f"binac_core{m[1]}{_new(m[2], m[1])}", text)
    text = _BARE_PATH.sub(lambda m: f"{_new(m[1], '/')}.py", text)
    text = _TEST_PATH.sub(lambda m: f"tests/{TEST_MOVES[m[1]]}/{m[1].rpartition('/')[2]}.py", text)
    text = _TEST_DOTTED.sub(lambda m: f"tests.{TEST_MOVES[m[1].replace('.', '/')]}.{m[1].rpartition('.')[2]}", text)
    if path.suffix == ".py":
        text = _FROM_IMPORT.sub(_split_from_import, text)
    return text


def main() -> int:
    root = Path(
        subprocess.run(
            ["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=True
        ).stdout.strip()
    )
    move_modules(root)
    files = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True).stdout.split()
    changed = 0
    for name in files:
        path = Path(name)
        if name.startswith(SKIPPED) or path.suffix not in TEXT_SUFFIXES or not (root / path).is_file():
            continue
        try:
            text = (root / path).read_text()
        except UnicodeDecodeError:
            continue
        new = rewrite(text, path)
        if new != text:
            (root / path).write_text(new)
            changed += 1
    print(f"relayout: {changed} files rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())

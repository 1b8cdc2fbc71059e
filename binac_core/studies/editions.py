"""Study editions: the code that belongs to one pre-registered design (its hypotheses and their report section), one
module per edition. It lives with the study files and is loaded by the name a study file's `hypotheses:` gives.

An edition is a file `<name>.py` in an `editions/` folder: the one beside the study file first, then the
repository's `studies/editions/`. It defines `section(st, done, totals) -> list[str]`: the report's "## Hypotheses"
section over the study `st`, its finished runs `done` and its equal-budget totals (`study.equal_budget_totals`);
the report calls it for every study but a pilot (binac_core/studies/study_report.py). An edition imports from
`binac_core`, never the reverse: a new edition adds files and edits none of the library's. `DEFAULT` is the
edition of a study file without the key."""

from __future__ import annotations

import hashlib
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

from binac_core.errors import BinacError

DEFAULT = "second_edition"
FOLDER = "editions"
"""The folder name searched beside the study file."""
REPO_EDITIONS = Path(__file__).resolve().parents[2] / "studies" / FOLDER
"""The repository's editions (studies/editions/), searched after the study file's own folder."""
NAME = re.compile(r"[a-z_][a-z0-9_]*")
EXPLORATION = [
    "## Hypotheses",
    "",
    "Not tested: an exploration (variants without a selection metric, and no hypotheses of its own).",
    "",
]
"""The section of an edition that tests no variants, for a study with variants but no selection metric."""
_loaded: dict[Path, ModuleType] = {}


def folders(study_dir: Path) -> list[Path]:
    """The folders searched for an edition of a study file in `study_dir`, in order (each once)."""
    out: list[Path] = []
    for folder in (Path(study_dir) / FOLDER, REPO_EDITIONS):
        if folder.resolve() not in [f.resolve() for f in out]:
            out.append(folder)
    return out


def known(study_dir: Path) -> list[str]:
    """The edition names found in `folders(study_dir)`, sorted."""
    return sorted({p.stem for f in folders(study_dir) if f.is_dir() for p in f.glob("*.py") if NAME.fullmatch(p.stem)})


def find(name: str, study_dir: Path) -> Path:
    """The file of edition `name` for a study file in `study_dir`; one line naming the folders searched otherwise."""
    if NAME.fullmatch(name):
        for folder in folders(study_dir):
            if (folder / f"{name}.py").is_file():
                return folder / f"{name}.py"
    searched = ", ".join(str(f) for f in folders(study_dir))
    raise BinacError(
        f"hypotheses: no edition {name!r} (a module {name}.py searched in {searched}; "
        f"known: {', '.join(known(study_dir)) or 'none'})"
    )


def load(name: str, study_dir: Path) -> ModuleType:
    """Edition `name` for a study file in `study_dir`, imported once per file; one line when it has no `section`."""
    path = find(name, study_dir).resolve()
    if path not in _loaded:
        module_name = f"binac_editions.{name}_{hashlib.sha256(str(path).encode()).hexdigest()[:8]}"
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
        if not callable(getattr(module, "section", None)):
            del sys.modules[module_name]
            raise BinacError(f"edition {path}: defines no section(st, done, totals)")
        _loaded[path] = module
    return _loaded[path]


def section(st, done: list[dict], totals: dict[str, int]) -> list[str]:
    """The "Hypotheses" section of study `st` by its edition (`st.hypotheses`, found beside `st.path`)."""
    return load(st.hypotheses, Path(st.path).parent).section(st, done, totals)

"""The move of binac_core's flat modules into subpackages (issue 24), as a script: `git mv` each module, then
rewrite every import and every path reference in the repository's text files (code, docstrings, docs, SQL
comments, presets, the Makefile) from the old location to the new one. Run once from the repository root:
`python scripts/relayout.py`; a second run finds nothing to move and rewrites nothing.

What it rewrites, in every tracked text file but this one:
- `binac_core.<module>` and `binac_core/<module>` (a dotted name or a path) of a moved module;
- `from binac_core import a, b as c` lines, split per subpackage (`from binac_core.store import storage`);
- `tests/test_x.py` paths of the tests moved into the folders that mirror the library (`TEST_MOVES`).
It does not touch bare module names (`storage.run_sample`, `batches.verdict_bonus`): module names are unchanged.
Paths computed from `__file__` inside the moved modules are fixed by hand in the same commit.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

MOVES = {
    "model": ("base_model", "pretrain", "pretrain_teacher", "smol", "tokenizer", "policy", "decode", "fused_lora",
              "memory", "generation", "generation_vllm", "runtime"),
    "rl": ("episodes", "batches", "losses", "update", "methods", "stage_io", "verdict", "evaluation", "eval_stage"),
    "benchmarks": ("data", "problems", "prompts"),
    "store": ("storage", "records", "step_records", "feedback_index", "sqlrun", "tracking", "files"),
    "runs": ("config", "plans", "provenance", "workspace", "runlock", "faults", "study", "regimes"),
    "reports": ("report", "study_report", "plots", "stats", "measures", "critic_health"),
}
PACKAGE_DOC = {
    "model": "The model: base models (tiny pretraining, smol, hub), tokenizer, the LoRA policy, generation backends.",
    "rl": "The RL algorithm: episodes, scored batches, losses and updates, methods, evaluation protocols.",
    "store": "Where rows get written: the trajectory store, its records, feedback index, SQL runner, MLflow tracking.",
    "runs": "Run infrastructure: config, argument plans, code provenance, workspace, run lock, faults, studies.",
    "reports": "Reports: the comparison and study reports, plots, statistics, the study's measures, critic health.",
}
TEST_MOVES = {
    "model": ("adapters", "base_model", "checkpointing", "decode", "fused_lora", "memory", "policy_init",
              "real_model_sampling", "smol", "tokenizer", "logprob_check", "vllm_settings"),
    "rl": ("losses", "methods", "verdict", "evaluate"),
    "benchmarks": ("benchmarks", "data", "prompts", "synthetic"),
    "grading": ("grading_code", "grading_math", "grading_other", "grader_counts", "sandbox", "sandbox_forgery"),
    "store": ("feedback_index", "files", "sql_comparisons"),
    "runs": ("regimes", "cli"),
    "reports": ("measures", "study_measures", "study_report"),
    "bench": ("bench", "stage_costs"),
    "flows": ("fanout",),
    "integration": ("train", "deployment", "reliability", "study", "ui", "wheel", "vllm", "gpu_check", "sql", "loop",
                    "cache_keys"),
}
"""The tests mirror the library's subpackages; `integration/` holds the files whose tests start real servers,
`binac` subprocesses or Chromium (`make test-fast` leaves them out, with every test that uses a slow fixture)."""
TEST_FOLDER = {f"test_{name}": folder for folder, names in TEST_MOVES.items() for name in names}
SUBPACKAGE = {module: package for package, modules in MOVES.items() for module in modules}
TEXT_SUFFIXES = {".py", ".md", ".sql", ".yaml", ".yml", ".toml", ".txt", ".cfg", ".ini", ""}
_FROM_IMPORT = re.compile(r"^(?P<indent>[ \t]*)from binac_core import (?P<names>[A-Za-z_][\w, ]*(?: as \w+)?[\w, ]*)$",
                          re.MULTILINE)
_DOTTED = re.compile(r"\bbinac_core([./])(" + "|".join(sorted(SUBPACKAGE, key=len, reverse=True)) + r")(?![\w])")
_TEST_PATH = re.compile(r"\btests/(" + "|".join(TEST_FOLDER) + r")\.py\b")


def move_modules(root: Path) -> None:
    for package, modules in MOVES.items():
        folder = root / "binac_core" / package
        folder.mkdir(exist_ok=True)
        init = folder / "__init__.py"
        if not init.exists():
            init.write_text(f'"""{PACKAGE_DOC[package]}"""\n')
            subprocess.run(["git", "add", str(init)], cwd=root, check=True)
        for module in modules:
            old = root / "binac_core" / f"{module}.py"
            if old.exists():
                subprocess.run(["git", "mv", str(old), str(folder / old.name)], cwd=root, check=True)
    for name, folder in TEST_FOLDER.items():
        old = root / "tests" / f"{name}.py"
        if old.exists():
            (root / "tests" / folder).mkdir(exist_ok=True)
            subprocess.run(["git", "mv", str(old), str(root / "tests" / folder / old.name)], cwd=root, check=True)


def _split_from_import(match: re.Match) -> str:
    indent, names = match["indent"], [n.strip() for n in match["names"].split(",") if n.strip()]
    groups: dict[str, list[str]] = {}
    for name in names:
        module = name.split(" as ")[0].strip()
        groups.setdefault(SUBPACKAGE.get(module, ""), []).append(name)
    lines = [f"{indent}from binac_core{'.' + package if package else ''} import {', '.join(group)}"
             for package, group in sorted(groups.items())]
    return "\n".join(lines)


def rewrite(text: str, path: Path) -> str:
    text = _DOTTED.sub(lambda m: f"binac_core{m[1]}{SUBPACKAGE[m[2]]}{m[1]}{m[2]}", text)
    text = _TEST_PATH.sub(lambda m: f"tests/{TEST_FOLDER[m[1]]}/{m[1]}.py", text)
    if path.parts[0] == "tests" and len(path.parts) == 3:  # a moved test: the repository is one folder further up
        text = text.replace("Path(__file__).resolve().parents[1]", "Path(__file__).resolve().parents[2]")
    if path.suffix == ".py":
        text = _FROM_IMPORT.sub(_split_from_import, text)
    return text


def main() -> int:
    root = Path(subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                               check=True).stdout.strip())
    move_modules(root)
    files = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True).stdout.split()
    changed = 0
    for name in files:
        path = Path(name)
        if path.as_posix() == "scripts/relayout.py" or path.suffix not in TEXT_SUFFIXES or not (root / path).is_file():
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

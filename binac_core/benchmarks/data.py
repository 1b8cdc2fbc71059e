"""Benchmark loaders: `load_benchmark(name, split)` returns a `datasets.Dataset` with one row per problem.

Every row carries `id` (str), `question` (the problem exactly as the actor sees it) and `answer` (the reference
the grader compares with); MBPP rows also carry `tests` (the three assert strings) and `setup`
(`test_setup_code`), GPQA rows `choices` (the four options in their shuffled order).

| name | train | eval |
| --- | --- | --- |
| `math`, `math500` | MATH train + the MATH test problems not in MATH-500 (PRM800K's 12,000) | MATH-500 (500) |
| `mbpp` | task ids 601-974 (374) | task ids 11-510 (500); ids 1-10 are kept for few-shot prompts |
| `gpqa_diamond` | none | 198, options shuffled with a fixed seed per question |
| `gsm8k` | 7,473 | 1,319 |

Sources: the files of `$BINAC_DATA_DIR` when it is set (layout and checksums in that folder's README), else the
Hugging Face hub ids in `HUB_SOURCES`. The hub path is not exercised offline (the tests stub
`datasets.load_dataset`); with `HF_HUB_OFFLINE=1` it fails with a one-line `BinacError`. Split names are
`train` and `eval` (`test` is an alias of `eval`). The synthetic family is built by
`binac_core.benchmarks.synthetic`, not here; each benchmark module reads its rows with `problem_rows`.

Reference behaviour: the PRM800K split (https://github.com/openai/prm800k/tree/main/prm800k/math_splits), the
MBPP split in google-research `mbpp/README.md`, simple-evals' GPQA options shuffle
(https://github.com/openai/simple-evals/blob/main/gpqa_eval.py), and GSM8K's `#### N` answer line
(https://github.com/openai/grade-school-math).
"""

from __future__ import annotations

import csv
import functools
import hashlib
import json
import os
import random
import re
from collections.abc import Iterable
from functools import partial
from pathlib import Path

from binac_core.benchmarks.interface import Benchmark
from binac_core.errors import BinacError
from binac_core.grading.extract import last_boxed

BENCHMARKS = ("gpqa_diamond", "gsm8k", "math", "math500", "mbpp")
SPLIT_ALIASES = {"train": "train", "eval": "eval", "test": "eval"}
MBPP_TRAIN_IDS = range(601, 975)
MBPP_EVAL_IDS = range(11, 511)
LETTERS = "ABCD"

# Two MATH train solutions end in an empty `\boxed{}` (the multiple-choice letter was lost upstream); both
# solutions argue that no term is prime, i.e. the count asked for is 0 (choice A in the problem text).
MATH_ANSWER_ERRATA = {"train/number_theory/7115.json": "0", "train/number_theory/7117.json": "0"}

HUB_SOURCES = {
    "math500": ("HuggingFaceH4/MATH-500", None),
    "math": ("EleutherAI/hendrycks_math", None),
    "mbpp": ("google-research-datasets/mbpp", "full"),
    "gpqa_diamond": ("Idavidrein/gpqa", "gpqa_diamond"),
    "gsm8k": ("openai/gsm8k", "main"),
}
MATH_SUBJECTS = (
    "algebra",
    "counting_and_probability",
    "geometry",
    "intermediate_algebra",
    "number_theory",
    "prealgebra",
    "precalculus",
)
Record = tuple[str, dict]  # (where: "file line N" or "hub-id row N", the raw record)


def benchmark_names() -> list[str]:
    """The benchmark names `load_benchmark` accepts (the synthetic family is separate)."""
    return list(BENCHMARKS)


def load_benchmark(name: str, split: str):
    """The rows of one benchmark split as a `datasets.Dataset`; errors are one-line `BinacError`s naming the value."""
    import datasets

    if name not in BENCHMARKS:
        raise BinacError(f"unknown benchmark {name!r} (known: {', '.join(BENCHMARKS)})")
    if split not in SPLIT_ALIASES:
        raise BinacError(f"unknown split {split!r} for {name} (known: train, eval, test)")
    split = SPLIT_ALIASES[split]
    if name == "gpqa_diamond" and split == "train":
        raise BinacError("split 'train' is not available for gpqa_diamond (eval only)")
    folder = os.environ.get("BINAC_DATA_DIR")
    # Local files are parsed once per process; the hub path has the `datasets` cache of its own.
    rows = _local_rows(name, split, folder) if folder else _build(name, split, _HubSource())
    return datasets.Dataset.from_list([dict(r) for r in rows])


def problem_rows(name: str, task_cfg, split: str) -> list[dict]:
    """The rows a run trains or evaluates on, as plain dicts in the split's order; the eval split is capped at
    `task_cfg.n_test` rows (a benchmark module's `load_rows`)."""
    rows = [dict(r) for r in load_benchmark(name, split)]
    return rows[: task_cfg.n_test] if split == "eval" else rows


@functools.lru_cache(maxsize=16)
def _local_rows(name: str, split: str, folder: str) -> tuple[dict, ...]:
    return _build(name, split, _LocalSource(Path(folder)))


def _build(name: str, split: str, source) -> tuple[dict, ...]:
    build = {
        "math": _math_rows,
        "math500": _math_rows,
        "mbpp": _mbpp_rows,
        "gpqa_diamond": _gpqa_rows,
        "gsm8k": _gsm8k_rows,
    }[name]
    return tuple(build(source, split))


# --------------------------------------------------------------------------- sources of raw records


class _LocalSource:
    """Raw records from the files of a data folder (layout: that folder's README)."""

    def __init__(self, folder: Path):
        if not folder.is_dir():
            raise BinacError(f"data folder not found: {folder} (from BINAC_DATA_DIR)")
        self.folder = folder

    def math500(self) -> list[Record]:
        return _read_jsonl(self._file("math500/test.jsonl"))

    def math(self, split: str) -> list[Record]:
        return _read_jsonl(self._file(f"math/{split}.jsonl"))

    def mbpp(self) -> list[Record]:
        return _read_jsonl(self._file("mbpp/mbpp.jsonl"))

    def gpqa_diamond(self) -> list[Record]:
        return _read_csv(self._file("gpqa/gpqa_diamond.csv"))

    def gsm8k(self, split: str) -> list[Record]:
        return _read_jsonl(self._file(f"gsm8k/{split}.jsonl"))

    def _file(self, relative: str) -> Path:
        path = self.folder / relative
        if not path.is_file():
            raise BinacError(f"data file not found: {path}")
        return path


class _HubSource:
    """Raw records from the Hugging Face hub (`HUB_SOURCES`), in the same shape as the local files."""

    def math500(self) -> list[Record]:
        return self._load("math500", "test")

    def math(self, split: str) -> list[Record]:
        records = []
        for subject in MATH_SUBJECTS:
            for i, (where, rec) in enumerate(self._load("math", split, config=subject)):
                # The hub copy has no `unique_id`; its row numbers are not the release's file numbers.
                records.append((where, {**rec, "unique_id": f"hub/{split}/{subject}/{i}"}))
        return records

    def mbpp(self) -> list[Record]:
        return [r for s in ("train", "test", "validation", "prompt") for r in self._load("mbpp", s)]

    def gpqa_diamond(self) -> list[Record]:
        return self._load("gpqa_diamond", "train")

    def gsm8k(self, split: str) -> list[Record]:
        return self._load("gsm8k", split)

    @staticmethod
    def _load(name: str, split: str, config: str | None = None) -> list[Record]:
        import datasets

        hub_id, default_config = HUB_SOURCES[name]
        try:
            ds = datasets.load_dataset(hub_id, config or default_config, split=split)
        except Exception as exc:  # offline, gated, renamed: all end the same way for the user
            raise BinacError(
                f"cannot load {hub_id} ({split}) from the hub ({type(exc).__name__}); "
                "set BINAC_DATA_DIR to a local data folder"
            ) from None
        return [(f"{hub_id} row {i}", dict(rec)) for i, rec in enumerate(ds)]


def _read_jsonl(path: Path) -> list[Record]:
    records = []
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise BinacError(f"malformed row in {path} line {n}: invalid JSON ({exc.msg})") from None
            if not isinstance(rec, dict):
                raise BinacError(f"malformed row in {path} line {n}: expected a JSON object")
            records.append((f"{path} line {n}", rec))
    return records


def _read_csv(path: Path) -> list[Record]:
    with path.open(encoding="utf-8", newline="") as fh:
        # Header is line 1; csv fields may span lines, so "row N" counts records, not text lines.
        return [(f"{path} row {n}", rec) for n, rec in enumerate(csv.DictReader(fh), start=1)]


def _require(where: str, rec: dict, fields: Iterable[str], row_id: str | None = None) -> None:
    for field in fields:
        if rec.get(field) is None:
            label = f"{where} (id {row_id})" if row_id else where
            raise BinacError(f"malformed row in {label}: missing field {field!r}")


# --------------------------------------------------------------------------- per-benchmark rows


def _math_rows(source, split: str) -> list[dict]:
    eval_records = source.math500()
    if split == "eval":
        return [_math_row(where, rec) for where, rec in eval_records]
    for where, rec in eval_records:
        _require(where, rec, ("unique_id", "problem"))
    held_out_ids = {rec["unique_id"] for _, rec in eval_records}
    held_out_text = {rec["problem"].strip() for _, rec in eval_records}
    rows = [_math_row(where, rec) for where, rec in source.math("train")]
    for where, rec in source.math("test"):
        _require(where, rec, ("unique_id", "problem"))
        # By id for the local files; by text for the hub copy, whose ids are not the release's.
        if rec["unique_id"] not in held_out_ids and rec["problem"].strip() not in held_out_text:
            rows.append(_math_row(where, rec))
    return rows


def _math_row(where: str, rec: dict) -> dict:
    _require(where, rec, ("unique_id", "problem"))
    uid = rec["unique_id"]
    answer = rec.get("answer") or MATH_ANSWER_ERRATA.get(uid)
    if answer is None:
        _require(where, rec, ("solution",), uid)
        answer = last_boxed(rec["solution"])
    if not answer:
        raise BinacError(f"malformed row in {where} (id {uid}): no final answer (no \\boxed{{}} in the solution)")
    level = re.search(r"\d", str(rec.get("level", "")))
    return {
        "id": uid,
        "question": rec["problem"],
        "answer": answer,
        "subject": rec.get("subject") or rec.get("type") or "",
        "level": int(level.group()) if level else 0,
    }


def _mbpp_rows(source, split: str) -> list[dict]:
    wanted = MBPP_TRAIN_IDS if split == "train" else MBPP_EVAL_IDS
    rows = []
    for where, rec in source.mbpp():
        _require(where, rec, ("task_id", "text", "code", "test_list"))
        task_id = int(rec["task_id"])
        if task_id in wanted:
            rows.append(_mbpp_row(rec, task_id))
    return sorted(rows, key=lambda r: int(r["id"]))


def _mbpp_row(rec: dict, task_id: int) -> dict:
    tests = [str(t) for t in rec["test_list"]]
    # The asserts are part of the task as MBPP poses it (lm-eval's prompt shows all three).
    question = rec["text"].strip() + " Your code should pass these tests:\n\n" + "\n".join(tests)
    return {
        "id": str(task_id),
        "question": question,
        "answer": rec["code"],
        "tests": tests,
        "setup": rec.get("test_setup_code") or "",
    }


def _gpqa_rows(source, split: str) -> list[dict]:
    rows = []
    for where, rec in source.gpqa_diamond():
        fields = (
            "Record ID",
            "Question",
            "Correct Answer",
            "Incorrect Answer 1",
            "Incorrect Answer 2",
            "Incorrect Answer 3",
        )
        _require(where, rec, fields, rec.get("Record ID"))
        rows.append(_gpqa_row(rec))
    return rows


def gpqa_permutation(record_id: str) -> list[int]:
    """The fixed option order of one GPQA question: a permutation of [0..3] seeded by its record id.

    Index 0 is the correct answer. The seed comes from sha256 of the id, so the order is the same in every
    process and Python version (`hash()` of a str is salted per process)."""
    seed = int.from_bytes(hashlib.sha256(record_id.encode()).digest()[:8], "big")
    order = [0, 1, 2, 3]
    random.Random(seed).shuffle(order)
    return order


def _gpqa_row(rec: dict) -> dict:
    options = [rec["Correct Answer"], rec["Incorrect Answer 1"], rec["Incorrect Answer 2"], rec["Incorrect Answer 3"]]
    order = gpqa_permutation(rec["Record ID"])
    choices = [options[i].strip() for i in order]
    # simple-evals' layout: the question, a blank line, then "A) ..." to "D) ..." on their own lines.
    lines = "\n".join(f"{letter}) {choice}" for letter, choice in zip(LETTERS, choices, strict=True))
    return {
        "id": rec["Record ID"],
        "question": rec["Question"].strip() + "\n\n" + lines,
        "answer": LETTERS[order.index(0)],
        "choices": choices,
    }


def _gsm8k_rows(source, split: str) -> list[dict]:
    file_split = "train" if split == "train" else "test"
    return [_gsm8k_row(where, rec, f"{file_split}/{i}") for i, (where, rec) in enumerate(source.gsm8k(file_split))]


def _gsm8k_row(where: str, rec: dict, row_id: str) -> dict:
    _require(where, rec, ("question", "answer"), row_id)
    if "####" not in rec["answer"]:
        raise BinacError(f"malformed row in {where} (id {row_id}): no '####' answer line")
    # Gold numbers are written with thousands separators ("1,080"); the grader compares numbers.
    answer = rec["answer"].rsplit("####", 1)[1].strip().replace(",", "")
    return {"id": row_id, "question": rec["question"], "answer": answer}


def stored_benchmark(
    name: str, required_fields: tuple[str, ...], actor_messages, critic_messages, refine_messages, grade, **options
) -> Benchmark:
    """The `Benchmark` of the stored dataset `name`: its rows through `problem_rows`, its files checked by
    `load_benchmark`; `options` are the other `Benchmark` fields (e.g. `runs_code`)."""
    return Benchmark(
        name,
        required_fields,
        partial(problem_rows, name),
        actor_messages,
        critic_messages,
        refine_messages,
        grade,
        check_data=partial(load_benchmark, name),
        **options,
    )

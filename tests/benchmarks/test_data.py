"""Benchmark loaders: split sizes and membership, row fields, GPQA shuffling, one-line errors, presets.

GPQA rows are loaded from $BINAC_DATA_DIR at run time only; assertions compare ids, letters and digests so that
a failure never prints question text.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
from collections import Counter
from pathlib import Path

import pytest
import yaml

from binac_core.benchmarks import data
from binac_core.benchmarks.data import MATH_ANSWER_ERRATA, benchmark_names, gpqa_permutation, load_benchmark
from binac_core.errors import BinacError
from binac_core.foundation.config import PRESET_DIR, load_config

DATA = Path(os.environ["BINAC_DATA_DIR"])
SIZES = {
    ("math", "train"): 12_000,
    ("math", "eval"): 500,
    ("math500", "train"): 12_000,
    ("math500", "eval"): 500,
    ("mbpp", "train"): 374,
    ("mbpp", "eval"): 500,
    ("gpqa_diamond", "eval"): 198,
    ("gsm8k", "train"): 7_473,
    ("gsm8k", "eval"): 1_319,
}
LAPTOP_PRESETS = (
    "micro",
    "demo",
    "smoke",
    "tiny",
    "study",
    "study2",
    "testbed",
    "smol-synthetic",
    "smol-gsm8k",
)  # run on a CPU (smol: tests/model/test_smol.py)
REAL_PRESETS = sorted(p.stem for p in PRESET_DIR.glob("*.yaml") if p.stem not in LAPTOP_PRESETS)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_benchmark_names_are_the_four_benchmarks_and_the_math500_alias():
    assert benchmark_names() == ["gpqa_diamond", "gsm8k", "math", "math500", "mbpp"]


@pytest.mark.parametrize(("name", "split"), sorted(SIZES))
def test_split_has_the_documented_size_and_complete_rows(name, split):
    ds = load_benchmark(name, split)
    assert len(ds) == SIZES[name, split]
    ids = ds["id"]
    assert len(set(ids)) == len(ids)
    # Collect ids, never values: a failing assert must not print a GPQA question.
    incomplete = [
        row["id"]
        for row in ds.to_list()
        if not all(isinstance(row[key], str) and row[key].strip() for key in ("id", "question", "answer"))
    ]
    assert incomplete == []


def test_test_is_an_alias_of_eval():
    assert load_benchmark("gsm8k", "test")["id"] == load_benchmark("gsm8k", "eval")["id"]


def test_math_train_excludes_every_math500_problem():
    held_out = load_benchmark("math500", "eval")
    train = load_benchmark("math", "train")
    assert not set(held_out["id"]) & set(train["id"])
    assert not {digest(q.strip()) for q in held_out["question"]} & {digest(q.strip()) for q in train["question"]}
    assert Counter(i.split("/")[0] for i in train["id"]) == {"train": 7_500, "test": 4_500}


def test_math500_answers_are_the_files_answer_field():
    gold = {}
    with (DATA / "math500" / "test.jsonl").open() as fh:
        for line in fh:
            rec = json.loads(line)
            gold[rec["unique_id"]] = rec["answer"]
    ds = load_benchmark("math500", "eval")
    assert dict(zip(ds["id"], ds["answer"], strict=True)) == gold


def test_math_train_answers_come_from_the_last_box_and_the_errata():
    rows = {r["id"]: r for r in load_benchmark("math", "train").to_list()}
    for uid, answer in MATH_ANSWER_ERRATA.items():
        assert rows[uid]["answer"] == answer
    # `\boxed 2` (no braces) in the upstream solution reads as 2.
    assert rows["train/algebra/24014.json"]["answer"] == "2"


def test_mbpp_splits_follow_the_task_id_ranges():
    train = [int(i) for i in load_benchmark("mbpp", "train")["id"]]
    evals = [int(i) for i in load_benchmark("mbpp", "eval")["id"]]
    assert train == list(range(601, 975))
    assert evals == list(range(11, 511))


def test_mbpp_rows_carry_three_asserts_shown_in_the_question_and_the_setup():
    rows = {r["id"]: r for split in ("train", "eval") for r in load_benchmark("mbpp", split)}
    for row in rows.values():
        assert len(row["tests"]) == 3 and all(t.startswith("assert") for t in row["tests"])
        assert all(t in row["question"] for t in row["tests"])
        assert row["answer"] not in row["question"]
    # The only two tasks with test_setup_code (stack notes): one in each split.
    assert {i for i, r in rows.items() if r["setup"].strip()} == {"367", "927"}


def _gpqa_csv() -> dict[str, dict]:
    with (DATA / "gpqa" / "gpqa_diamond.csv").open(newline="", encoding="utf-8") as fh:
        return {rec["Record ID"]: rec for rec in csv.DictReader(fh)}


def test_gpqa_letter_points_at_the_correct_option_and_options_are_listed():
    source = _gpqa_csv()
    wrong = []
    for row in load_benchmark("gpqa_diamond", "eval"):
        rec = source[row["id"]]
        correct = row["choices"]["ABCD".index(row["answer"])]
        others = {rec[f"Incorrect Answer {k}"].strip() for k in (1, 2, 3)}
        listed = all(
            f"{letter}) {choice}" in row["question"] for letter, choice in zip("ABCD", row["choices"], strict=True)
        )
        if correct != rec["Correct Answer"].strip() or set(row["choices"]) - {correct} != others or not listed:
            wrong.append(row["id"])
    assert wrong == []


def test_gpqa_shuffle_is_fixed_per_question_and_not_constant():
    first = load_benchmark("gpqa_diamond", "eval")
    data._local_rows.cache_clear()
    second = load_benchmark("gpqa_diamond", "eval")
    assert first["answer"] == second["answer"]
    assert [digest("".join(c)) for c in first["choices"]] == [digest("".join(c)) for c in second["choices"]]
    letters = Counter(first["answer"])
    assert set(letters) == set("ABCD") and min(letters.values()) >= 30
    assert gpqa_permutation("recABC") == gpqa_permutation("recABC")
    assert sorted(gpqa_permutation("recABC")) == [0, 1, 2, 3]


def test_gsm8k_answer_is_the_number_after_the_hashes_without_commas():
    with (DATA / "gsm8k" / "test.jsonl").open() as fh:
        raw = [json.loads(line) for line in fh]
    ds = load_benchmark("gsm8k", "eval")
    assert ds["answer"] == [r["answer"].split("####")[-1].strip().replace(",", "") for r in raw]
    assert "1080" in load_benchmark("gsm8k", "train")["answer"]  # written "1,080" in the file


# --------------------------------------------------------------------------- one-line errors


def _one_line_error(excinfo) -> str:
    message = str(excinfo.value)
    assert "\n" not in message
    return message


def test_unknown_benchmark_lists_the_known_ones():
    with pytest.raises(BinacError) as excinfo:
        load_benchmark("mathh", "eval")
    message = _one_line_error(excinfo)
    assert "'mathh'" in message and all(name in message for name in benchmark_names())


def test_unknown_split_is_named():
    with pytest.raises(BinacError, match="'validation'"):
        load_benchmark("gsm8k", "validation")


def test_gpqa_has_no_train_split():
    with pytest.raises(BinacError, match="'train' is not available for gpqa_diamond"):
        load_benchmark("gpqa_diamond", "train")


def test_missing_data_folder_is_named(tmp_path, monkeypatch):
    missing = tmp_path / "nowhere"
    monkeypatch.setenv("BINAC_DATA_DIR", str(missing))
    with pytest.raises(BinacError) as excinfo:
        load_benchmark("gsm8k", "eval")
    assert str(missing) in _one_line_error(excinfo)


def test_missing_data_file_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("BINAC_DATA_DIR", str(tmp_path))
    with pytest.raises(BinacError) as excinfo:
        load_benchmark("mbpp", "eval")
    assert str(tmp_path / "mbpp" / "mbpp.jsonl") in _one_line_error(excinfo)


def _write_gsm8k(folder: Path, lines: list[str]) -> Path:
    (folder / "gsm8k").mkdir()
    path = folder / "gsm8k" / "test.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_row_missing_a_field_names_file_line_and_field(tmp_path, monkeypatch):
    path = _write_gsm8k(tmp_path, [json.dumps({"question": "q", "answer": "x #### 3"}), json.dumps({"question": "q"})])
    monkeypatch.setenv("BINAC_DATA_DIR", str(tmp_path))
    with pytest.raises(BinacError) as excinfo:
        load_benchmark("gsm8k", "eval")
    message = _one_line_error(excinfo)
    assert f"{path} line 2" in message and "'answer'" in message


def test_row_that_is_not_json_names_file_and_line(tmp_path, monkeypatch):
    path = _write_gsm8k(tmp_path, [json.dumps({"question": "q", "answer": "#### 3"}), "{not json"])
    monkeypatch.setenv("BINAC_DATA_DIR", str(tmp_path))
    with pytest.raises(BinacError, match=f"{path} line 2: invalid JSON"):
        load_benchmark("gsm8k", "eval")


def test_gsm8k_row_without_hashes_is_malformed(tmp_path, monkeypatch):
    _write_gsm8k(tmp_path, [json.dumps({"question": "q", "answer": "no final line"})])
    monkeypatch.setenv("BINAC_DATA_DIR", str(tmp_path))
    with pytest.raises(BinacError, match=r"id test/0\): no '####' answer line"):
        load_benchmark("gsm8k", "eval")


def test_math_row_without_any_box_is_malformed(tmp_path, monkeypatch):
    (tmp_path / "math500").mkdir()
    rec = {"problem": "p", "solution": "no box here", "unique_id": "test/x/1.json"}
    (tmp_path / "math500" / "test.jsonl").write_text(json.dumps(rec) + "\n")
    monkeypatch.setenv("BINAC_DATA_DIR", str(tmp_path))
    with pytest.raises(BinacError, match=r"id test/x/1.json\): no final answer"):
        load_benchmark("math500", "eval")


# --------------------------------------------------------------------------- hub source (stubbed: no network here)


def test_hub_failure_is_one_line_naming_the_hub_id_and_the_fix(monkeypatch):
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("offline mode is enabled")

    monkeypatch.delenv("BINAC_DATA_DIR")
    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(BinacError) as excinfo:
        load_benchmark("gsm8k", "train")
    message = _one_line_error(excinfo)
    assert "openai/gsm8k" in message and "BINAC_DATA_DIR" in message


def test_hub_records_become_the_same_rows(monkeypatch):
    import datasets

    calls = []

    def fake(hub_id, config, split):
        calls.append((hub_id, config, split))
        return [{"question": "How many?", "answer": "2 + 2 = 4\n#### 4"}]

    monkeypatch.delenv("BINAC_DATA_DIR")
    monkeypatch.setattr(datasets, "load_dataset", fake)
    ds = load_benchmark("gsm8k", "eval")
    assert calls == [("openai/gsm8k", "main", "test")]
    assert ds[0] == {"id": "test/0", "question": "How many?", "answer": "4"}


def test_hub_math_train_drops_math500_problems_by_text(monkeypatch):
    import datasets

    def fake(hub_id, config, split):
        if hub_id == "HuggingFaceH4/MATH-500":
            return [{"problem": "Held out.", "answer": "1", "unique_id": "test/algebra/1.json", "level": 1}]
        if config != "algebra":
            return []
        problem = "Held out." if split == "test" else "Train me."
        return [
            {"problem": problem, "solution": "So $\\boxed{2}$.", "type": "Algebra", "level": "Level 2"},
            {"problem": f"Kept {split}.", "solution": "$\\boxed{3}$", "type": "Algebra", "level": "Level 1"},
        ]

    monkeypatch.delenv("BINAC_DATA_DIR")
    monkeypatch.setattr(datasets, "load_dataset", fake)
    train = load_benchmark("math", "train").to_list()
    assert [r["question"] for r in train] == ["Train me.", "Kept train.", "Kept test."]
    assert [r["answer"] for r in train] == ["2", "3", "3"] and train[0]["level"] == 2


# --------------------------------------------------------------------------- real-model presets


def test_real_model_presets_exist():
    assert {"llama1b-math", "llama3b-math", "qwen1_5b-math", "llama1b-mbpp", "qwen7b-gpqa"} <= set(REAL_PRESETS)


@pytest.mark.parametrize("preset", REAL_PRESETS)
def test_real_model_preset_validates_and_names_a_hub_model_and_benchmark(preset):
    cfg = load_config(preset)
    assert cfg.name == preset
    assert cfg.model.source == "hub" and cfg.model.hub_id and "/" in cfg.model.hub_id
    assert cfg.generation.backend == "vllm"
    assert (cfg.lora.rank, cfg.lora.alpha, cfg.lora.dropout) == (16, 32, 0.05)
    assert cfg.task.benchmark in benchmark_names()
    assert cfg.task.n_test <= SIZES[cfg.task.benchmark, "eval"]
    text = (PRESET_DIR / f"{preset}.yaml").read_text()
    assert text.startswith("# ") and "GPU" in text.split("\nname:")[0]
    assert yaml.safe_load(text)["name"] == preset

"""The trajectory store: shard ingest (rows/s) and BM25 feedback search at a million rows, old way vs new.

    python -m bench.store [--rows 1000000] [--shard-rows 1024] [--repeats 3] [--out bench/results.md]

- ingest: `storage.write_shard`'s Parquet write of one shard of 1,024 rows (one tiny-preset step) and of 10,000
  rows, the old row-by-row `executemany` into DuckDB (kept here, `old_write_rows`) vs the columnar write
  (`storage._write_rows`); same rows, median of `--repeats`.
- search: `sql/feedback_search.sql` over a generated store of `--rows` rows in shards of `--shard-rows` (1,024:
  a tiny-preset step each; 100,000: the few large shards of a long study; rows shaped like real ones: short critic
  feedback such as "Step 3 is wrong." or "Looks correct.", and natural-language feedback of 10-40 words; 10 %
  without feedback), through `sqlrun.run` as `binac sql` runs it. Old: the query as it was (an FTS index rebuilt
  over the selected rows at each query); new: the feedback index beside the shards. The new index is built once
  by the first query (every shard new to it: reported apart) and then only for shards that land; the timed
  queries find it current.

The results are a section of the results file between markers (`bench.common.write_section`): `store` for shards
of 1,024 rows (the ingest rows too), `store-<n>-row-shards` for shards of n rows (search only), each replaced by the
next run of its layout; the rest of the file is left as it is. The load average is recorded at the start and the
end: on a shared machine the seconds move with it, the old / new ratios much less.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import statistics
import tempfile
import time
from datetime import datetime
from pathlib import Path

import duckdb

from bench.common import write_section
from binac_core.foundation.files import atomic_path
from binac_core.foundation.workspace import Workspace
from binac_core.store import sqlrun, storage

REPO = Path(__file__).resolve().parent.parent
SEARCH = (REPO / "sql" / "feedback_search.sql").read_text()
OLD_SEARCH_BODY = """CREATE OR REPLACE TEMP TABLE feedback_docs_old AS
SELECT row_number() OVER () AS doc_id, run_id, method, seed, step, split, protocol, problem_id, sample_idx,
       feedback_idx, round, feedback, attempt_reward, refined_reward, parent_run_id
FROM trajectories
WHERE feedback IS NOT NULL AND method LIKE $method AND split LIKE $split
  AND ($comparison = 'all' OR parent_run_id = $comparison);

PRAGMA create_fts_index('feedback_docs_old', 'doc_id', 'feedback', overwrite = 1);

SELECT round(score, 4) AS bm25, method, seed, split, protocol, step, problem_id, sample_idx, feedback_idx,
       feedback, attempt_reward, refined_reward, run_id, parent_run_id AS comparison
FROM (SELECT *, fts_main_feedback_docs_old.match_bm25(doc_id, $query, conjunctive := $all_words) AS score
      FROM feedback_docs_old)
WHERE score IS NOT NULL
ORDER BY score DESC, run_id, step, problem_id, sample_idx, feedback_idx
LIMIT $k;
"""
OLD_SEARCH = "\n".join(line for line in SEARCH.splitlines() if line.startswith("-- @param")) + "\n" + OLD_SEARCH_BODY
QUERIES = [
    {"query": "step wrong"},
    {"query": "check the sign of the carry"},
    {"query": "remainder final answer", "all_words": "1"},
    {"query": "step wrong", "method": "binac", "split": "eval"},
]
SHARD = 1024

WORDS = (
    "the a step answer sign carry wrong correct check product sum digit remainder multiply add subtract divide "
    "final result error mistake missing term value should be is was not but then first second third last "
    "again recompute verify calculation partial row column borrow forgot dropped swapped reversed order "
    "fraction decimal rounding unit equation variable both sides simplify expand factor constant coefficient "
    "negative positive zero one two three because since so therefore however also instead try look "
    "closely here there line reasoning argument claim follows assumption case cases all every some none "
    "table count total average probability independent event"
).split()


def old_write_rows(path: Path, rows: list[dict]) -> None:
    """`storage._write_rows` as it was: row by row with `executemany`, then COPY to Parquet."""
    con = duckdb.connect()
    try:
        con.execute(storage.schema_sql())
        if rows:
            cols = storage.columns()
            con.executemany(
                f"INSERT INTO trajectory_rows VALUES ({', '.join('?' for _ in cols)})",
                [[r[c] for c in cols] for r in rows],
            )
        with atomic_path(path) as tmp:
            con.execute(f"COPY trajectory_rows TO {storage.sql_string(tmp)} (FORMAT parquet)")
    finally:
        con.close()


def feedback_text(rnd: random.Random) -> str | None:
    u = rnd.random()
    if u < 0.10:
        return None
    if u < 0.30:
        return f"Step {rnd.randint(1, 8)} is wrong."
    if u < 0.45:
        return rnd.choice(["Looks correct.", "The answer is correct.", "Correct.", "No mistake found."])
    n = rnd.randint(10, 40)
    words = [
        WORDS[min(int(rnd.paretovariate(0.8)) - 1, len(WORDS) - 1)] if rnd.random() < 0.5 else rnd.choice(WORDS)
        for _ in range(n)
    ]
    if rnd.random() < 0.5:
        words[:3] = ["In", "step", str(rnd.randint(1, 8))]
    return " ".join(words).capitalize() + "."


def rows_of(run: int, step: int, n: int, rnd: random.Random) -> list[dict]:
    """`n` rows shaped like a tiny-preset step's, every schema column present (`storage.columns()`; None where
    not set here)."""
    empty = dict.fromkeys(storage.columns())
    method = ("binac", "fixed_critic", "critic_only", "self_correct")[run % 4]
    when = datetime(2026, 1, 1, run % 24, step % 60)
    out = []
    for i in range(n):
        fb = feedback_text(rnd)
        out.append(
            empty
            | {
                "run_id": f"run{run:04d}",
                "method": method,
                "preset": "tiny",
                "seed": run % 5,
                "step": step,
                "split": "train" if i % 8 else "eval",
                "protocol": "train",
                "benchmark": "synthetic",
                "problem_id": f"p{i // 8:05d}",
                "sample_idx": i % 8,
                "feedback_idx": 0,
                "round": 1 if fb else 0,
                "prompt": f"Compute {rnd.randint(10, 999)} * {rnd.randint(10, 999)} step by step.",
                "attempt": "Step 1: ... Step 2: ... Answer: 1234",
                "attempt_reward": float(rnd.random() < 0.5),
                "feedback": fb,
                "refined": "Answer: 1234" if fb else None,
                "refined_reward": float(rnd.random() < 0.6) if fb else None,
                "attempt_tokens": 40,
                "feedback_tokens": 12 if fb else None,
                "refined_tokens": 20 if fb else None,
                "created_at": when,
                "first_wrong_step": rnd.choice([None, 1, 2, 3]),
                "actor_samples": step * 16,
                "generated_samples": step * 48,
                "parent_run_id": f"parent{run % 3}",
                "feedback_verdict": rnd.choice(["correct", "incorrect", "none"]) if fb else None,
            }
        )
    return out


def _time(fn, repeats: int, cpu: list[float] | None = None) -> list[float]:
    """The wall seconds of `repeats` calls of `fn`; the process's CPU seconds (user + system) of each appended to
    `cpu` when given (steadier than wall time on a shared machine)."""
    out = []
    for _ in range(repeats):
        c0, t0 = _cpu(), time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
        if cpu is not None:
            cpu.append(_cpu() - c0)
    return out


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def ingest(repeats: int, tmp: Path, log) -> list[tuple]:
    rows_out = []
    for n in (SHARD, 10_000):
        rows = rows_of(0, 1, n, random.Random(n))
        old = _time(lambda rows=rows: old_write_rows(tmp / "old.parquet", rows), repeats)
        new = _time(lambda rows=rows: storage._write_rows(tmp / "new.parquet", rows), repeats)
        o, w = n / statistics.median(old), n / statistics.median(new)
        log(f"ingest {n} rows: old {o:,.0f} rows/s, new {w:,.0f} rows/s")
        rows_out.append(
            (
                f"trajectory shard write, {n:,} rows (`storage.write_shard`'s Parquet write)",
                f"row by row: {o:,.0f} rows/s",
                f"columnar: {w:,.0f} rows/s",
                f"**{w / o:.3g}** [{n / max(new) / (n / min(old)):.3g}–{n / min(new) / (n / max(old)):.3g}] "
                "(new / old rows/s)",
                f"median of {repeats}; per shard: old {statistics.median(old) * 1e3:.0f} ms, "
                f"new {statistics.median(new) * 1e3:.1f} ms",
            )
        )
    return rows_out


def write_store(ws: Workspace, total: int, shard_rows: int, rnd: random.Random) -> float:
    """`total` rows in shards of `shard_rows`, 100 steps of 1,024 rows a run (one step a run for larger shards);
    the seconds `write_shard` took (generating the rows excluded)."""
    steps_per_run = max(1, 100 * SHARD // shard_rows)
    written, run, step, write_s = 0, 0, 0, 0.0
    while written < total:
        n = min(shard_rows, total - written)
        rows = rows_of(run, step, n, rnd)
        t0 = time.perf_counter()
        storage.write_shard(ws, f"run{run:04d}", "train", step, rows)
        write_s += time.perf_counter() - t0
        written += n
        step += 1
        if step == steps_per_run:
            run, step = run + 1, 0
    return write_s


def search(total: int, shard_rows: int, repeats: int, old_repeats: int, tmp: Path, log) -> list[tuple]:
    ws = Workspace(tmp / "home")
    rnd = random.Random(0)
    write_s = write_store(ws, total, shard_rows, rnd)
    shards = sum(1 for p in ws.shards.glob("*/*.parquet") if p.parent.name != "_schema")
    log(f"store: {total:,} rows, {shards} shards written in {write_s:.1f} s")
    first_cpu: list[float] = []
    first_s = _time(lambda: sqlrun.run(ws, SEARCH, QUERIES[0]), 1, first_cpu)[0]
    log(f"first query (indexes every shard): {first_s:.1f} s")
    cpu = {i: [] for i in range(len(QUERIES))}
    new = {i: _time(lambda q=q: sqlrun.run(ws, SEARCH, q), repeats, cpu[i]) for i, q in enumerate(QUERIES)}
    storage.write_shard(ws, "late", "train", 0, rows_of(999, 0, SHARD, rnd))
    landed = _time(lambda: sqlrun.run(ws, SEARCH, QUERIES[0]), 1)[0]
    log(
        "new: "
        + ", ".join(f"{statistics.median(v):.3f} s" for v in new.values())
        + f"; after a shard lands {landed:.3f} s"
    )
    old_cpu = {i: [] for i in range(len(QUERIES))}
    old = {i: _time(lambda q=q: sqlrun.run(ws, OLD_SEARCH, q), old_repeats, old_cpu[i]) for i, q in enumerate(QUERIES)}
    log("old: " + ", ".join(f"{statistics.median(v):.3f} s" for v in old.values()))
    out = []
    layout = f"{total:,} rows in {shards} shards of {shard_rows:,}"
    for i, q in enumerate(QUERIES):
        o, w = statistics.median(old[i]), statistics.median(new[i])
        words = f'"{q["query"]}"' + (" (all words)" if q.get("all_words") == "1" else "")
        words += "".join(f", {k} = {q[k]}" for k in ("method", "split") if k in q)
        out.append(
            (
                f"BM25 feedback search over {layout} (`sql/feedback_search.sql`, query {words})",
                f"FTS index rebuilt per query: {o:.3g} s",
                f"feedback index: {w:.3g} s",
                f"**{o / w:.3g}** [{min(old[i]) / max(new[i]):.3g}–{max(old[i]) / min(new[i]):.3g}] (old / new time)",
                f"median of {repeats} new, {old_repeats} old; through `sqlrun.run` like `binac sql`; "
                f"CPU s (user + system): old {statistics.median(old_cpu[i]):.3g}, new {statistics.median(cpu[i]):.3g}",
            )
        )
    out.append(
        (
            f"feedback index upkeep, {layout}",
            f"first query, every shard new: {first_s:.3g} s",
            f"query after one {SHARD}-row shard landed: {landed:.3g} s",
            f"**{landed / statistics.median(new[0]):.3g}** (after a shard / current index)",
            f"first query {first_cpu[0]:.3g} CPU s; {shards} shards written in {write_s:.1f} s "
            f"({total / write_s:,.0f} rows/s through `write_shard`); a store from before the index pays the "
            "first-query cost once",
        )
    )
    return out


def load() -> str:
    """The load average (1 / 5 / 15 min), e.g. `1.06 / 1.63 / 1.48`."""
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def section(shard_rows: int) -> str:
    """The results file's section of a layout: `store` for shards of `SHARD` rows, else one per shard size."""
    return "store" if shard_rows == SHARD else f"store-{shard_rows}-row-shards"


def markdown(rows: list[tuple], args, loads: tuple[str, str]) -> str:
    what = (
        "Shard writes: the old row-by-row `executemany` vs the columnar write (one Arrow table, one INSERT). "
        if args.shard_rows == SHARD
        else ""
    )
    lines = [
        f"## `{section(args.shard_rows)}`: the trajectory store (`python -m bench.store"
        + (f" --shard-rows {args.shard_rows}`)" if args.shard_rows != SHARD else "`)"),
        "",
        f"Measured {datetime.now():%Y-%m-%d} on this machine ({os.cpu_count()} CPUs); {args.rows:,}-row store, shards "
        f"of {args.shard_rows:,} rows; load average (1 / 5 / 15 min) {loads[0]} at the start, {loads[1]} at the end. "
        + what
        + "Search: the old `sql/feedback_search.sql` (FTS index rebuilt over every selected row at each query) "
        "vs the per-shard feedback index merged at query time (same scores: tests/store/test_feedback_index.py).",
        "",
        "| measurement | A | B | ratio: median [min–max] | notes |",
        "| --- | --- | --- | --- | --- |",
    ]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--shard-rows", type=int, default=SHARD, help="rows per shard of the searched store")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--old-repeats", type=int, default=1, help="repeats of the old search (seconds each)")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results.md")
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="binac-bench-store-"))
    start = load()
    try:
        rows = ingest(args.repeats, tmp, print) if args.shard_rows == SHARD else []
        rows += search(args.rows, args.shard_rows, args.repeats, args.old_repeats, tmp, print)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    key = section(args.shard_rows)
    write_section(args.out, key, markdown(rows, args, (start, load())))
    print(f"wrote the {key} section of {args.out}")


if __name__ == "__main__":
    main()

"""bench/store.py's store layouts and its results section, on a few thousand rows (the search itself is timed only
when the benchmark is run: `python -m bench.store`; this is no timed test)."""

import random
from argparse import Namespace

from bench.store import SHARD, markdown, section, write_store
from binac_core.foundation.workspace import Workspace


def _shards(ws: Workspace) -> dict[str, int]:
    """Each shard's path under the store and its number of rows."""
    import pyarrow.parquet as pq

    return {p.relative_to(ws.shards).as_posix(): pq.read_metadata(p).num_rows for p in ws.shards.glob("*/*.parquet")}


def test_a_store_is_written_in_shards_of_the_given_size(tmp_path):
    small, large = Workspace(tmp_path / "small"), Workspace(tmp_path / "large")
    write_store(small, 2 * SHARD + 10, SHARD, random.Random(0))
    write_store(large, 7000, 3000, random.Random(0))
    assert _shards(small) == {
        "run0000/train-step00000.parquet": SHARD,
        "run0000/train-step00001.parquet": SHARD,
        "run0000/train-step00002.parquet": 10,
    }
    assert _shards(large) == {
        "run0000/train-step00000.parquet": 3000,
        "run0000/train-step00001.parquet": 3000,
        "run0000/train-step00002.parquet": 1000,
    }


def test_each_layout_has_its_own_section_saying_the_load():
    assert section(SHARD) == "store" and section(100_000) == "store-100000-row-shards"
    args = Namespace(rows=1_000_000, shard_rows=100_000)
    text = markdown([("a", "b", "c", "d", "e")], args, ("1.00 / 2.00 / 3.00", "4.00 / 5.00 / 6.00"))
    assert text.startswith("## `store-100000-row-shards`") and "--shard-rows 100000" in text
    assert "1.00 / 2.00 / 3.00 at the start, 4.00 / 5.00 / 6.00 at the end" in text
    assert "| a | b | c | d | e |" in text and "row-by-row" not in text

"""The one way each small file operation is done (`binac_core.foundation.files`): atomic writes leave either the old file or
the new one, never a partial file or a temporary one; stage references check their content; YAML mappings fail in
one line naming the file."""

import json
import threading

import pytest

from binac_core.errors import BinacError
from binac_core.foundation.files import (
    atomic_path,
    read_json,
    read_optional,
    read_yaml_mapping,
    write_atomic,
    write_json,
)


def test_an_atomic_write_replaces_the_file_and_leaves_no_temporary_one(tmp_path):
    path = tmp_path / "sub" / "out.txt"
    write_atomic(path, "old")
    write_atomic(path, b"new")
    assert path.read_text() == "new" and sorted(p.name for p in path.parent.iterdir()) == ["out.txt"]


def test_a_failed_write_keeps_the_old_file_and_removes_its_temporary_one(tmp_path):
    path = tmp_path / "out.txt"
    write_atomic(path, "old")
    with pytest.raises(RuntimeError), atomic_path(path) as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed mid-write")
    assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_concurrent_writers_of_one_path_never_share_a_temporary_file(tmp_path):
    path, seen, barrier = tmp_path / "out.json", [], threading.Barrier(4)

    def writer(i):
        with atomic_path(path) as tmp:
            seen.append(tmp)
            barrier.wait()  # every writer holds its temporary file at once
            tmp.write_text(json.dumps(i))

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(seen)) == 4 and json.loads(path.read_text()) in range(4)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_a_reference_names_its_content(tmp_path):
    ref = write_json(tmp_path / "a.json", {"b": 1, "a": [2]})
    assert read_json(ref) == {"a": [2], "b": 1} and read_optional(ref) == read_json(ref)
    assert read_optional(None) is None
    (tmp_path / "a.json").write_text("{}")
    with pytest.raises(BinacError, match="changed on disk"):
        read_json(ref)


def test_a_deleted_stage_output_fails_in_one_line_naming_it_and_fresh(tmp_path):
    ref = write_json(tmp_path / "a.json", {"a": 1})
    (tmp_path / "a.json").unlink()
    with pytest.raises(BinacError, match=r"stage output missing: .*a\.json \(.*--fresh") as err:
        read_json(ref)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "text, needle", [("a: [", "malformed study file s.yaml: "), ("- 1\n- 2\n", "expected a mapping at top level")]
)
def test_a_yaml_file_without_a_mapping_fails_in_one_line_naming_it(tmp_path, text, needle):
    path = tmp_path / "s.yaml"
    path.write_text(text)
    with pytest.raises(BinacError, match=needle):
        read_yaml_mapping(path, "study file s.yaml")
    path.write_text("a: 1\n")
    assert read_yaml_mapping(path, "study file s.yaml") == {"a": 1}

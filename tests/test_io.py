"""Atomic outputs (infocse/io.py): a block that dies leaves nothing, a folder is replaced whole,
JSON is canonical, and a skipped step's placeholder says why."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from infocse.io import atomic_output, read_json, save_numpy, write_json, write_parquet, write_placeholder


def test_atomic_output_leaves_nothing_when_the_block_dies(tmp_path):
    dest = tmp_path / "out" / "table.parquet"
    with pytest.raises(RuntimeError):
        with atomic_output(dest) as tmp:
            tmp.write_bytes(b"half a table")
            raise RuntimeError("killed mid-write")
    assert not dest.exists()
    assert list(dest.parent.iterdir()) == []


def test_a_failed_rewrite_keeps_the_old_output(tmp_path):
    dest = tmp_path / "metrics.json"
    write_json(dest, {"score": 1})
    with pytest.raises(RuntimeError):
        with atomic_output(dest) as tmp:
            tmp.write_text("{")
            raise RuntimeError("killed mid-write")
    assert read_json(dest) == {"score": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.json"]


def test_atomic_output_replaces_a_directory_whole(tmp_path):
    dest = tmp_path / "model"
    dest.mkdir()
    (dest / "old.bin").write_text("old")
    with atomic_output(dest) as tmp:
        tmp.mkdir()
        (tmp / "new.bin").write_text("new")
    assert sorted(p.name for p in dest.iterdir()) == ["new.bin"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_write_json_is_canonical(tmp_path):
    write_json(tmp_path / "a.json", {"b": 1, "a": [1, 2]})
    write_json(tmp_path / "b.json", {"a": [1, 2], "b": 1})
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    assert json.loads((tmp_path / "a.json").read_text()) == {"a": [1, 2], "b": 1}
    assert read_json(tmp_path / "a.json") == {"a": [1, 2], "b": 1}


def test_parquet_and_numpy_round_trip_and_repeat_byte_for_byte(tmp_path):
    frame = pd.DataFrame({"doc_id": ["a", "b"], "rank": np.array([3, 0], np.int64)})
    write_parquet(frame, tmp_path / "one.parquet")
    write_parquet(frame, tmp_path / "two.parquet")
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "one.parquet"), frame)
    assert (tmp_path / "one.parquet").read_bytes() == (tmp_path / "two.parquet").read_bytes()
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    save_numpy(array, tmp_path / "x.npy")
    np.testing.assert_array_equal(np.load(tmp_path / "x.npy"), array)


def test_placeholder_is_one_skipped_file_saying_why(tmp_path):
    dest = tmp_path / "models" / "iter-2"
    write_placeholder(dest, "the loop stopped")
    assert [p.name for p in dest.iterdir()] == ["SKIPPED"]
    assert (dest / "SKIPPED").read_text() == "the loop stopped\n"

"""Atomic outputs, model resolution and param checks shared by every stage."""

from __future__ import annotations

import json

import pytest

from stages.common import (
    StageError,
    atomic_output,
    iteration_numbers,
    load_model,
    positive_int,
    resolve_model_source,
    write_json,
)


def test_atomic_output_leaves_nothing_when_the_block_dies(tmp_path):
    dest = tmp_path / "out" / "table.parquet"
    with pytest.raises(RuntimeError):
        with atomic_output(dest) as tmp:
            tmp.write_bytes(b"half a table")
            raise RuntimeError("killed mid-write")
    assert not dest.exists()
    assert list(dest.parent.iterdir()) == []


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


def test_packaged_seed_model_resolves_to_a_local_folder():
    path = resolve_model_source("all-MiniLM-L6-v2")
    assert path.endswith("model")


@pytest.mark.parametrize("name, message", [
    ("", "is empty"),
    ("./missing/model", "no such folder"),
    ("/definitely/not/here", "no such folder"),
])
def test_unknown_seed_model_is_a_clear_error(name, message):
    with pytest.raises(StageError, match=message):
        resolve_model_source(name)


def test_folder_that_is_not_a_model_is_refused(tmp_path):
    with pytest.raises(StageError, match="not a sentence-transformers"):
        resolve_model_source(str(tmp_path))


def test_unreachable_hub_id_is_one_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(StageError, match="cannot load model"):
        load_model("nobody-here/no-such-model-xyz", device="cpu")


def test_tiny_model_folder_resolves_and_loads(tiny_model_dir):
    model = load_model(resolve_model_source(str(tiny_model_dir)), device="cpu", max_seq_length=16)
    assert model.max_seq_length == 16
    assert model.encode(["a goal"]).shape == (1, 32)


@pytest.mark.parametrize("value, allow_all, expected", [(3, False, 3), ("all", True, None), (1, True, 1)])
def test_positive_int_accepts(value, allow_all, expected):
    assert positive_int({"a": {"b": value}}, "a.b", allow_all=allow_all) == expected


@pytest.mark.parametrize("value, allow_all", [(0, False), (-2, True), ("all", False), (True, False), (1.5, False)])
def test_positive_int_refuses(value, allow_all):
    with pytest.raises(StageError, match="a.b"):
        positive_int({"a": {"b": value}}, "a.b", allow_all=allow_all)


@pytest.mark.parametrize("iterations, message", [
    ({}, "is empty"),
    ({"1": {"prev": 0}, "3": {"prev": 2}}, "numbered 1..T"),
    ({"1": {"prev": 0}, "2": {"prev": 0}}, "iterations.2.prev"),
])
def test_iteration_chain_is_checked(iterations, message):
    with pytest.raises(StageError, match=message):
        iteration_numbers({"iterations": iterations})


def test_iteration_chain_in_order():
    assert iteration_numbers({"iterations": {"2": {"prev": 1}, "1": {"prev": 0}}}) == [1, 2]

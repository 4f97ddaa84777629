"""Model resolution and loading (infocse/models.py): packaged names, local folders and hub ids
resolve offline or fail with one clear line; a tiny folder loads at the asked length."""

from __future__ import annotations

import pytest

from infocse.errors import StageError
from infocse.models import load_model, resolve_device, resolve_model_source, save_model, sequence_length


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


def test_a_hub_id_passes_through_unchanged():
    assert resolve_model_source("nobody-here/no-such-model-xyz") == "nobody-here/no-such-model-xyz"


def test_unreachable_hub_id_is_one_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(StageError, match="cannot load model") as error:
        load_model("nobody-here/no-such-model-xyz", device="cpu")
    assert "\n" not in str(error.value)


def test_cuda_without_cuda_blames_the_device_not_the_model():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(StageError, match="params `device` is 'cuda'"):
        resolve_device("cuda")
    assert resolve_device("auto") == "cpu"


def test_tiny_model_folder_resolves_and_loads(tiny_model_dir):
    model = load_model(resolve_model_source(str(tiny_model_dir)), device="cpu", max_seq_length=16)
    assert model.max_seq_length == 16
    assert model.encode(["a goal"]).shape == (1, 32)


def test_sequence_length_is_restored_after_the_block(tiny_model_dir):
    model = load_model(tiny_model_dir, device="cpu", max_seq_length=16)
    with sequence_length(model, 48):
        assert model.max_seq_length == 48
    assert model.max_seq_length == 16


def test_saved_model_has_no_card_and_saves_byte_identically(tiny_model_dir, tmp_path):
    """A model card carries a timestamp: it would change every output hash DVC keeps."""
    model = load_model(tiny_model_dir, device="cpu")
    save_model(model, tmp_path / "one")
    save_model(model, tmp_path / "two")
    assert not (tmp_path / "one" / "README.md").exists()
    files = sorted(p.relative_to(tmp_path / "one") for p in (tmp_path / "one").rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(tmp_path / "two") for p in (tmp_path / "two").rglob("*") if p.is_file())
    assert all((tmp_path / "one" / f).read_bytes() == (tmp_path / "two" / f).read_bytes() for f in files)

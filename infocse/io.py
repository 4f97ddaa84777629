"""Atomic outputs: a killed stage never leaves a file that DVC or a later stage would take as good."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd


def remove(path: Path) -> None:
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
    remove(tmp)
    try:
        yield tmp
    except BaseException:
        remove(tmp)
        raise
    if dest.is_dir() and not dest.is_symlink():
        old = dest.with_name(f".{dest.name}.old-{os.getpid()}")
        os.replace(dest, old)
        os.replace(tmp, dest)
        remove(old)
    else:
        os.replace(tmp, dest)


def write_json(path: Path | str, payload: dict) -> None:
    """Canonical JSON (sorted keys): the same payload gives the same bytes."""
    write_text(path, json.dumps(payload, indent=2, sort_keys=True) + "\n")


def write_text(path: Path | str, text: str) -> None:
    with atomic_output(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def read_json(path: Path | str) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def write_parquet(frame: pd.DataFrame, path: Path | str) -> None:
    with atomic_output(path) as tmp:
        frame.to_parquet(tmp, index=False)


def save_numpy(array: np.ndarray, path: Path | str) -> None:
    with atomic_output(path) as tmp:
        with open(tmp, "wb") as handle:
            np.save(handle, array)


def write_placeholder(dest: Path | str, reason: str) -> None:
    """A folder output of a step that did no work (the loop stopped, or nothing to do): one
    SKIPPED file saying why, so DVC has an output and nobody mistakes it for a model."""
    with atomic_output(dest) as tmp:
        tmp.mkdir()
        (tmp / "SKIPPED").write_text(reason.rstrip() + "\n", encoding="utf-8")

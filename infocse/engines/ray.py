"""The `ray` engine of the embed and cluster stages (infocse/engines/ray_embed.py and
ray_cluster.py): the same outputs as the local engine, computed by Ray Data over partitions of the
sentence table, for corpora that outgrow one machine's memory. This file: the Ray session and the
partitions, shared by both (and free of their code, so each stage depends only on its own).

A partition is a run of whole documents (IDC never looks across documents, so partitions are
independent) of about `engine.partition_sentences` sentences: that bounds what a worker holds.
Ray is imported only here and only when the engine is `ray`, so the local engine never needs it.
With a remote cluster (`engine.address` or RAY_ADDRESS), every node must see the corpus, the
model and the outputs at the same absolute paths (shared storage) and have requirements installed.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from infocse.config import EngineConfig
from infocse.errors import StageError
from infocse.pairs import document_codes, document_offsets

RAY_VERSION = "2.60.0"  # the pin of requirements-ray.txt
# Ray's own retries (a crashed worker, a raised error): bounded, so a partition that always fails stops the stage.
RETRIES = 3


def import_ray():
    """Ray and Ray Data, or one clear line saying how to install them."""
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError as error:
        raise StageError(f'engine `ray` needs `pip install "ray[data]=={RAY_VERSION}"` ({error})') from error
    return ray


@contextlib.contextmanager
def ray_session(engine: EngineConfig) -> Iterator:
    """Connect to `engine.address` (else RAY_ADDRESS), or start a local Ray; reuse one already
    initialised (tests, notebooks) and shut down only what was started here."""
    ray = import_ray()
    started = not ray.is_initialized()
    if started:
        address = engine.address or os.environ.get("RAY_ADDRESS")
        if address:  # workers elsewhere import this package from the upload
            ray.init(address=address, runtime_env={"py_modules": [str(Path(__file__).resolve().parents[1])]})
        else:  # "local": never attach to some other cluster left running on this machine
            ray.init(address="local", include_dashboard=False)
    try:
        yield ray
    finally:
        if started:
            ray.shutdown()


def map_partitions(dataset, fn, **options):
    """`Dataset.map_batches`, one partition per call. Ray 2.60 takes the retry options only as
    `ray_remote_args`, deprecated for 2.64: silence that one warning, not the retries."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="`ray_remote_args` is deprecated")
        return dataset.map_batches(fn, batch_size=1, batch_format="numpy", **options)


# ---------------------------------------------------------------- partitions of the sentence table
def sentence_document_codes(sentences_path: Path | str) -> np.ndarray:
    """The document of each sentence row, numbered as the local engine numbers them (doc_id only is read)."""
    return document_codes(pq.read_table(sentences_path, columns=["doc_id"]).column("doc_id").to_pandas())


def plan_partitions(doc_codes: np.ndarray, size: int) -> np.ndarray:
    """Row bounds [0, b1, ..., n] of partitions of whole documents, each at most `size` sentences
    except a document bigger than `size`, which gets a partition of its own."""
    offsets = document_offsets(doc_codes)
    bounds = [0]
    while bounds[-1] < offsets[-1]:
        cut = offsets[np.searchsorted(offsets, bounds[-1] + size, side="right") - 1]
        if cut <= bounds[-1]:
            cut = offsets[np.searchsorted(offsets, bounds[-1], side="right")]
        bounds.append(int(cut))
    return np.asarray(bounds, np.int64)


def partition_dataset(ray, bounds: np.ndarray):
    """One row per partition (index, start, stop), one block each: the unit of work and of retry."""
    items = [{"partition": i, "start": int(a), "stop": int(b)} for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:]))]
    return ray.data.from_items(items, override_num_blocks=max(1, len(items)))


def read_rows(path: Path | str, start: int, stop: int, columns: list[str]) -> pa.Table:
    """Rows [start, stop) of a parquet file, streaming only the row groups they span."""
    file = pq.ParquetFile(path)
    pieces, at = [], 0
    for group in range(file.num_row_groups):
        group_rows = file.metadata.row_group(group).num_rows
        if at + group_rows <= start or at >= stop:
            at += group_rows
            continue
        for batch in file.iter_batches(row_groups=[group], columns=columns):
            low, high = max(start - at, 0), min(stop - at, batch.num_rows)
            if low < high:
                pieces.append(batch.slice(low, high - low))
            at += batch.num_rows
    return pa.Table.from_batches(pieces, schema=pa.schema([file.schema_arrow.field(c) for c in columns]))


def take_rows(path: Path | str, rows: np.ndarray, columns: list[str]) -> pd.DataFrame:
    """The given rows (sorted, distinct) of a parquet file, read batch by batch: the driver never
    holds the whole text column."""
    file = pq.ParquetFile(path)
    pieces, at = [], 0
    for batch in file.iter_batches(columns=columns):
        low, high = np.searchsorted(rows, [at, at + batch.num_rows])
        if low < high:
            pieces.append(batch.take(pa.array(rows[low:high] - at)))
        at += batch.num_rows
        if high == len(rows):
            break
    return pa.Table.from_batches(pieces, schema=pa.schema([file.schema_arrow.field(c) for c in columns])).to_pandas()

"""The `ray` engine of the embed and cluster stages: the same outputs as the local engine, computed
by Ray Data over partitions of the sentence table, for corpora that outgrow one machine's memory.

A partition is a run of whole documents (IDC never looks across documents, so partitions are
independent) of about `engine.partition_sentences` sentences: that bounds what a worker holds.
Ray is imported only here and only when the engine is `ray`, so the local engine never needs it.
With a remote cluster (`engine.address` or RAY_ADDRESS), every node must see the corpus, the
model and the outputs at the same absolute paths (shared storage) and have requirements installed.
"""

from __future__ import annotations

import contextlib
import os
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from infocse.config import Config, EngineConfig
from infocse.embedding import embed_sentences
from infocse.errors import StageError
from infocse.idc import cluster_pairs, idc_pair_table, partition_idc
from infocse.io import atomic_output, save_numpy
from infocse.models import load_model
from infocse.pairs import document_codes, document_offsets
from infocse.paths import SENTENCES

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


# ---------------------------------------------------------------- embed
class SentenceEncoder:
    """A Ray Data actor: loads the model once, then encodes whole partitions."""

    def __init__(self, model_path: str, device: str | None, max_seq_length: int, batch_size: int, sentences_path: str):
        self.model = load_model(model_path, device, max_seq_length)
        self.batch_size = batch_size
        self.sentences_path = sentences_path

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        rows = np.concatenate([np.arange(a, b) for a, b in zip(batch["start"], batch["stop"])])
        texts = [text for a, b in zip(batch["start"], batch["stop"])
                 for text in read_rows(self.sentences_path, int(a), int(b), ["text"]).column("text").to_pylist()]
        return {"row": rows, "embedding": embed_sentences(self.model, texts, self.batch_size, show_progress_bar=False)}


def encoder_resources(ray, engine: EngineConfig, device: str | None) -> tuple[int, float]:
    """(actors, GPUs per actor): `auto` is one actor per GPU of the cluster, or one without GPUs."""
    gpus = 0 if device == "cpu" else int(ray.cluster_resources().get("GPU", 0))
    actors = engine.actors or max(gpus, 1)
    return actors, (min(1.0, gpus / actors) if gpus else 0.0)


def embed_with_ray(config: Config, model_path: Path | str, dest: Path | str,
                   sentences_path: Path | str = SENTENCES) -> int:
    """Write the local engine's embeddings.npy (same rows, same order) from a pool of model actors,
    filling the output file partition by partition as results arrive; returns the sentence count."""
    engine = config.engine
    doc_codes = sentence_document_codes(sentences_path)
    bounds = plan_partitions(doc_codes, engine.partition_sentences)
    if len(doc_codes) == 0:
        save_numpy(np.empty((0, 0), np.float32), dest)
        return 0
    with ray_session(engine) as ray:
        actors, gpus = encoder_resources(ray, engine, config.device)
        encoder_args = {"model_path": str(Path(model_path).resolve()), "device": config.device,
                        "max_seq_length": config.embed.max_seq_length, "batch_size": config.embed.batch_size,
                        "sentences_path": str(Path(sentences_path).resolve())}
        embedded = map_partitions(partition_dataset(ray, bounds), SentenceEncoder, fn_constructor_kwargs=encoder_args,
                                  compute=ray.data.ActorPoolStrategy(size=actors), num_gpus=gpus,
                                  max_restarts=RETRIES, max_task_retries=RETRIES)
        with atomic_output(dest) as tmp:
            output, written = None, np.zeros(len(doc_codes), bool)
            for batch in embedded.iter_batches(batch_size=None, batch_format="numpy"):
                if output is None:
                    output = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32,
                                                       shape=(len(doc_codes), batch["embedding"].shape[1]))
                if written[batch["row"]].any():
                    raise StageError("the ray engine returned a sentence twice")
                output[batch["row"]] = batch["embedding"]
                written[batch["row"]] = True
            if not written.all():
                raise StageError(f"the ray engine lost {int((~written).sum())} sentence(s)")
            output.flush()
            del output
    return len(doc_codes)


# ---------------------------------------------------------------- cluster
def mine_partition(batch: dict[str, np.ndarray], sentences_path: str, embeddings_path: str, k: int,
                   block_rows: int) -> pa.Table:
    """Partition IDC of one partition: its component labels, numbered from 0 (the pairs follow
    from the labels, once all partitions are in)."""
    (index,), (start,), (stop,) = batch["partition"], batch["start"], batch["stop"]
    doc_ids = read_rows(sentences_path, int(start), int(stop), ["doc_id"]).column("doc_id").to_pandas()
    embeddings = np.array(np.load(embeddings_path, mmap_mode="r")[start:stop])  # this partition only, in memory
    labels = partition_idc(embeddings, document_codes(doc_ids), k, block_rows)
    return pa.table({"partition": [int(index)], "labels": pa.array([labels], pa.large_list(pa.int64()))})


def gather_partitions(results, partitions: int) -> np.ndarray:
    """The local engine's labels from per-partition results in any order: components are numbered
    by their lowest row (scipy's order), and no edge crosses partitions, so each partition's labels
    shift by the number of components before it."""
    found: dict[int, np.ndarray] = {}
    for table in results.iter_batches(batch_size=None, batch_format="pyarrow"):
        for row in range(table.num_rows):
            index = table.column("partition")[row].as_py()
            if index in found:
                raise StageError(f"the ray engine returned partition {index} twice")
            found[index] = table.column("labels")[row].values.to_numpy()
    if sorted(found) != list(range(partitions)):
        raise StageError(f"the ray engine lost {partitions - len(found)} partition(s)")
    labels, shift = [np.empty(0, np.int64)], 0
    for index in range(partitions):
        part_labels = found.pop(index)
        labels.append(part_labels + shift)
        shift += int(part_labels.max()) + 1 if len(part_labels) else 0
    return np.concatenate(labels)


def cluster_with_ray(config: Config, embeddings_path: Path | str,
                     sentences_path: Path | str = SENTENCES,
                     miner: Callable = mine_partition) -> tuple[pd.DataFrame, dict]:
    """The local engine's pair table and statistics (`infocse.idc.cluster_sentences`), mined partition by
    partition; the kept pairs then follow from all labels at once, exactly as locally.
    `miner` is the per-partition function (a parameter so a test can make it fail once)."""
    if config.idc.method == "kmeans":
        raise StageError("`idc.method: kmeans` fits one K-means over all sentences at once, so it runs on "
                         "the local engine only: set `engine.name: local`")
    engine, seed = config.engine, config.seed
    doc_codes = sentence_document_codes(sentences_path)
    embeddings = np.load(embeddings_path, mmap_mode="r")
    if len(embeddings) != len(doc_codes):
        raise StageError(f"{len(embeddings)} embeddings for {len(doc_codes)} sentences: re-run the embed stage")
    del embeddings
    bounds = plan_partitions(doc_codes, engine.partition_sentences)
    with ray_session(engine) as ray:
        started = time.perf_counter()
        results = map_partitions(partition_dataset(ray, bounds), miner,
                                 fn_kwargs={"sentences_path": str(Path(sentences_path).resolve()),
                                            "embeddings_path": str(Path(embeddings_path).resolve()),
                                            "k": config.idc.k, "block_rows": config.idc.block_rows},
                                 max_retries=RETRIES, retry_exceptions=True)
        labels = gather_partitions(results, len(bounds) - 1)
    first, second = cluster_pairs(labels, doc_codes, config.budget, seed)
    seconds = time.perf_counter() - started
    rows = np.unique(np.r_[first, second])
    subset = take_rows(sentences_path, rows, ["sentence_id", "doc_id", "text"])
    pairs, stats = idc_pair_table(subset, labels, first, second, doc_codes, rows=rows)
    stats.update({"idc_seconds": seconds, "partitions": len(bounds) - 1})
    return pairs, stats

"""The `ray` engine of the cluster stage: partition IDC per partition of whole documents (IDC
never looks across documents), then the kept pairs from all labels at once, exactly as the local
engine (see infocse/engines/ray.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from infocse.config import Config
from infocse.engines.ray import (
    RETRIES,
    map_partitions,
    partition_dataset,
    plan_partitions,
    ray_session,
    read_rows,
    sentence_document_codes,
    take_rows,
)
from infocse.errors import StageError
from infocse.idc import cluster_pairs, idc_pair_table, partition_idc
from infocse.pairs import document_codes
from infocse.paths import SENTENCES


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
                     miner: Callable = mine_partition, seed: int | None = None) -> tuple[pd.DataFrame, dict]:
    """The local engine's pair table and statistics (`infocse.idc.cluster_sentences`), mined partition by
    partition; the kept pairs then follow from all labels at once, exactly as locally.
    `miner` is the per-partition function (a parameter so a test can make it fail once); `seed`
    draws the budget's sample (None: params `seed`)."""
    if config.idc.method == "kmeans":
        raise StageError("`idc.method: kmeans` fits one K-means over all sentences at once, so it runs on "
                         "the local engine only: set `engine.name: local`")
    engine = config.engine
    seed = config.seed if seed is None else seed
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

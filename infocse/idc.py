"""Intra-Document Clustering (IDC): sentence embeddings -> clusters -> positive pairs.

Partition IDC (the method): per document, cosine graph of its sentences; keep edge (i, j) iff j
is among i's top-K or i among j's (self excluded, ties to the earlier sentence); clusters =
connected components; positives = every unordered pair inside a cluster, once. Vectorised across
documents: documents of one size are stacked into one batched matmul, and all edges go through
one sparse connected-components call.

K-means IDC (the paper's ablation): one global K-means over all sentences; the sentences of a
document that share a global cluster form that document's cluster.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import torch
from scipy.cluster.vq import kmeans2
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from infocse.config import Budget, IdcConfig
from infocse.errors import StageError
from infocse.pairs import cap_pairs, cluster_statistics, document_codes, document_offsets, pair_table, \
    pair_table_statistics

MAX_BLOCK_ELEMENTS = 1 << 24  # similarity entries per batched block: bounds memory, not results


def top_k_edges(embeddings: np.ndarray, offsets: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Directed edges i -> j for each sentence i and its top-k most similar sentences j of the
    same document (self excluded; ties go to the earlier sentence, by a stable sort)."""
    if k < 1:
        raise StageError(f"K must be >= 1, got {k}")
    vectors = torch.from_numpy(np.ascontiguousarray(embeddings, dtype=np.float32))
    sizes = np.diff(offsets)
    sources, targets = [], []
    for size in np.unique(sizes[sizes >= 2]):
        docs = np.flatnonzero(sizes == size)
        keep = min(k, int(size) - 1)
        per_block = max(1, MAX_BLOCK_ELEMENTS // int(size * size))
        for block in range(0, len(docs), per_block):
            rows = offsets[docs[block:block + per_block], None] + np.arange(size)  # (B, n)
            stacked = vectors[torch.from_numpy(rows)]  # (B, n, d)
            similarity = torch.bmm(stacked, stacked.transpose(1, 2))
            similarity.diagonal(dim1=1, dim2=2).fill_(-torch.inf)
            order = torch.sort(similarity, dim=2, descending=True, stable=True).indices[:, :, :keep].numpy()
            sources.append(np.repeat(rows, keep, axis=1).ravel())
            targets.append(np.take_along_axis(rows, order.reshape(len(rows), -1), axis=1).ravel())
    if not sources:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return np.concatenate(sources), np.concatenate(targets)


def cluster_labels(n_sentences: int, sources: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Connected components of the undirected graph (so i-j is kept if either chose the other)."""
    graph = coo_matrix((np.ones(len(sources), np.int8), (sources, targets)), shape=(n_sentences, n_sentences))
    _, labels = connected_components(graph.tocsr(), directed=False)
    return labels.astype(np.int64)


def intra_cluster_pairs(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every unordered pair (a < b) of sentences sharing a label, each pair once, sorted."""
    order = np.argsort(labels, kind="stable")
    sizes = np.bincount(labels)
    starts = np.r_[0, np.cumsum(sizes)[:-1]]
    firsts, seconds = [], []
    for size in np.unique(sizes[sizes >= 2]):
        clusters = np.flatnonzero(sizes == size)
        members = order[starts[clusters, None] + np.arange(size)]  # (C, m), ascending in each row
        upper_i, upper_j = np.triu_indices(size, 1)
        firsts.append(members[:, upper_i].ravel())
        seconds.append(members[:, upper_j].ravel())
    if not firsts:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    first, second = np.concatenate(firsts), np.concatenate(seconds)
    keep = np.lexsort((second, first))
    return first[keep], second[keep]


def partition_idc(embeddings: np.ndarray, doc_codes: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Partition IDC: (cluster label of each sentence, first, second) for rows grouped by document."""
    offsets = document_offsets(doc_codes)
    sources, targets = top_k_edges(embeddings, offsets, k)
    labels = cluster_labels(len(doc_codes), sources, targets)
    first, second = intra_cluster_pairs(labels)
    return labels, first, second


def kmeans_document_labels(embeddings: np.ndarray, doc_codes: np.ndarray, clusters: int, seed: int) -> np.ndarray:
    """K-means IDC: one global K-means (k-means++ start, seeded); a document's sentences that fall
    in one global cluster share a label."""
    if len(embeddings) < clusters:
        raise StageError(f"K-means needs at least {clusters} sentences (params `idc.kmeans_clusters`), "
                         f"got {len(embeddings)}")
    _, global_labels = kmeans2(np.asarray(embeddings, np.float64), clusters, minit="++",
                               seed=np.random.default_rng(seed))
    keys = doc_codes.astype(np.int64) * clusters + global_labels
    return np.unique(keys, return_inverse=True)[1].astype(np.int64)


def kmeans_idc(embeddings: np.ndarray, doc_codes: np.ndarray, clusters: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """K-means IDC: (labels, first, second), like `partition_idc`."""
    labels = kmeans_document_labels(embeddings, doc_codes, clusters, seed)
    first, second = intra_cluster_pairs(labels)
    return labels, first, second


def mine_pairs(idc: IdcConfig, embeddings: np.ndarray, doc_codes: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """IDC by the configured method: (labels, first, second)."""
    if idc.method == "partition":
        return partition_idc(embeddings, doc_codes, idc.k)
    return kmeans_idc(embeddings, doc_codes, idc.kmeans_clusters, seed)


def idc_pair_table(sentences: pd.DataFrame, labels: np.ndarray, first: np.ndarray, second: np.ndarray,
                   doc_codes: np.ndarray, budget: Budget, seed: int,
                   rows: np.ndarray | None = None) -> tuple[pd.DataFrame, dict]:
    """The budget-capped pair table of the mined pairs, and the pair statistics. `sentences` is the
    sentence table, or only its (sorted) `rows` when the caller never held the whole table."""
    kept = cap_pairs(doc_codes[first], budget, seed)
    first_kept, second_kept = first[kept], second[kept]
    a, b = (first_kept, second_kept) if rows is None else (np.searchsorted(rows, first_kept),
                                                           np.searchsorted(rows, second_kept))
    pairs = pair_table(sentences, a, sentences["sentence_id"].to_numpy()[b], sentences["text"].to_numpy()[b],
                       labels[first_kept])
    return pairs, {**cluster_statistics(labels, first, doc_codes), **pair_table_statistics(pairs)}


def rows_in_pairs(first: np.ndarray, second: np.ndarray, doc_codes: np.ndarray, budget: Budget, seed: int) -> np.ndarray:
    """The sentence rows the capped pair table will hold (what `idc_pair_table` needs of the table)."""
    kept = cap_pairs(doc_codes[first], budget, seed)
    return np.unique(np.r_[first[kept], second[kept]])


def cluster_sentences(idc: IdcConfig, budget: Budget, seed: int, sentences: pd.DataFrame,
                      embeddings: np.ndarray) -> tuple[pd.DataFrame, dict]:
    """One IDC round on the local engine: the pair table and its statistics."""
    if len(embeddings) != len(sentences):
        raise StageError(f"{len(embeddings)} embeddings for {len(sentences)} sentences: re-run the embed stage")
    doc_codes = document_codes(sentences["doc_id"])
    started = time.perf_counter()
    labels, first, second = mine_pairs(idc, embeddings, doc_codes, seed)
    seconds = time.perf_counter() - started
    pairs, stats = idc_pair_table(sentences, labels, first, second, doc_codes, budget, seed)
    stats["idc_seconds"] = seconds  # the clustering itself, without reading or writing tables
    return pairs, stats

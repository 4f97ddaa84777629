"""cluster@t: Intra-Document Clustering (IDC) of the sentence embeddings into positive pairs.

Partition IDC (the method): per document, cosine graph of its sentences, keep edge (i, j) iff j
is among i's top-K or i among j's, clusters = connected components, positives = every unordered
pair in a cluster. Vectorised across documents: documents of equal size are stacked and handled
by one batched matmul and sort, and all edges go through one sparse connected-components call.

K-means IDC (the paper's ablation): one global K-means over all sentences; the sentences of a
document that share a global cluster form that document's cluster.

`engine.name: ray` runs partition IDC over partitions of whole documents on Ray (stages/ray_engine.py),
with the same pair table as a result.
"""

from __future__ import annotations

import argparse
import re
import time

import numpy as np
import pandas as pd
import torch
from scipy.cluster.vq import kmeans2
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from stages.common import (
    SENTENCES,
    IterationPaths,
    StageError,
    iteration_is_active,
    load_params,
    positive_int,
    run_stage,
    write_json,
    write_parquet,
)
from stages.ray_engine import cluster_with_ray, engine_settings

PAIR_COLUMNS = ["doc_id", "sentence_a", "sentence_b", "cluster", "text_a", "text_b"]
MAX_BLOCK_ELEMENTS = 1 << 24  # similarity entries per batched block: bounds memory, not results


def document_offsets(doc_codes: np.ndarray) -> np.ndarray:
    """Start offsets of each document's rows (rows must be grouped by document), plus the end."""
    if len(doc_codes) and np.any(np.diff(doc_codes) < 0):
        raise StageError("sentences must be grouped by document, in document order")
    starts = np.flatnonzero(np.r_[True, doc_codes[1:] != doc_codes[:-1]]) if len(doc_codes) else np.array([], int)
    return np.r_[starts, len(doc_codes)].astype(np.int64)


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
    """Every unordered pair (a < b) of sentences sharing a label, each pair once."""
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


def cap_pairs(first: np.ndarray, second: np.ndarray, doc_codes: np.ndarray, per_doc: int | None,
              total: int | None, seed: int) -> np.ndarray:
    """Indices of the pairs kept: at most `per_doc` per document, then at most `total`, sampled
    uniformly with `seed` (pair counts grow with the square of cluster size)."""
    rng = np.random.default_rng(seed)
    kept = np.arange(len(first))
    if per_doc is not None and len(kept):
        docs = doc_codes[first]
        order = np.lexsort((rng.random(len(kept)), docs))
        docs_sorted = docs[order]
        starts = np.r_[0, np.flatnonzero(docs_sorted[1:] != docs_sorted[:-1]) + 1]
        rank = np.arange(len(order)) - np.repeat(starts, np.diff(np.r_[starts, len(order)]))
        kept = np.sort(order[rank < per_doc])
    if total is not None and len(kept) > total:
        kept = np.sort(rng.choice(kept, size=total, replace=False))
    return kept


def mine_positive_pairs(embeddings: np.ndarray, doc_codes: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Partition IDC: (labels, first, second) for sentences grouped by document."""
    offsets = document_offsets(doc_codes)
    sources, targets = top_k_edges(embeddings, offsets, k)
    labels = cluster_labels(len(doc_codes), sources, targets)
    first, second = intra_cluster_pairs(labels)
    return labels, first, second


def kmeans_document_labels(embeddings: np.ndarray, doc_codes: np.ndarray, clusters: int, seed: int) -> np.ndarray:
    """K-means IDC: one global K-means (k-means++ start, seeded); a document's sentences that fall
    in one global cluster share a label."""
    if clusters < 1:
        raise StageError(f"params `idc.kmeans_clusters` must be >= 1, got {clusters}")
    if len(embeddings) < clusters:
        raise StageError(f"K-means needs at least {clusters} sentences, got {len(embeddings)}")
    _, global_labels = kmeans2(np.asarray(embeddings, np.float64), clusters, minit="++",
                               seed=np.random.default_rng(seed))
    keys = doc_codes.astype(np.int64) * clusters + global_labels
    return np.unique(keys, return_inverse=True)[1].astype(np.int64)


def mine_kmeans_pairs(embeddings: np.ndarray, doc_codes: np.ndarray, clusters: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """K-means IDC: (labels, first, second), like `mine_positive_pairs`."""
    labels = kmeans_document_labels(embeddings, doc_codes, clusters, seed)
    first, second = intra_cluster_pairs(labels)
    return labels, first, second


TOKEN = re.compile(r"\w+")


def token_jaccard(text_a: str, text_b: str) -> float:
    """Lexical overlap of a pair: the paper's 'trivial positives' made measurable."""
    a, b = set(TOKEN.findall(text_a.lower())), set(TOKEN.findall(text_b.lower()))
    return len(a & b) / len(a | b) if a | b else 0.0


def pair_statistics(labels: np.ndarray, first: np.ndarray, doc_codes: np.ndarray, pairs: pd.DataFrame) -> dict:
    sizes = np.bincount(labels)
    clustered = sizes[sizes >= 2]
    per_doc = np.sort(np.bincount(doc_codes[first], minlength=doc_codes.max() + 1 if len(doc_codes) else 0))[::-1]
    top_tenth = per_doc[: max(1, int(np.ceil(len(per_doc) * 0.1)))].sum() if len(per_doc) else 0
    return {
        "sentences": int(len(labels)),
        "clusters": int(len(clustered)),
        "singletons": int((sizes == 1).sum()),
        "mean_cluster_size": float(clustered.mean()) if len(clustered) else 0.0,
        "max_cluster_size": int(clustered.max()) if len(clustered) else 0,
        "pairs_mined": int(len(first)),
        "share_of_pairs_from_top_10pct_documents": float(top_tenth / len(first)) if len(first) else 0.0,
        **pair_table_statistics(pairs),
    }


def pair_table_statistics(pairs: pd.DataFrame) -> dict:
    """What any annotator's kept pairs look like: how many, from how many documents, how lexically alike."""
    overlap = [token_jaccard(a, b) for a, b in zip(pairs["text_a"], pairs["text_b"])]
    return {"pairs": int(len(pairs)), "documents_in_pairs": int(pairs["doc_id"].nunique()),
            "mean_token_jaccard": float(np.mean(overlap)) if overlap else 0.0}


def empty_pair_table() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=d) for c, d in zip(PAIR_COLUMNS, [str, "int64", "int64", "int64", str, str])})


def build_pair_table(sentences: pd.DataFrame, labels: np.ndarray, first: np.ndarray, second: np.ndarray) -> pd.DataFrame:
    text = sentences["text"].to_numpy()
    return pd.DataFrame({
        "doc_id": sentences["doc_id"].to_numpy()[first],
        "sentence_a": sentences["sentence_id"].to_numpy()[first],
        "sentence_b": sentences["sentence_id"].to_numpy()[second],
        "cluster": labels[first],
        "text_a": text[first],
        "text_b": text[second],
    }, columns=PAIR_COLUMNS)


IDC_METHODS = ("partition", "kmeans")


def budget_caps(params: dict) -> tuple[int | None, int | None]:
    """The training-pair budget every annotator shares: (per document, in all)."""
    return (positive_int(params, "budget.max_pairs_per_document", allow_all=True),
            positive_int(params, "budget.max_pairs", allow_all=True))


def cluster_iteration(params: dict, sentences: pd.DataFrame, embeddings: np.ndarray) -> tuple[pd.DataFrame, dict]:
    method = params["idc"].get("method", "partition")
    if method not in IDC_METHODS:
        raise StageError(f"params `idc.method` must be one of {list(IDC_METHODS)}, got {method!r}")
    if len(embeddings) != len(sentences):
        raise StageError(f"{len(embeddings)} embeddings for {len(sentences)} sentences: re-run the embed stage")
    doc_codes = pd.factorize(sentences["doc_id"], sort=False)[0]
    started = time.perf_counter()
    if method == "partition":
        labels, first, second = mine_positive_pairs(embeddings, doc_codes, positive_int(params, "idc.k"))
    else:
        labels, first, second = mine_kmeans_pairs(embeddings, doc_codes, positive_int(params, "idc.kmeans_clusters"),
                                                  int(params["seed"]))
    seconds = time.perf_counter() - started
    kept = cap_pairs(first, second, doc_codes, *budget_caps(params), int(params["seed"]))
    pairs = build_pair_table(sentences, labels, first[kept], second[kept])
    stats = pair_statistics(labels, first, doc_codes, pairs)
    stats["idc_seconds"] = seconds  # the clustering itself, without reading or writing tables
    return pairs, stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iteration", type=int, required=True)
    t = parser.parse_args().iteration
    params = load_params()
    paths = IterationPaths(t)
    started = time.perf_counter()
    engine = engine_settings(params)
    if iteration_is_active(params, t):
        if engine.name == "ray":
            pairs, stats = cluster_with_ray(engine, params, paths.embeddings)
        else:
            sentences = pd.read_parquet(SENTENCES)
            pairs, stats = cluster_iteration(params, sentences, np.load(paths.embeddings))
        if pairs.empty:
            raise StageError("IDC found no positive pairs (no cluster has two sentences)")
        print(f"iteration {t}: {stats['clusters']} clusters, {stats['pairs_mined']} pairs mined, {len(pairs)} kept")
    else:
        pairs, stats = empty_pair_table(), {}
        print(f"iteration {t}: skipped (the loop stopped)")
    stats.update({"iteration": t, "skipped": pairs.empty, "seconds": time.perf_counter() - started})
    write_parquet(pairs, paths.pairs)
    write_json(paths.metrics / "pairs.json", stats)


if __name__ == "__main__":
    run_stage(main)

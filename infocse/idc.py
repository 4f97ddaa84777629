"""Intra-Document Clustering (IDC): sentence embeddings -> clusters -> positive pairs.

Partition IDC (the method): per document, cosine graph of its sentences; keep edge (i, j) iff j
is among i's top-K or i among j's (self excluded, ties to the earlier sentence); clusters =
connected components; positives = every unordered pair inside a cluster, once.

What keeps it fast and its memory bounded: documents of one size are stacked into one batched
matmul (in chunks of at most BMM_ROWS rows of each document, the shape torch's CPU kernel runs
fastest), and a document longer than `idc.block_rows` goes in blocks of rows against the whole
document; the blocks and batches are spread over torch's threads, so at most about `block_rows`
similarity rows exist at once. Each row keeps its top K by
partial selection (repeated argmax, or topk with a full sort only for rows tied at the K-th
place). All neighbours go through one sparse connected-components call. The pairs of a cluster
are never all built when the budget caps them: they are numbered in a known order, the budget
draws the numbers it keeps, and only those pairs are built.

K-means IDC (the paper's ablation): one global K-means over all sentences; the sentences of a
document that share a global cluster form that document's cluster.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd
from scipy.cluster.vq import kmeans2
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

from infocse.config import Budget, IdcConfig
from infocse.errors import StageError
from infocse.pairs import cluster_statistics, document_codes, document_offsets, kept_pair_numbers, pair_table, \
    pair_table_statistics
from infocse.seeds import child_seed

ARGMAX_ROUNDS = 4  # top-K by repeated argmax up to this K (cheaper than topk there), by topk beyond
BMM_ROWS = 15  # rows of one document multiplied at once: torch's CPU bmm is 2-3x slower per flop from 16 rows up


# ---------------------------------------------------------------- the top-K graph
def top_columns(similarity: np.ndarray, keep: int) -> np.ndarray:
    """Each row's `keep` largest columns, ties to the lower column (what a stable descending sort
    keeps), by partial selection; `similarity` is overwritten. Up to ARGMAX_ROUNDS: argmax (the
    first maximum) `keep` times, each winner masked out. Beyond: topk's set, which is that of a
    stable sort unless the (keep+1)-th value equals the keep-th, and only such rows are sorted.
    Needs keep < columns."""
    import torch  # here, not at module level: a stage that clusters nothing never loads it

    chosen = np.empty((len(similarity), keep), np.int64)
    if keep <= ARGMAX_ROUNDS:
        rows = np.arange(len(similarity))
        for slot in range(keep):
            chosen[:, slot] = similarity.argmax(axis=1)
            similarity[rows, chosen[:, slot]] = -np.inf
        return chosen
    values, columns = torch.topk(torch.from_numpy(similarity), keep + 1, dim=1)
    chosen[:] = columns[:, :keep].numpy()
    tied = np.flatnonzero((values[:, keep - 1] == values[:, keep]).numpy())
    if len(tied):
        chosen[tied] = np.argsort(-similarity[tied], axis=1, kind="stable")[:, :keep]
    return chosen


def top_k_neighbours(embeddings: np.ndarray, offsets: np.ndarray, k: int, block_rows: int) -> np.ndarray:
    """(sentences, k): each sentence's k most similar other sentences of its document (self
    excluded, ties to the earlier sentence); where a document has fewer than k other sentences,
    the row is padded with the sentence itself. Documents up to `block_rows` sentences go whole,
    stacked by size; longer ones in blocks of rows against the whole document. The work is split
    into tasks of about `block_rows / threads` similarity rows, run on torch's thread count, so
    the long documents' blocks hold block_rows x longest document similarities at most. A long
    document's block height follows the thread count, so another count can round its products
    differently and change a choice between float32-equal similarities (nothing else)."""
    import torch

    if k < 1:
        raise StageError(f"K must be >= 1, got {k}")
    if block_rows < 1:
        raise StageError(f"block_rows must be >= 1, got {block_rows}")
    vectors = np.ascontiguousarray(embeddings, dtype=np.float32)
    neighbours = np.repeat(np.arange(len(vectors), dtype=np.int64)[:, None], k, axis=1)
    threads = torch.get_num_threads()
    task_rows = max(1, block_rows // threads)
    sizes = np.diff(offsets)
    longest = int(sizes.max(initial=0))
    # one flat similarity block per thread that runs a long document's rows, allocated on first use
    blocks = defaultdict(lambda: torch.empty(task_rows * longest, dtype=torch.float32))
    tasks = []
    for size in np.unique(sizes[sizes >= 2]).tolist():
        docs = np.flatnonzero(sizes == size)
        keep = min(k, size - 1)
        if keep == size - 1:  # every other sentence of the document, whatever the similarities
            rows = offsets[docs, None] + np.arange(size)
            others = np.array([[j for j in range(size) if j != i] for i in range(size)], dtype=np.int64)
            neighbours[rows.ravel(), :keep] = rows[:, others].reshape(-1, keep)
        elif size <= block_rows:  # whole documents of this size, stacked
            per_batch = max(1, task_rows // size)
            tasks += [(neighbours_of_documents, offsets[docs[batch:batch + per_batch], None] + np.arange(size), keep)
                      for batch in range(0, len(docs), per_batch)]
        else:  # a long document, a block of rows against all of it
            tasks += [(neighbours_of_rows, start, size, first, min(size, first + task_rows), keep, blocks)
                      for start in offsets[docs].tolist() for first in range(0, size, task_rows)]
    if threads == 1:
        for task in tasks:
            task[0](vectors, neighbours, *task[1:])
    else:  # each task's torch work on its own thread: numpy and torch release the GIL
        torch.set_num_threads(1)
        try:
            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(lambda task: task[0](vectors, neighbours, *task[1:]), tasks))
        finally:
            torch.set_num_threads(threads)
    return neighbours


def neighbours_of_documents(vectors: np.ndarray, neighbours: np.ndarray, rows: np.ndarray, keep: int) -> None:
    """The top `keep` of each row of `rows` (documents of one size, (documents, size)), in place.
    The rows of each document go in chunks of at most BMM_ROWS against the whole document."""
    import torch

    count, size = rows.shape
    stacked = torch.from_numpy(vectors.take(rows.ravel(), axis=0).reshape(count, size, -1))
    chunks = -(-size // BMM_ROWS)
    bounds = np.linspace(0, size, chunks + 1).round().astype(int).tolist()
    for low, high in zip(bounds[:-1], bounds[1:]):
        similarity = torch.bmm(stacked[:, low:high], stacked.transpose(1, 2))  # (count, high - low, size)
        similarity.diagonal(offset=low, dim1=1, dim2=2).fill_(-torch.inf)
        chosen = top_columns(similarity.view(-1, size).numpy(), keep).reshape(count, -1)
        neighbours[rows[:, low:high].ravel(), :keep] = np.take_along_axis(rows, chosen, axis=1).reshape(-1, keep)


def neighbours_of_rows(vectors: np.ndarray, neighbours: np.ndarray, start: int, size: int, first: int, last: int,
                       keep: int, blocks: dict) -> None:
    """The top `keep` of rows first..last-1 of the document of `size` rows at `start`, in place.
    `blocks` holds one flat buffer per thread, reused: a fresh block each time costs its page faults."""
    import torch

    members = torch.from_numpy(vectors[start:start + size])
    block = blocks[threading.get_ident()][:(last - first) * size].view(last - first, size)
    similarity = torch.mm(members[first:last], members.T, out=block).numpy()
    similarity[np.arange(last - first), np.arange(first, last)] = -np.inf
    neighbours[start + first:start + last, :keep] = start + top_columns(similarity, keep)


def cluster_labels(neighbours: np.ndarray) -> np.ndarray:
    """Connected components of the undirected graph i - neighbours[i] (so i-j is kept if either
    chose the other), numbered in order of their lowest row."""
    n, k = neighbours.shape
    if n == 0:
        return np.zeros(0, np.int64)
    graph = csr_matrix((np.ones(n * k, np.int8), neighbours.ravel(), np.arange(0, n * k + 1, k)), shape=(n, n))
    _, labels = connected_components(graph, directed=False)
    return labels.astype(np.int64)


def partition_idc(embeddings: np.ndarray, doc_codes: np.ndarray, k: int, block_rows: int) -> np.ndarray:
    """Partition IDC: the cluster label of each sentence, for rows grouped by document."""
    offsets = document_offsets(doc_codes)
    return cluster_labels(top_k_neighbours(embeddings, offsets, k, block_rows))


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


def mine_clusters(idc: IdcConfig, embeddings: np.ndarray, doc_codes: np.ndarray, seed: int) -> np.ndarray:
    """IDC by the configured method: the cluster label of each sentence."""
    if idc.method == "partition":
        return partition_idc(embeddings, doc_codes, idc.k, idc.block_rows)
    return kmeans_document_labels(embeddings, doc_codes, idc.kmeans_clusters, seed)


# ---------------------------------------------------------------- pairs of clusters, in order
class ClusterPairs:
    """Every unordered pair (a < b) of sentences sharing a label, in (a, b) order, without building
    them: row a is the first of `counts[a]` pairs, with the members of its cluster after it, so
    pair number p is found from the running pair counts. Clusters lie inside one document, and
    documents are runs of rows, so each document's pairs are one run of pair numbers."""

    def __init__(self, labels: np.ndarray):
        self.members = np.argsort(labels, kind="stable")  # rows by (label, row)
        place = np.empty(len(labels), np.int64)
        place[self.members] = np.arange(len(labels))
        self.counts = (np.cumsum(np.bincount(labels)) - 1)[labels] - place
        self.ends = np.cumsum(self.counts)
        self.next_member = place + 1  # where in `members` row a's pairs' second sentences begin
        self.total = int(self.ends[-1]) if len(self.ends) else 0

    def per_document(self, offsets: np.ndarray) -> np.ndarray:
        """Pairs of each document (its run of pair numbers has this length)."""
        return np.diff(np.r_[0, self.ends][offsets])

    def at(self, numbers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(first, second) of the pairs with these numbers."""
        first = np.searchsorted(self.ends, numbers, side="right")
        into = numbers - (self.ends[first] - self.counts[first])
        return first, self.members[self.next_member[first] + into]

    def all(self) -> tuple[np.ndarray, np.ndarray]:
        """Every pair, in order (as big as it sounds)."""
        first = np.repeat(np.arange(len(self.counts)), self.counts)
        shift = np.repeat(self.next_member - (self.ends - self.counts), self.counts)
        return first, self.members[shift + np.arange(self.total)]


def intra_cluster_pairs(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every unordered pair (a < b) of sentences sharing a label, each pair once, sorted."""
    return ClusterPairs(labels).all()


def cluster_pairs(labels: np.ndarray, doc_codes: np.ndarray, budget: Budget, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(first, second) of the positives the budget keeps, in (first, second) order: the budget's
    choice (`infocse.pairs.kept_pair_numbers`) among the numbered pairs of `ClusterPairs`, with
    only the kept pairs ever built (all of them when nothing caps them)."""
    pairs = ClusterPairs(labels)
    numbers = kept_pair_numbers(pairs.per_document(document_offsets(doc_codes)), budget, seed)
    return pairs.all() if numbers is None else pairs.at(numbers)


# ---------------------------------------------------------------- the stage's result
def idc_pair_table(sentences: pd.DataFrame, labels: np.ndarray, first: np.ndarray, second: np.ndarray,
                   doc_codes: np.ndarray, rows: np.ndarray | None = None) -> tuple[pd.DataFrame, dict]:
    """The pair table of the kept pairs (first, second) and the statistics of the clusters and the
    table. `sentences` is the sentence table, or only its (sorted) `rows` when the caller never
    held the whole table."""
    a, b = (first, second) if rows is None else (np.searchsorted(rows, first), np.searchsorted(rows, second))
    pairs = pair_table(sentences, a, sentences["sentence_id"].to_numpy()[b], sentences["text"].to_numpy()[b],
                       labels[first])
    return pairs, {**cluster_statistics(labels, doc_codes), **pair_table_statistics(pairs)}


def cluster_sentences(idc: IdcConfig, budget: Budget, seed: int, sentences: pd.DataFrame,
                      embeddings: np.ndarray) -> tuple[pd.DataFrame, dict]:
    """One IDC round on the local engine: the pair table and its statistics."""
    if len(embeddings) != len(sentences):
        raise StageError(f"{len(embeddings)} embeddings for {len(sentences)} sentences: re-run the embed stage")
    doc_codes = document_codes(sentences["doc_id"])
    started = time.perf_counter()
    labels = mine_clusters(idc, embeddings, doc_codes, child_seed(seed))  # not the budget's stream
    first, second = cluster_pairs(labels, doc_codes, budget, seed)
    seconds = time.perf_counter() - started
    pairs, stats = idc_pair_table(sentences, labels, first, second, doc_codes)
    stats["idc_seconds"] = seconds  # clustering and the kept pairs, without reading or writing tables
    return pairs, stats

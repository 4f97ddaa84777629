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
are never all built when the budget caps them: they come in a known order, so the budget's
random keys are drawn chunk by chunk along that order and only the pairs that can be kept are
looked at.

K-means IDC (the paper's ablation): one global K-means over all sentences; the sentences of a
document that share a global cluster form that document's cluster.
"""

from __future__ import annotations

import math
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd
import torch
from scipy.cluster.vq import kmeans2
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

from infocse.config import Budget, IdcConfig
from infocse.errors import StageError
from infocse.pairs import cluster_statistics, document_codes, document_offsets, pair_table, pair_table_statistics

ARGMAX_ROUNDS = 4  # top-K by repeated argmax up to this K (cheaper than topk there), by topk beyond
KEY_CHUNK = 1 << 20  # budget keys drawn at once (8 MB, which malloc reuses): bounds memory, never the result
GRID_ENTRIES = 1 << 22  # candidate keys ranked at once
BMM_ROWS = 15  # rows of one document multiplied at once: torch's CPU bmm is 2-3x slower per flop from 16 rows up


# ---------------------------------------------------------------- the top-K graph
def top_columns(similarity: np.ndarray, keep: int) -> np.ndarray:
    """Each row's `keep` largest columns, ties to the lower column (what a stable descending sort
    keeps), by partial selection; `similarity` is overwritten. Up to ARGMAX_ROUNDS: argmax (the
    first maximum) `keep` times, each winner masked out. Beyond: topk's set, which is that of a
    stable sort unless the (keep+1)-th value equals the keep-th, and only such rows are sorted.
    Needs keep < columns."""
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


def keys_below(seed: int, doc_ends: np.ndarray, thresholds: np.ndarray, low: int,
               high: int) -> tuple[np.ndarray, np.ndarray]:
    """The keys of pair numbers [low, high), i.e. draws low..high-1 of default_rng(seed) (a PCG64
    advanced to draw `low` continues the stream exactly), that fall below their document's
    threshold, as (numbers, keys)."""
    generator = np.random.Generator(np.random.PCG64(seed))
    generator.bit_generator.advance(low)
    drawn = generator.random(high - low)
    first_doc, last_doc = np.searchsorted(doc_ends, [low, high - 1], side="right")
    if np.isinf(thresholds[first_doc:last_doc + 1]).all():  # documents that keep every key as a candidate
        below = np.arange(high - low)
    elif first_doc == last_doc:
        below = np.flatnonzero(drawn < thresholds[first_doc])
    else:
        spans = np.minimum(doc_ends[first_doc:last_doc + 1], high) - \
            np.maximum(np.r_[low, doc_ends[first_doc:last_doc]], low)
        below = np.flatnonzero(drawn < np.repeat(thresholds[first_doc:last_doc + 1], spans))
    return below + low, drawn[below]


def candidate_keys(seed: int, doc_ends: np.ndarray, thresholds: np.ndarray, start: int, stop: int,
                   chunk: int) -> tuple[np.ndarray, np.ndarray]:
    """`keys_below` over [start, stop), `chunk` keys at a time, chunks spread over torch's thread
    count (numpy draws and compares without the GIL), in order."""
    spans = [(low, min(stop, low + chunk)) for low in range(start, stop, chunk)]
    with ThreadPoolExecutor(max(1, min(torch.get_num_threads(), len(spans)))) as pool:
        parts = list(pool.map(lambda span: keys_below(seed, doc_ends, thresholds, *span), spans))
    return (np.concatenate([np.empty(0, np.int64)] + [numbers for numbers, _ in parts]),
            np.concatenate([np.empty(0)] + [keys for _, keys in parts]))


def smallest_per_group(keys: np.ndarray, group_sizes: np.ndarray, keep: int) -> np.ndarray:
    """Mask of the `keep` smallest keys of each group (groups are consecutive runs), ties to the
    earlier entry (a stable sort's choice): each group's keep-th smallest key by partial selection
    in a padded grid of groups, a few groups at a time."""
    mask = np.ones(len(keys), bool)
    if not len(group_sizes) or group_sizes.max() <= keep:
        return mask
    ends = np.cumsum(group_sizes)
    per_grid = max(1, GRID_ENTRIES // int(group_sizes.max()))
    for low in range(0, len(group_sizes), per_grid):
        sizes = group_sizes[low:low + per_grid]
        first, last = int(ends[low] - group_sizes[low]), int(ends[low + len(sizes) - 1])
        starts = np.cumsum(sizes) - sizes
        row = np.repeat(np.arange(len(sizes)), sizes)
        part = keys[first:last]
        grid = np.full((len(sizes), int(sizes.max())), np.inf)
        grid[row, np.arange(len(part)) - starts[row]] = part
        cutoff = np.partition(grid, keep - 1, axis=1)[:, keep - 1] if grid.shape[1] > keep else grid.max(axis=1)
        below = part < cutoff[row]
        room = keep - np.add.reduceat(below, starts).astype(np.int64)
        equal = np.flatnonzero(part == cutoff[row])  # usually the keep-th key alone; more on a tie
        equal_rank = np.arange(len(equal)) - np.searchsorted(row[equal], row[equal], side="left")
        below[equal[equal_rank < room[row[equal]]]] = True
        mask[first:last] = below
    return mask


def kept_pair_numbers(doc_pairs: np.ndarray, budget: Budget, seed: int, chunk: int = KEY_CHUNK,
                      margin: float = 6.0) -> np.ndarray | None:
    """Numbers of the pairs the budget keeps (None: all), given each document's pair count: the
    same pairs as `infocse.pairs.cap_pairs` over all pairs in order (one key per pair from
    default_rng(seed); per document the `max_pairs_per_document` smallest keys; then
    `max_pairs` chosen uniformly by the same generator), in memory O(documents x cap + chunk).
    A document's smallest keys lie below a threshold that keeps about cap + margin * sqrt(cap) + 10
    of its keys; in the rare document where fewer fall below it, its keys are drawn again (the
    generator jumps to them) with a higher one."""
    rng = np.random.default_rng(seed)
    total = int(doc_pairs.sum())
    kept = None
    cap = budget.max_pairs_per_document
    if cap is not None and total:
        rng.bit_generator.advance(total)  # where drawing every key one after another would leave it
        doc_ends = np.cumsum(doc_pairs)
        expected = cap + margin * math.sqrt(cap) + 10
        thresholds = np.where(doc_pairs <= expected, np.inf, expected / np.maximum(doc_pairs, 1))
        numbers, keys = candidate_keys(seed, doc_ends, thresholds, 0, total, chunk)
        found = np.diff(np.searchsorted(numbers, np.r_[0, doc_ends]))
        short = np.flatnonzero(found < np.minimum(cap, doc_pairs))
        if len(short):
            numbers, keys = redraw_short_documents(seed, doc_ends, doc_pairs, thresholds, short, cap, numbers, keys,
                                                   chunk)
            found = np.diff(np.searchsorted(numbers, np.r_[0, doc_ends]))
        kept = numbers[smallest_per_group(keys, found[found > 0], cap)]
    if budget.max_pairs is not None:
        available = total if kept is None else len(kept)
        if available > budget.max_pairs:
            chosen = rng.choice(available, size=budget.max_pairs, replace=False)
            kept = np.sort(chosen if kept is None else kept[chosen])
    return kept


def redraw_short_documents(seed: int, doc_ends: np.ndarray, doc_pairs: np.ndarray, thresholds: np.ndarray,
                           short: np.ndarray, cap: int, numbers: np.ndarray, keys: np.ndarray,
                           chunk: int) -> tuple[np.ndarray, np.ndarray]:
    """The candidates again, with each short document's keys redrawn under a threshold raised
    until it holds `cap` of them."""
    doc_of = np.searchsorted(doc_ends, numbers, side="right")
    drop = np.isin(doc_of, short)
    numbers, keys = [numbers[~drop]], [keys[~drop]]
    for doc in short.tolist():
        start, stop, threshold = int(doc_ends[doc] - doc_pairs[doc]), int(doc_ends[doc]), float(thresholds[doc])
        while True:
            threshold = threshold * 4
            found_numbers, found_keys = candidate_keys(seed, doc_ends, np.full(len(doc_ends), threshold),
                                                       start, stop, chunk)
            if len(found_numbers) >= min(cap, stop - start):
                break
        numbers.append(found_numbers)
        keys.append(found_keys)
    numbers, keys = np.concatenate(numbers), np.concatenate(keys)
    order = np.argsort(numbers, kind="stable")
    return numbers[order], keys[order]


def cluster_pairs(labels: np.ndarray, doc_codes: np.ndarray, budget: Budget, seed: int,
                  chunk: int = KEY_CHUNK) -> tuple[np.ndarray, np.ndarray]:
    """(first, second) of the positives the budget keeps, in (first, second) order: exactly
    `cap_pairs(doc_codes[first], budget, seed)` applied to `intra_cluster_pairs(labels)`, with
    only the kept pairs ever built (all of them when nothing caps them)."""
    pairs = ClusterPairs(labels)
    numbers = kept_pair_numbers(pairs.per_document(document_offsets(doc_codes)), budget, seed, chunk)
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
    labels = mine_clusters(idc, embeddings, doc_codes, seed)
    first, second = cluster_pairs(labels, doc_codes, budget, seed)
    seconds = time.perf_counter() - started
    pairs, stats = idc_pair_table(sentences, labels, first, second, doc_codes)
    stats["idc_seconds"] = seconds  # clustering and the kept pairs, without reading or writing tables
    return pairs, stats

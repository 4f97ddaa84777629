"""IDC (infocse/idc.py, infocse/pairs.py): per-document top-K graph, connected components,
intra-cluster pairs and their budget caps, checked against a plain networkx re-implementation,
the straightforward materialise-then-cap reference, and hand-worked examples."""

from __future__ import annotations

import itertools
import tracemalloc

import networkx as nx
import numpy as np
import pandas as pd
import pytest
from conftest import config_with

from infocse.config import Budget
from infocse.errors import StageError
from infocse.idc import (
    cluster_labels,
    cluster_pairs,
    cluster_sentences,
    idc_pair_table,
    intra_cluster_pairs,
    kmeans_document_labels,
    partition_idc,
    top_k_neighbours,
)
from infocse.pairs import PAIR_COLUMNS, cap_pairs, cluster_statistics, document_offsets, kept_pair_numbers, token_jaccard


# ---------------------------------------------------------------- oracles
def oracle_edges(embeddings: np.ndarray, doc_codes: np.ndarray, k: int) -> set[tuple[int, int]]:
    """Directed edges i -> j: j among i's k most cosine-similar other sentences of i's document
    (ties to the lower index), computed one sentence at a time in float64."""
    vectors = np.asarray(embeddings, dtype=np.float64)
    edges = set()
    for doc in np.unique(doc_codes):
        members = np.flatnonzero(doc_codes == doc).tolist()
        for i in members:
            others = [j for j in members if j != i]
            cosine = {j: vectors[i] @ vectors[j] / (np.linalg.norm(vectors[i]) * np.linalg.norm(vectors[j]))
                      for j in others}
            for j in sorted(others, key=lambda j: (-cosine[j], j))[:k]:
                edges.add((i, j))
    return edges


def budget(per_document, total) -> Budget:
    return Budget(max_pairs_per_document=per_document, max_pairs=total)


def oracle_clusters(n: int, edges: set[tuple[int, int]]) -> tuple[set[frozenset[int]], set[tuple[int, int]]]:
    """Components of the undirected graph and every unordered pair (a < b) inside one."""
    graph = nx.Graph()
    graph.add_nodes_from(range(n))
    graph.add_edges_from(edges)
    components = {frozenset(c) for c in nx.connected_components(graph)}
    pairs = {(a, b) for c in components for a, b in itertools.combinations(sorted(c), 2)}
    return components, pairs


def reference_intra_cluster_pairs(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The straightforward version: every pair of every cluster built, then sorted by (first, second)."""
    order = np.argsort(labels, kind="stable")
    sizes = np.bincount(labels)
    starts = np.r_[0, np.cumsum(sizes)[:-1]]
    firsts, seconds = [np.empty(0, np.int64)], [np.empty(0, np.int64)]
    for size in np.unique(sizes[sizes >= 2]):
        members = order[starts[np.flatnonzero(sizes == size), None] + np.arange(size)]
        upper_i, upper_j = np.triu_indices(size, 1)
        firsts.append(members[:, upper_i].ravel())
        seconds.append(members[:, upper_j].ravel())
    first, second = np.concatenate(firsts), np.concatenate(seconds)
    keep = np.lexsort((second, first))
    return first[keep], second[keep]


def reference_capped_pairs(labels: np.ndarray, doc_codes: np.ndarray, budget: Budget,
                           seed: int) -> tuple[np.ndarray, np.ndarray]:
    """All pairs built, then capped by `cap_pairs`, the annotators' budget."""
    first, second = reference_intra_cluster_pairs(labels)
    kept = cap_pairs(doc_codes[first], budget, seed)
    return first[kept], second[kept]


def reference_cluster_statistics(labels: np.ndarray, first: np.ndarray, doc_codes: np.ndarray) -> dict:
    """The statistics as computed from the materialised pairs."""
    sizes = np.bincount(labels)
    clustered = sizes[sizes >= 2]
    per_doc = np.sort(np.bincount(doc_codes[first], minlength=doc_codes.max() + 1))[::-1]
    top_tenth = per_doc[: max(1, int(np.ceil(len(per_doc) * 0.1)))].sum()
    return {"sentences": len(labels), "clusters": len(clustered), "singletons": int((sizes == 1).sum()),
            "mean_cluster_size": float(clustered.mean()) if len(clustered) else 0.0,
            "max_cluster_size": int(clustered.max()) if len(clustered) else 0, "pairs_mined": len(first),
            "share_of_pairs_from_top_10pct_documents": float(top_tenth / len(first)) if len(first) else 0.0}


def partition(labels: np.ndarray) -> set[frozenset[int]]:
    groups: dict[int, set[int]] = {}
    for index, label in enumerate(labels.tolist()):
        groups.setdefault(label, set()).add(index)
    return {frozenset(g) for g in groups.values()}


def random_corpus(seed: int, sizes: list[int], dim: int = 8) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    doc_codes = np.repeat(np.arange(len(sizes)), sizes)
    vectors = rng.normal(size=(len(doc_codes), dim))
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32), doc_codes


def directed_edges(embeddings: np.ndarray, doc_codes: np.ndarray, k: int, block_rows: int) -> list[tuple[int, int]]:
    """The top-K neighbours as directed edges (a row's padding with itself is no edge)."""
    neighbours = top_k_neighbours(embeddings, document_offsets(doc_codes), k, block_rows)
    return [(i, j) for i, row in enumerate(neighbours.tolist()) for j in row if j != i]


# ---------------------------------------------------------------- partition IDC vs the networkx oracle
@pytest.mark.parametrize("block_rows", [4096, 7])
@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("seed", [0, 1])
def test_partition_idc_matches_networkx_oracle(k, seed, block_rows):
    """Pairs and clusters equal the networkx oracle on many documents of 1..30 sentences, with
    documents stacked whole (block_rows 4096) or most of them split into blocks of 7 rows."""
    rng = np.random.default_rng(100 + seed)
    sizes = [1, 1, 2, 3, 30] + rng.integers(1, 31, size=45).tolist()
    embeddings, doc_codes = random_corpus(seed, sizes)
    labels = partition_idc(embeddings, doc_codes, k, block_rows)
    first, second = intra_cluster_pairs(labels)

    components, expected_pairs = oracle_clusters(len(doc_codes), oracle_edges(embeddings, doc_codes, k))
    pairs = list(zip(first.tolist(), second.tolist()))
    assert len(pairs) == len(set(pairs)), "a pair was emitted twice"
    assert set(pairs) == expected_pairs
    assert partition(labels) == components
    assert len(labels) == len(doc_codes)
    assert all(a < b for a, b in pairs)
    assert pairs == sorted(pairs)
    assert all(doc_codes[a] == doc_codes[b] for a, b in pairs)
    assert labels.tolist() == cluster_labels_by_lowest_row(labels)


def cluster_labels_by_lowest_row(labels: np.ndarray) -> list[int]:
    """Labels renumbered 0, 1, ... in order of each cluster's lowest row (the numbering the Ray
    engine relies on when it shifts partitions' labels)."""
    seen: dict[int, int] = {}
    return [seen.setdefault(label, len(seen)) for label in labels.tolist()]


@pytest.fixture(params=[1, 3], ids=lambda threads: f"{threads}-threads")
def torch_threads(request):
    """IDC split over this many threads (torch's count), restored afterwards."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    assert torch.get_num_threads() == request.param, "IDC left torch's thread count changed"
    torch.set_num_threads(threads)


@pytest.mark.parametrize("block_rows", [1, 5, 4096])
@pytest.mark.parametrize("k", [1, 2, 3, 7])
def test_top_k_neighbours_match_oracle_directed_edges(k, block_rows, torch_threads):
    """The directed top-k edges equal the oracle's, one sentence at a time, for any block size and
    thread count (documents of 17 and 30 sentences are multiplied in chunks of rows)."""
    embeddings, doc_codes = random_corpus(7, [1, 2, 3, 4, 9, 17, 30, 5, 1, 12, 16, 46])
    edges = directed_edges(embeddings, doc_codes, k, block_rows)
    assert len(edges) == len(set(edges))
    assert set(edges) == oracle_edges(embeddings, doc_codes, k)


@pytest.mark.parametrize("k", [4, 5, 50])
def test_k_at_least_document_size_minus_one_gives_one_cluster_per_document(k):
    """With k >= size - 1 every document is one cluster holding all of its sentence pairs."""
    sizes = [5, 1, 3, 5, 2]
    embeddings, doc_codes = random_corpus(3, sizes)
    labels = partition_idc(embeddings, doc_codes, k, 4096)
    first, second = intra_cluster_pairs(labels)
    offsets = np.r_[0, np.cumsum(sizes)]
    expected_partition = {frozenset(range(offsets[d], offsets[d + 1])) for d in range(len(sizes))}
    expected_pairs = {pair for d in range(len(sizes))
                      for pair in itertools.combinations(range(offsets[d], offsets[d + 1]), 2)}
    assert partition(labels) == expected_partition
    assert set(zip(first.tolist(), second.tolist())) == expected_pairs
    assert len(first) == sum(s * (s - 1) // 2 for s in sizes)


def test_block_rows_never_change_the_clusters(torch_threads):
    """Long documents cut into blocks of 1, 2, 5, 64 rows give the labels of whole documents, on
    one thread or several."""
    embeddings, doc_codes = random_corpus(21, [200, 3, 70, 1, 129, 40], dim=16)
    expected = partition_idc(embeddings, doc_codes, 2, 4096)
    for block_rows in (1, 2, 5, 64):
        assert np.array_equal(partition_idc(embeddings, doc_codes, 2, block_rows), expected)


# ---------------------------------------------------------------- hand-worked
def unit(degrees: float) -> list[float]:
    return [np.cos(np.radians(degrees)), np.sin(np.radians(degrees))]


@pytest.mark.parametrize("block_rows", [1, 4096])
def test_hand_worked_clusters_and_pairs(block_rows):
    """Angles worked by hand: doc A (0,10,90,100,200 deg) -> {0,1},{2,3,4}; doc B (0,5,180) -> one
    cluster; doc C (one sentence) a singleton; B's 0-deg vector equals A's yet never links to it."""
    embeddings = np.array([unit(a) for a in (0, 10, 90, 100, 200, 0, 5, 180, 45)], dtype=np.float32)
    doc_codes = np.array([0, 0, 0, 0, 0, 1, 1, 1, 2])
    labels = partition_idc(embeddings, doc_codes, 1, block_rows)
    first, second = intra_cluster_pairs(labels)
    assert partition(labels) == {frozenset({0, 1}), frozenset({2, 3, 4}), frozenset({5, 6, 7}), frozenset({8})}
    assert list(zip(first.tolist(), second.tolist())) == [(0, 1), (2, 3), (2, 4), (3, 4), (5, 6), (5, 7), (6, 7)]
    assert sorted(directed_edges(embeddings, doc_codes, 1, block_rows)) == [(0, 1), (1, 0), (2, 3), (3, 2), (4, 3),
                                                                           (5, 6), (6, 5), (7, 6)]


@pytest.mark.parametrize("block_rows", [1, 4096])
def test_top_k_ties_go_to_the_lower_index(block_rows):
    """Exact similarity ties pick the earlier sentence, for k = 1 and 2 (row 0 ties at the 2nd place)."""
    embeddings = np.array([[0, 1], [1, 0], [0, 1], [-1, 0]], dtype=np.float32)
    doc_codes = np.zeros(4, dtype=np.int64)
    assert sorted(directed_edges(embeddings, doc_codes, 1, block_rows)) == [(0, 2), (1, 0), (2, 0), (3, 0)]
    assert sorted(directed_edges(embeddings, doc_codes, 2, block_rows)) == [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0),
                                                                           (2, 1), (3, 0), (3, 2)]


@pytest.mark.parametrize("block_rows", [1, 3, 4096])
@pytest.mark.parametrize("k", [1, 2, 3, 4, 6, 8])
def test_many_exact_ties_follow_the_oracle(k, block_rows):
    """Sentences that repeat three directions exactly (similarities exactly 1, 0 or -1, so ties are
    real in float32): every row's choice among equal similarities is the oracle's lowest index."""
    rng = np.random.default_rng(k)
    directions = np.array([[1, 0, 0], [0, 1, 0], [-1, 0, 0]], dtype=np.float32)
    embeddings = directions[rng.integers(0, 3, size=40)]
    doc_codes = np.repeat([0, 1, 2], [25, 6, 9])
    assert set(directed_edges(embeddings, doc_codes, k, block_rows)) == oracle_edges(embeddings, doc_codes, k)


def test_top_k_neighbours_stay_inside_documents_and_exclude_self():
    """Identical vectors across documents and duplicates inside one never yield cross-document or self edges."""
    base = random_corpus(5, [6])[0]
    embeddings = np.concatenate([base, base, base[:1], base[:3]])  # docs 0 and 1 identical, doc 3 repeats doc 2
    doc_codes = np.repeat([0, 1, 2, 3], [6, 6, 1, 3])
    for k in (1, 2, 3, 10):
        for block_rows in (1, 4096):
            edges = np.array(directed_edges(embeddings, doc_codes, k, block_rows))
            sources, targets = edges[:, 0], edges[:, 1]
            assert np.all(doc_codes[sources] == doc_codes[targets])
            assert np.all(sources != targets)
            out_degree = np.bincount(sources, minlength=len(doc_codes))
            sizes = np.bincount(doc_codes)[doc_codes]
            assert out_degree.tolist() == np.minimum(k, sizes - 1).tolist()


def test_cluster_labels_of_a_hand_made_neighbour_table():
    """Components of i - neighbours[i], undirected, numbered by lowest row; padding (i itself) links nothing."""
    neighbours = np.array([[3, 0], [1, 1], [4, 2], [0, 3], [2, 4], [5, 5]])
    assert cluster_labels(neighbours).tolist() == [0, 1, 2, 0, 2, 3]


# ---------------------------------------------------------------- budget caps while pairs are generated
BUDGETS = [budget(20, 2560), budget(3, 15), budget(1, None), budget(None, 7), budget(None, None),
           budget(5, 100_000), budget(1_000_000, 3)]


@pytest.mark.parametrize("corpus_seed", [0, 1, 2])
def test_cluster_pairs_equal_materialise_then_cap(corpus_seed):
    """Capped pairs built from their numbers equal all pairs built and then capped by `cap_pairs`,
    on random corpora (K 1-4, documents up to 90 sentences), for several budgets and seeds."""
    rng = np.random.default_rng(corpus_seed)
    sizes = rng.integers(1, 91, size=30).tolist()
    embeddings, doc_codes = random_corpus(corpus_seed, sizes)
    labels = partition_idc(embeddings, doc_codes, int(rng.integers(1, 5)), 4096)
    for budget in BUDGETS:
        for seed in (0, 11):
            expected_first, expected_second = reference_capped_pairs(labels, doc_codes, budget, seed)
            first, second = cluster_pairs(labels, doc_codes, budget, seed)
            assert np.array_equal(first, expected_first) and np.array_equal(second, expected_second), (budget, seed)


def test_budget_draws_every_pair_with_equal_chance():
    """Over 4,000 seeds, a document of 10 pairs capped at 3 keeps each pair 30% of the time (the
    cap is a uniform sample, not the first pairs), and a total cap of 4 over documents of 10 and
    2 pairs (3 + 2 after the per-document cap) keeps each of those 5 pairs 80% of the time."""
    doc_pairs = np.array([10, 2])
    per_document = np.zeros(12)
    both = np.zeros(12)
    for seed in range(4000):
        per_document[kept_pair_numbers(doc_pairs, budget(3, None), seed)] += 1
        both[kept_pair_numbers(doc_pairs, budget(3, 4), seed)] += 1
    assert np.all(np.abs(per_document[:10] / 4000 - 0.3) < 0.03) and np.all(per_document[10:] == 4000)
    assert np.all(np.abs(both[:10] / 4000 - 0.3 * 0.8) < 0.03)
    assert np.all(np.abs(both[10:] / 4000 - 0.8) < 0.03)
    assert both.sum() == 4 * 4000


def test_a_huge_cluster_is_capped_without_building_its_pairs():
    """One document of 5,000 sentences in one cluster (12.5M pairs): the default caps keep 20
    distinct pairs of it while holding a few MB; each kept pair number maps to the pair of that
    number in (first, second) order, worked out by hand."""
    n, seed, caps = 5000, 3, budget(20, 2560)
    labels, doc_codes = np.zeros(n, np.int64), np.zeros(n, np.int64)
    tracemalloc.start()
    first, second = cluster_pairs(labels, doc_codes, caps, seed)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 40e6, f"{peak / 1e6:.0f} MB traced; all pairs would take {n * (n - 1) / 2 * 16 / 1e6:.0f} MB"
    numbers = kept_pair_numbers(np.array([n * (n - 1) // 2]), caps, seed)
    assert len(numbers) == 20 and len(np.unique(numbers)) == 20
    row_starts = np.r_[0, np.cumsum(np.arange(n - 1, 0, -1))]  # pair number of (i, i + 1) in (first, second) order
    expected_first = np.searchsorted(row_starts, numbers, side="right") - 1
    assert first.tolist() == expected_first.tolist()
    assert second.tolist() == (expected_first + 1 + numbers - row_starts[expected_first]).tolist()


def test_cluster_statistics_from_cluster_sizes_equal_those_of_the_pairs():
    """Pairs mined and their concentration, computed from cluster sizes, equal the counts of the built pairs."""
    for seed in range(4):
        sizes = np.random.default_rng(seed).integers(1, 40, size=33).tolist()
        embeddings, doc_codes = random_corpus(seed, sizes)
        labels = partition_idc(embeddings, doc_codes, 1 + seed % 3, 4096)
        first, _ = reference_intra_cluster_pairs(labels)
        assert cluster_statistics(labels, doc_codes) == reference_cluster_statistics(labels, first, doc_codes)


def test_intra_cluster_pairs_equal_the_reference():
    """All pairs of any labelling (not only components numbered by lowest row), in (first, second) order."""
    labels = np.random.default_rng(2).integers(0, 30, size=300)
    for got, expected in zip(intra_cluster_pairs(labels), reference_intra_cluster_pairs(labels)):
        assert np.array_equal(got, expected)


# ---------------------------------------------------------------- cap_pairs (the annotators' budget)
@pytest.fixture(scope="module")
def many_pairs():
    embeddings, doc_codes = random_corpus(11, [30, 25, 20, 12, 8, 4, 2, 1, 30, 30])
    first, second = intra_cluster_pairs(partition_idc(embeddings, doc_codes, 3, 4096))
    return first, second, doc_codes


def test_cap_pairs_per_document(many_pairs):
    """Each document keeps min(per_doc, its pairs) pairs when there is no total cap."""
    first, second, doc_codes = many_pairs
    available = np.bincount(doc_codes[first], minlength=doc_codes.max() + 1)
    assert available.max() > 5, "fixture must give documents more pairs than the cap"
    kept = cap_pairs(doc_codes[first], budget(5, None), seed=0)
    assert len(np.unique(kept)) == len(kept) and kept.min() >= 0 and kept.max() < len(first)
    assert np.all(np.diff(kept) > 0)
    per_doc = np.bincount(doc_codes[first[kept]], minlength=doc_codes.max() + 1)
    assert per_doc.tolist() == np.minimum(available, 5).tolist()


def test_cap_pairs_total_and_per_document(many_pairs):
    """Both caps hold together: <= per_doc per document and exactly `total` when more are available."""
    first, second, doc_codes = many_pairs
    kept = cap_pairs(doc_codes[first], budget(6, 20), seed=0)
    assert len(kept) == 20
    assert np.bincount(doc_codes[first[kept]]).max() <= 6
    kept_total_only = cap_pairs(doc_codes[first], budget(None, 17), seed=3)
    assert len(kept_total_only) == 17 and len(np.unique(kept_total_only)) == 17


def test_cap_pairs_seeded(many_pairs):
    """Same seed -> same pairs; another seed -> other pairs (on a case with many choices)."""
    first, second, doc_codes = many_pairs
    codes = doc_codes[first]
    a, b, c = (cap_pairs(codes, budget(4, 15), seed=s) for s in (0, 0, 1))
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)
    assert not np.array_equal(cap_pairs(codes, budget(4, None), seed=0), cap_pairs(codes, budget(4, None), seed=1))


def test_cap_pairs_none_means_no_cap(many_pairs):
    """per_doc=None and total=None keep every pair, in order."""
    first, second, doc_codes = many_pairs
    assert cap_pairs(doc_codes[first], budget(None, None), seed=0).tolist() == list(range(len(first)))
    assert cap_pairs(doc_codes[first], budget(10_000, 10_000), seed=0).tolist() == list(range(len(first)))


# ---------------------------------------------------------------- small helpers
@pytest.mark.parametrize("a, b, expected", [
    ("The cat sat.", "the cat ran", 2 / 4),
    ("Hello, hello!", "HELLO", 1.0),
    ("a b", "c d", 0.0),
    ("", "", 0.0),
    ("one two three", "three four", 1 / 4),
    ("it's fine", "it s FINE", 1.0),
])
def test_token_jaccard(a, b, expected):
    """Jaccard of lower-cased \\w+ token sets, 0 for two empty strings."""
    assert token_jaccard(a, b) == pytest.approx(expected)


def test_idc_pair_table_columns_and_values():
    """Columns are PAIR_COLUMNS; rows map positions to sentence ids, texts, doc and cluster."""
    sentences = pd.DataFrame({"sentence_id": [100, 101, 102, 103], "doc_id": ["x", "x", "x", "y"],
                              "position": [0, 1, 2, 0], "text": ["s0", "s1", "s2", "s3"]})
    labels, doc_codes = np.array([0, 0, 1, 2]), np.array([0, 0, 0, 1])
    table, stats = idc_pair_table(sentences, labels, np.array([0]), np.array([1]), doc_codes)
    assert list(table.columns) == PAIR_COLUMNS
    assert table.to_dict("records") == [{"doc_id": "x", "sentence_a": 100, "sentence_b": 101, "cluster": 0,
                                         "text_a": "s0", "text_b": "s1"}]
    assert stats["pairs"] == 1 and stats["pairs_mined"] == 1 and stats["clusters"] == 1 and stats["singletons"] == 2
    empty, _ = idc_pair_table(sentences, labels, np.empty(0, np.int64), np.empty(0, np.int64), doc_codes)
    assert list(empty.columns) == PAIR_COLUMNS and empty.empty


# ---------------------------------------------------------------- errors
@pytest.mark.parametrize("k", [0, -1])
def test_top_k_neighbours_reject_k_below_one(k):
    """K < 1 is a StageError."""
    embeddings, doc_codes = random_corpus(0, [3, 2])
    with pytest.raises(StageError, match="K must be >= 1"):
        top_k_neighbours(embeddings, document_offsets(doc_codes), k, 4096)


def test_document_offsets():
    """Offsets of grouped codes; ungrouped codes are a StageError."""
    assert document_offsets(np.array([0, 0, 1, 1, 1, 2])).tolist() == [0, 2, 5, 6]
    assert document_offsets(np.array([], dtype=np.int64)).tolist() == [0]
    with pytest.raises(StageError, match="grouped by document"):
        document_offsets(np.array([0, 1, 0]))
    with pytest.raises(StageError, match="grouped by document"):
        partition_idc(random_corpus(0, [3])[0], np.array([0, 1, 0]), 1, 4096)


# ---------------------------------------------------------------- K-means IDC
def test_kmeans_idc_groups_each_documents_sentences_by_global_cluster():
    """Three well-separated global groups (directions e0, e1, e2 plus small noise); each document
    mixes them. K-means with 3 clusters must recover the groups, and a document's cluster is the
    set of its sentences in one group -- never a sentence of another document."""
    rng = np.random.default_rng(0)
    group = np.array([0, 0, 1, 2, 1, 1, 0, 2, 2, 2, 0, 1])
    doc_codes = np.array([0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 2])
    embeddings = np.eye(3)[group] + rng.normal(scale=0.01, size=(len(group), 3))
    labels = kmeans_document_labels(embeddings.astype(np.float32), doc_codes, clusters=3, seed=0)
    first, second = intra_cluster_pairs(labels)
    expected = {frozenset(np.flatnonzero((doc_codes == d) & (group == g)).tolist())
                for d in range(3) for g in range(3) if ((doc_codes == d) & (group == g)).any()}
    assert partition(labels) == expected
    pairs = set(zip(first.tolist(), second.tolist()))
    assert pairs == {(a, b) for members in expected for a, b in itertools.combinations(sorted(members), 2)}
    assert (0, 1) in pairs and (7, 8) in pairs and (0, 6) not in pairs  # 0 and 6 share a group, not a document


def test_kmeans_idc_is_seeded_and_checks_its_input():
    embeddings = np.random.default_rng(1).normal(size=(40, 8)).astype(np.float32)
    doc_codes = np.repeat(np.arange(8), 5)
    first_run = kmeans_document_labels(embeddings, doc_codes, 4, seed=3)
    assert np.array_equal(first_run, kmeans_document_labels(embeddings, doc_codes, 4, seed=3))
    with pytest.raises(StageError, match="at least 50 sentences"):
        kmeans_document_labels(embeddings, doc_codes, 50, seed=0)


# ---------------------------------------------------------------- the stage's function
def test_cluster_sentences_dispatches_on_method_and_applies_the_budget():
    sentences = pd.DataFrame({"sentence_id": np.arange(12), "doc_id": [f"d{i // 4}" for i in range(12)],
                              "position": np.tile(np.arange(4), 3), "text": [f"sentence {i}" for i in range(12)]})
    embeddings = np.eye(4, dtype=np.float32)[np.array([0, 0, 1, 1] * 3)]
    config = config_with({"idc": {"method": "kmeans", "k": 1, "kmeans_clusters": 2},
                          "budget": {"max_pairs_per_document": "all", "max_pairs": "all"}})
    pairs, stats = cluster_sentences(config.idc, config.budget, config.seed, sentences, embeddings)
    assert list(pairs.columns) == PAIR_COLUMNS and len(pairs) == 6 and stats["clusters"] == 6
    assert stats["pairs_mined"] == 6 and stats["pairs"] == 6
    capped = cluster_sentences(config.idc, budget(1, 2), config.seed, sentences, embeddings)
    assert len(capped[0]) == 2 and capped[1]["pairs_mined"] == 6
    partition_config = config.idc.model_copy(update=dict(method="partition", k=1))
    pairs, stats = cluster_sentences(partition_config, config.budget, config.seed, sentences, embeddings)
    assert len(pairs) == 6 and stats["clusters"] == 6  # the top-1 of each sentence is its duplicate
    with pytest.raises(StageError, match="3 embeddings for 12 sentences"):
        cluster_sentences(config.idc, config.budget, config.seed, sentences, embeddings[:3])

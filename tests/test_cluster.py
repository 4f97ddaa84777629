"""IDC (stages/cluster.py): per-document top-K graph, connected components, intra-cluster pairs,
checked against a plain networkx re-implementation and hand-worked examples."""

from __future__ import annotations

import itertools

import networkx as nx
import numpy as np
import pandas as pd
import pytest

from stages.cluster import (
    PAIR_COLUMNS,
    build_pair_table,
    cap_pairs,
    cluster_iteration,
    document_offsets,
    kmeans_document_labels,
    mine_kmeans_pairs,
    mine_positive_pairs,
    token_jaccard,
    top_k_edges,
)
from stages.common import StageError


# ---------------------------------------------------------------- oracle
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


def oracle_clusters(n: int, edges: set[tuple[int, int]]) -> tuple[set[frozenset[int]], set[tuple[int, int]]]:
    """Components of the undirected graph and every unordered pair (a < b) inside one."""
    graph = nx.Graph()
    graph.add_nodes_from(range(n))
    graph.add_edges_from(edges)
    components = {frozenset(c) for c in nx.connected_components(graph)}
    pairs = {(a, b) for c in components for a, b in itertools.combinations(sorted(c), 2)}
    return components, pairs


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


# ---------------------------------------------------------------- mine_positive_pairs vs oracle
@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("seed", [0, 1])
def test_mine_positive_pairs_matches_networkx_oracle(k, seed):
    """Pairs and clusters equal the networkx oracle on many documents of 1..30 sentences."""
    rng = np.random.default_rng(100 + seed)
    sizes = [1, 1, 2, 3, 30] + rng.integers(1, 31, size=45).tolist()
    embeddings, doc_codes = random_corpus(seed, sizes)
    labels, first, second = mine_positive_pairs(embeddings, doc_codes, k)

    components, expected_pairs = oracle_clusters(len(doc_codes), oracle_edges(embeddings, doc_codes, k))
    pairs = list(zip(first.tolist(), second.tolist()))
    assert len(pairs) == len(set(pairs)), "a pair was emitted twice"
    assert set(pairs) == expected_pairs
    assert partition(labels) == components
    assert len(labels) == len(doc_codes)
    assert all(a < b for a, b in pairs)
    assert pairs == sorted(pairs)
    assert all(doc_codes[a] == doc_codes[b] for a, b in pairs)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_top_k_edges_matches_oracle_directed_edges(k):
    """The directed top-k edges equal the oracle's, one sentence at a time."""
    embeddings, doc_codes = random_corpus(7, [1, 2, 3, 4, 9, 17, 30, 5, 1, 12])
    sources, targets = top_k_edges(embeddings, document_offsets(doc_codes), k)
    edges = list(zip(sources.tolist(), targets.tolist()))
    assert len(edges) == len(set(edges))
    assert set(edges) == oracle_edges(embeddings, doc_codes, k)


@pytest.mark.parametrize("k", [4, 5, 50])
def test_k_at_least_document_size_minus_one_gives_one_cluster_per_document(k):
    """With k >= size - 1 every document is one cluster holding all of its sentence pairs."""
    sizes = [5, 1, 3, 5, 2]
    embeddings, doc_codes = random_corpus(3, sizes)
    labels, first, second = mine_positive_pairs(embeddings, doc_codes, k)
    offsets = np.r_[0, np.cumsum(sizes)]
    expected_partition = {frozenset(range(offsets[d], offsets[d + 1])) for d in range(len(sizes))}
    expected_pairs = {pair for d in range(len(sizes))
                      for pair in itertools.combinations(range(offsets[d], offsets[d + 1]), 2)}
    assert partition(labels) == expected_partition
    assert set(zip(first.tolist(), second.tolist())) == expected_pairs
    assert len(first) == sum(s * (s - 1) // 2 for s in sizes)


# ---------------------------------------------------------------- hand-worked
def unit(degrees: float) -> list[float]:
    return [np.cos(np.radians(degrees)), np.sin(np.radians(degrees))]


def test_hand_worked_clusters_and_pairs():
    """Angles worked by hand: doc A (0,10,90,100,200 deg) -> {0,1},{2,3,4}; doc B (0,5,180) -> one
    cluster; doc C (one sentence) a singleton; B's 0-deg vector equals A's yet never links to it."""
    embeddings = np.array([unit(a) for a in (0, 10, 90, 100, 200, 0, 5, 180, 45)], dtype=np.float32)
    doc_codes = np.array([0, 0, 0, 0, 0, 1, 1, 1, 2])
    labels, first, second = mine_positive_pairs(embeddings, doc_codes, 1)
    assert partition(labels) == {frozenset({0, 1}), frozenset({2, 3, 4}), frozenset({5, 6, 7}), frozenset({8})}
    assert list(zip(first.tolist(), second.tolist())) == [(0, 1), (2, 3), (2, 4), (3, 4), (5, 6), (5, 7), (6, 7)]
    sources, targets = top_k_edges(embeddings, document_offsets(doc_codes), 1)
    assert sorted(zip(sources.tolist(), targets.tolist())) == [(0, 1), (1, 0), (2, 3), (3, 2), (4, 3),
                                                               (5, 6), (6, 5), (7, 6)]


def test_top_k_ties_go_to_the_lower_index():
    """Exact similarity ties pick the earlier sentence, for k = 1 and 2."""
    embeddings = np.array([[0, 1], [1, 0], [0, 1], [-1, 0]], dtype=np.float32)
    offsets = document_offsets(np.zeros(4, dtype=np.int64))
    sources, targets = top_k_edges(embeddings, offsets, 1)
    assert sorted(zip(sources.tolist(), targets.tolist())) == [(0, 2), (1, 0), (2, 0), (3, 0)]
    sources, targets = top_k_edges(embeddings, offsets, 2)
    assert sorted(zip(sources.tolist(), targets.tolist())) == [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1),
                                                               (3, 0), (3, 2)]


def test_top_k_edges_stay_inside_documents_and_exclude_self():
    """Identical vectors across documents and duplicates inside one never yield cross-document or self edges."""
    base = random_corpus(5, [6])[0]
    embeddings = np.concatenate([base, base, base[:1], base[:3]])  # docs 0 and 1 identical, doc 3 repeats doc 2
    doc_codes = np.repeat([0, 1, 2, 3], [6, 6, 1, 3])
    for k in (1, 2, 3, 10):
        sources, targets = top_k_edges(embeddings, document_offsets(doc_codes), k)
        assert np.all(doc_codes[sources] == doc_codes[targets])
        assert np.all(sources != targets)
        out_degree = np.bincount(sources, minlength=len(doc_codes))
        sizes = np.bincount(doc_codes)[doc_codes]
        assert out_degree.tolist() == np.minimum(k, sizes - 1).tolist()


# ---------------------------------------------------------------- cap_pairs
@pytest.fixture(scope="module")
def many_pairs():
    embeddings, doc_codes = random_corpus(11, [30, 25, 20, 12, 8, 4, 2, 1, 30, 30])
    _, first, second = mine_positive_pairs(embeddings, doc_codes, 3)
    return first, second, doc_codes


def test_cap_pairs_per_document(many_pairs):
    """Each document keeps min(per_doc, its pairs) pairs when there is no total cap."""
    first, second, doc_codes = many_pairs
    available = np.bincount(doc_codes[first], minlength=doc_codes.max() + 1)
    assert available.max() > 5, "fixture must give documents more pairs than the cap"
    kept = cap_pairs(first, second, doc_codes, per_doc=5, total=None, seed=0)
    assert len(np.unique(kept)) == len(kept) and kept.min() >= 0 and kept.max() < len(first)
    assert np.all(np.diff(kept) > 0)
    per_doc = np.bincount(doc_codes[first[kept]], minlength=doc_codes.max() + 1)
    assert per_doc.tolist() == np.minimum(available, 5).tolist()


def test_cap_pairs_total_and_per_document(many_pairs):
    """Both caps hold together: <= per_doc per document and exactly `total` when more are available."""
    first, second, doc_codes = many_pairs
    kept = cap_pairs(first, second, doc_codes, per_doc=6, total=20, seed=0)
    assert len(kept) == 20
    assert np.bincount(doc_codes[first[kept]]).max() <= 6
    kept_total_only = cap_pairs(first, second, doc_codes, per_doc=None, total=17, seed=3)
    assert len(kept_total_only) == 17 and len(np.unique(kept_total_only)) == 17


def test_cap_pairs_seeded(many_pairs):
    """Same seed -> same pairs; another seed -> other pairs (on a case with many choices)."""
    first, second, doc_codes = many_pairs
    a = cap_pairs(first, second, doc_codes, per_doc=4, total=15, seed=0)
    b = cap_pairs(first, second, doc_codes, per_doc=4, total=15, seed=0)
    c = cap_pairs(first, second, doc_codes, per_doc=4, total=15, seed=1)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)
    d = cap_pairs(first, second, doc_codes, per_doc=4, total=None, seed=0)
    e = cap_pairs(first, second, doc_codes, per_doc=4, total=None, seed=1)
    assert not np.array_equal(d, e)


def test_cap_pairs_none_means_no_cap(many_pairs):
    """per_doc=None and total=None keep every pair, in order."""
    first, second, doc_codes = many_pairs
    kept = cap_pairs(first, second, doc_codes, per_doc=None, total=None, seed=0)
    assert kept.tolist() == list(range(len(first)))
    assert cap_pairs(first, second, doc_codes, per_doc=10_000, total=10_000, seed=0).tolist() == list(range(len(first)))


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


def test_build_pair_table_columns_and_values():
    """Columns are PAIR_COLUMNS; rows map positions to sentence ids, texts, doc and cluster."""
    sentences = pd.DataFrame({"sentence_id": [100, 101, 102, 103], "doc_id": ["x", "x", "x", "y"],
                              "position": [0, 1, 2, 0], "text": ["s0", "s1", "s2", "s3"]})
    labels = np.array([7, 7, 8, 9])
    table = build_pair_table(sentences, labels, np.array([0]), np.array([1]))
    assert list(table.columns) == PAIR_COLUMNS
    assert table.to_dict("records") == [{"doc_id": "x", "sentence_a": 100, "sentence_b": 101, "cluster": 7,
                                         "text_a": "s0", "text_b": "s1"}]
    empty = build_pair_table(sentences, labels, np.empty(0, np.int64), np.empty(0, np.int64))
    assert list(empty.columns) == PAIR_COLUMNS and empty.empty


# ---------------------------------------------------------------- errors
@pytest.mark.parametrize("k", [0, -1])
def test_top_k_edges_rejects_k_below_one(k):
    """K < 1 is a StageError."""
    embeddings, doc_codes = random_corpus(0, [3, 2])
    with pytest.raises(StageError, match="K must be >= 1"):
        top_k_edges(embeddings, document_offsets(doc_codes), k)


def test_document_offsets():
    """Offsets of grouped codes; ungrouped codes are a StageError."""
    assert document_offsets(np.array([0, 0, 1, 1, 1, 2])).tolist() == [0, 2, 5, 6]
    assert document_offsets(np.array([], dtype=np.int64)).tolist() == [0]
    with pytest.raises(StageError, match="grouped by document"):
        document_offsets(np.array([0, 1, 0]))
    with pytest.raises(StageError, match="grouped by document"):
        mine_positive_pairs(random_corpus(0, [3])[0], np.array([0, 1, 0]), 1)


# ---------------------------------------------------------------- K-means IDC
def test_kmeans_idc_groups_each_documents_sentences_by_global_cluster():
    """Three well-separated global groups (directions e0, e1, e2 plus small noise); each document
    mixes them. K-means with 3 clusters must recover the groups, and a document's cluster is the
    set of its sentences in one group -- never a sentence of another document."""
    rng = np.random.default_rng(0)
    group = np.array([0, 0, 1, 2, 1, 1, 0, 2, 2, 2, 0, 1])
    doc_codes = np.array([0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 2])
    embeddings = np.eye(3)[group] + rng.normal(scale=0.01, size=(len(group), 3))
    labels, first, second = mine_kmeans_pairs(embeddings.astype(np.float32), doc_codes, clusters=3, seed=0)
    expected = {frozenset(np.flatnonzero((doc_codes == d) & (group == g)).tolist())
                for d in range(3) for g in range(3) if ((doc_codes == d) & (group == g)).any()}
    found = {frozenset(np.flatnonzero(labels == label).tolist()) for label in np.unique(labels)}
    assert found == expected
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


def test_cluster_iteration_dispatches_on_method_and_applies_the_budget():
    sentences = pd.DataFrame({"sentence_id": np.arange(12), "doc_id": [f"d{i // 4}" for i in range(12)],
                              "position": np.tile(np.arange(4), 3), "text": [f"sentence {i}" for i in range(12)]})
    embeddings = np.eye(4, dtype=np.float32)[np.array([0, 0, 1, 1] * 3)]
    params = {"seed": 0, "idc": {"method": "kmeans", "k": 1, "kmeans_clusters": 2},
              "budget": {"max_pairs_per_document": "all", "max_pairs": "all"}}
    pairs, stats = cluster_iteration(params, sentences, embeddings)
    assert list(pairs.columns) == PAIR_COLUMNS and len(pairs) == 6 and stats["clusters"] == 6
    params["budget"] = {"max_pairs_per_document": 1, "max_pairs": 2}
    assert len(cluster_iteration(params, sentences, embeddings)[0]) == 2
    params["idc"]["method"] = "spectral"
    with pytest.raises(StageError, match="`idc.method` must be one of"):
        cluster_iteration(params, sentences, embeddings)

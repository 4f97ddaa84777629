"""study/pairs_at_budget.py counts a document's pairs as IDC makes them: every pair inside a cluster."""

from __future__ import annotations

import itertools

import numpy as np

from infocse.idc import intra_cluster_pairs
from study.pairs_at_budget import pairs_per_document


def test_pairs_per_document_on_a_hand_worked_table():
    doc_codes = np.array([0, 0, 0, 0, 1, 1, 1, 2])
    labels = np.array([0, 0, 0, 1, 2, 2, 3, 4])  # doc 0: a cluster of 3 and a singleton; doc 1: 2 + 1; doc 2: 1
    assert pairs_per_document(labels, doc_codes).tolist() == [3, 1, 0]


def test_pairs_per_document_matches_the_pairs_idc_builds():
    rng = np.random.default_rng(0)
    doc_codes = np.repeat(np.arange(30), rng.integers(1, 12, size=30))
    labels = np.concatenate([[0], np.cumsum((np.diff(doc_codes) != 0) | (rng.random(len(doc_codes) - 1) < 0.3))])
    first, _ = intra_cluster_pairs(labels)
    expected = np.bincount(doc_codes[first], minlength=30)
    brute = [sum(1 for a, b in itertools.combinations(np.flatnonzero(doc_codes == d), 2) if labels[a] == labels[b])
             for d in range(30)]
    assert pairs_per_document(labels, doc_codes).tolist() == expected.tolist() == brute

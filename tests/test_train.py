"""train (stages/train.py): document-disjoint batching, and contrastive training of the tiny model
on same-document pairs (it learns, it is reproducible)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import tiny_documents

from stages.common import StageError, load_model
from stages.prepare import split_sentences
from stages.train import document_disjoint_batches, train_on_pairs


# ---------------------------------------------------------------- document_disjoint_batches
def check_batches(batches: list[list[int]], doc_codes: np.ndarray, batch_size: int) -> None:
    """The invariants every batching must hold."""
    seen = [index for batch in batches for index in batch]
    assert len(seen) == len(set(seen)), "a pair appears twice"
    assert all(0 <= index < len(doc_codes) for index in seen)
    for batch in batches:
        assert 2 <= len(batch) <= batch_size
        docs = doc_codes[batch]
        assert len(set(docs.tolist())) == len(docs), f"two pairs of one document in {batch}"


def dropped(batches: list[list[int]], n: int) -> list[int]:
    used = {index for batch in batches for index in batch}
    return [index for index in range(n) if index not in used]


@pytest.mark.parametrize("batch_size", [2, 3, 8, 64])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_batches_are_document_disjoint(batch_size, seed):
    """No batch holds two pairs of one document, no pair is used twice, batches hold 2..batch_size,
    and pairs are dropped only from a single document left over at the end."""
    rng = np.random.default_rng(seed)
    doc_codes = rng.choice(25, size=300, p=np.r_[0.3, np.full(24, 0.7 / 24)])
    batches = document_disjoint_batches(doc_codes, batch_size, seed)
    check_batches(batches, doc_codes, batch_size)
    left = dropped(batches, len(doc_codes))
    assert len(set(doc_codes[left].tolist())) <= 1


def full_scan_batches(doc_codes: np.ndarray, batch_size: int, seed: int) -> list[list[int]]:
    """The greedy batching written plainly: every batch scans every waiting pair."""
    waiting = np.random.default_rng(seed).permutation(len(doc_codes)).tolist()
    batches = []
    while waiting:
        batch, docs, deferred = [], set(), []
        for index in waiting:
            if len(batch) < batch_size and doc_codes[index] not in docs:
                batch.append(index)
                docs.add(doc_codes[index])
            else:
                deferred.append(index)
        if len(batch) < 2:
            break
        batches.append(batch)
        waiting = deferred
    return batches


@pytest.mark.parametrize("seed", range(4))
def test_batches_equal_the_full_scan(seed):
    """The batching stops scanning once a batch is full; its batches are those of the plain version."""
    rng = np.random.default_rng(seed)
    for n_docs, n, batch_size in [(25, 300, 8), (3, 40, 4), (400, 2000, 32), (1, 5, 2), (50, 60, 64)]:
        doc_codes = rng.integers(0, n_docs, size=n)
        assert document_disjoint_batches(doc_codes, batch_size, seed) == full_scan_batches(doc_codes, batch_size, seed)


def test_batches_deterministic_per_seed():
    """Same seed -> same batches; another seed -> other batches."""
    doc_codes = np.random.default_rng(0).integers(0, 20, size=200)
    first = document_disjoint_batches(doc_codes, 8, 0)
    assert first == document_disjoint_batches(doc_codes, 8, 0)
    assert first != document_disjoint_batches(doc_codes, 8, 1)


@pytest.mark.parametrize("seed", range(5))
def test_skewed_document_leftovers_are_dropped(seed):
    """One document owns most pairs: every other document's pair is used; the only pairs dropped are
    that document's, and exactly those not placed in some batch (at most one per batch)."""
    doc_codes = np.r_[np.zeros(50, dtype=np.int64), np.arange(1, 11)]
    doc_codes = doc_codes[np.random.default_rng(seed).permutation(len(doc_codes))]
    batches = document_disjoint_batches(doc_codes, 4, seed)
    check_batches(batches, doc_codes, 4)
    left = dropped(batches, len(doc_codes))
    assert set(doc_codes[left].tolist()) == {0}
    placed_big = sum(int((doc_codes[batch] == 0).any()) for batch in batches)
    assert len(left) == 50 - placed_big
    # minority pairs fill at most 3 slots per batch, so at most 10 batches, and then a lone document remains
    assert len(batches) <= 10 and len(left) >= 40


@pytest.mark.parametrize("seed", range(3))
def test_hand_worked_batches(seed):
    """Hand-worked: 5 documents x 4 pairs with batch size 5 -> 4 full batches, nothing dropped;
    documents with 3 and 1 pairs and batch size 4 -> one batch of 2, two pairs of the first dropped."""
    balanced = np.repeat(np.arange(5), 4)
    batches = document_disjoint_batches(balanced, 5, seed)
    assert [len(b) for b in batches] == [5, 5, 5, 5]
    assert sorted(i for b in batches for i in b) == list(range(20))
    check_batches(batches, balanced, 5)

    lopsided = np.array([0, 0, 0, 1])
    batches = document_disjoint_batches(lopsided, 4, seed)
    assert len(batches) == 1 and len(batches[0]) == 2 and 3 in batches[0]
    assert len(dropped(batches, 4)) == 2


def test_batches_single_document_or_empty():
    """One document alone can form no batch (no negatives); no pairs give no batches."""
    assert document_disjoint_batches(np.zeros(7, dtype=np.int64), 4, 0) == []
    assert document_disjoint_batches(np.array([], dtype=np.int64), 4, 0) == []


# ---------------------------------------------------------------- train_on_pairs
def tiny_pairs() -> tuple[pd.DataFrame, dict[str, list[str]]]:
    """Every pair of sentences inside each tiny document, and each document's sentences."""
    rows, by_doc = [], {}
    for document in tiny_documents():
        sentences = split_sentences(document["text"])
        by_doc[document["id"]] = sentences
        rows += [{"doc_id": document["id"], "text_a": a, "text_b": b} for a, b in itertools.combinations(sentences, 2)]
    return pd.DataFrame(rows), by_doc


def positive_minus_negative(model, pairs: pd.DataFrame) -> float:
    """Mean cosine of the (held-in) positive pairs minus mean cosine of cross-topic sentence pairs."""
    topic_of = {d["id"]: d["category"] for d in tiny_documents()}
    texts = sorted(set(pairs["text_a"]) | set(pairs["text_b"]))
    vectors = dict(zip(texts, model.encode(texts, normalize_embeddings=True, convert_to_numpy=True)))
    positive = np.mean([vectors[a] @ vectors[b] for a, b in zip(pairs["text_a"], pairs["text_b"])])
    topic_of_text = {}
    for doc_id, a, b in zip(pairs["doc_id"], pairs["text_a"], pairs["text_b"]):
        topic_of_text[a] = topic_of_text[b] = topic_of[doc_id]
    negative = np.mean([vectors[a] @ vectors[b] for a, b in itertools.combinations(texts, 2)
                        if topic_of_text[a] != topic_of_text[b]])
    return float(positive - negative)


SEED = 0
TRAIN = {"batch_size": 8, "learning_rate": 3.0e-3, "warmup_ratio": 0.1, "temperature": 0.05, "epochs": 2}


@pytest.fixture(autouse=True)
def _single_thread(one_torch_thread):
    """Every test here trains or encodes."""


def test_tiny_model_fixture_sees_words(tiny_model_dir):
    """Precondition of the training tests: the tiny model's tokenizer knows the corpus words
    (a tokenizer mapping everything to [UNK] gives embeddings that depend only on length)."""
    model = load_model(tiny_model_dir, "cpu")
    tokens = model.tokenizer.tokenize("The striker scored a late goal.")
    assert tokens == ["the", "striker", "scored", "a", "late", "goal", "."], tokens


def test_training_separates_positives_from_other_topics(tiny_model_dir, tmp_path):
    """After training, same-document pairs are closer relative to cross-topic pairs than before;
    the stats report the steps taken and a finite loss."""
    pairs, _ = tiny_pairs()
    model = load_model(tiny_model_dir, "cpu")
    before = positive_minus_negative(model, pairs)
    stats = train_on_pairs(model, pairs, TRAIN, SEED, "cpu", tmp_path / "out")
    after = positive_minus_negative(model, pairs)
    # a tokenizer that maps every word to [UNK] cannot learn this: see test_tiny_model_fixture_sees_words
    assert after > before + 0.1, (before, after)

    doc_codes = pd.factorize(pairs["doc_id"])[0]
    expected_batches = [b for epoch in range(TRAIN["epochs"])
                        for b in document_disjoint_batches(doc_codes, TRAIN["batch_size"], SEED + epoch)]
    assert stats["steps"] == len(expected_batches) > 0
    assert math.isfinite(stats["train_loss"]) and stats["train_loss"] > 0
    assert stats["pairs_used"] == sum(len(b) for b in expected_batches)
    assert stats["pairs_used"] + stats["pairs_dropped"] == len(pairs) * TRAIN["epochs"]
    assert stats["loss_curve"] and all(math.isfinite(row["loss"]) for row in stats["loss_curve"])


def test_training_is_deterministic(tiny_model_dir, tmp_path):
    """Two runs from the same weights with the same seed end with identical weights (that moved)."""
    pairs, _ = tiny_pairs()
    train = {**TRAIN, "epochs": 1}
    initial = {k: v.clone() for k, v in load_model(tiny_model_dir, "cpu").state_dict().items()}
    results = []
    for run in range(2):
        model = load_model(tiny_model_dir, "cpu")
        stats = train_on_pairs(model, pairs, train, SEED, "cpu", tmp_path / f"run{run}")
        results.append((model.state_dict(), stats["train_loss"]))
    (first, loss_a), (second, loss_b) = results
    assert first.keys() == second.keys() == initial.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)
    assert loss_a == loss_b
    assert any(not torch.equal(first[k], initial[k]) for k in first), "training changed no weight"


@pytest.mark.parametrize("change, message", [
    ({"batch_size": 1}, "batch_size` must be >= 2"),
    ({"epochs": 0}, "train.epochs"),
    ({"warmup_ratio": 1.0}, "warmup_ratio"),
    ({"temperature": 0.0}, "temperature"),
])
def test_bad_training_params_are_refused(tiny_model_dir, tmp_path, change, message):
    model = load_model(tiny_model_dir, "cpu")
    with pytest.raises(StageError, match=message):
        train_on_pairs(model, tiny_pairs()[0], {**TRAIN, **change}, SEED, "cpu", tmp_path / "out")


def test_pairs_of_one_document_cannot_train(tiny_model_dir, tmp_path):
    """No batch can hold two of its pairs: training would silently do nothing, so it is an error."""
    pairs = tiny_pairs()[0]
    model = load_model(tiny_model_dir, "cpu")
    with pytest.raises(StageError, match="fewer than two documents"):
        train_on_pairs(model, pairs[pairs["doc_id"] == pairs["doc_id"].iloc[0]], TRAIN, SEED, "cpu", tmp_path / "out")

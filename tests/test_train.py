"""Training (infocse/sampler.py, infocse/training.py): document-disjoint batching by the greedy and
the spread sampler, batch diagnostics, the training precision, and contrastive training of the tiny
model on same-document pairs (it learns, it is reproducible, it leaves no scratch folder)."""

from __future__ import annotations

import itertools
import json
import math
import os
import tempfile

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import config_with, tiny_documents

from infocse.corpora.sentences import split_sentences
from infocse.errors import StageError
from infocse.live import LiveCurves
from infocse.models import load_model
from infocse.sampler import batch_statistics, greedy_document_disjoint_batches, spread_batches
from infocse.training import dataloader_workers, text_codes, train_on_pairs, training_batches


# ---------------------------------------------------------------- greedy_document_disjoint_batches
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
    batches = greedy_document_disjoint_batches(doc_codes, batch_size, seed)
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
        assert greedy_document_disjoint_batches(doc_codes, batch_size, seed) == full_scan_batches(doc_codes, batch_size, seed)


def test_batches_deterministic_per_seed():
    """Same seed -> same batches; another seed -> other batches."""
    doc_codes = np.random.default_rng(0).integers(0, 20, size=200)
    first = greedy_document_disjoint_batches(doc_codes, 8, 0)
    assert first == greedy_document_disjoint_batches(doc_codes, 8, 0)
    assert first != greedy_document_disjoint_batches(doc_codes, 8, 1)


@pytest.mark.parametrize("seed", range(5))
def test_skewed_document_leftovers_are_dropped(seed):
    """One document owns most pairs: every other document's pair is used; the only pairs dropped are
    that document's, and exactly those not placed in some batch (at most one per batch)."""
    doc_codes = np.r_[np.zeros(50, dtype=np.int64), np.arange(1, 11)]
    doc_codes = doc_codes[np.random.default_rng(seed).permutation(len(doc_codes))]
    batches = greedy_document_disjoint_batches(doc_codes, 4, seed)
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
    batches = greedy_document_disjoint_batches(balanced, 5, seed)
    assert [len(b) for b in batches] == [5, 5, 5, 5]
    assert sorted(i for b in batches for i in b) == list(range(20))
    check_batches(batches, balanced, 5)

    lopsided = np.array([0, 0, 0, 1])
    batches = greedy_document_disjoint_batches(lopsided, 4, seed)
    assert len(batches) == 1 and len(batches[0]) == 2 and 3 in batches[0]
    assert len(dropped(batches, 4)) == 2


def test_batches_single_document_or_empty():
    """One document alone can form no batch (no negatives); no pairs give no batches."""
    assert greedy_document_disjoint_batches(np.zeros(7, dtype=np.int64), 4, 0) == []
    assert greedy_document_disjoint_batches(np.array([], dtype=np.int64), 4, 0) == []


# ---------------------------------------------------------------- spread_batches (params train.sampler: spread)
def skewed_codes(seed: int) -> np.ndarray:
    """A few long documents hold most pairs: 4 documents with 60 pairs each, 36 with 4 each (62%
    of the pairs in 10% of the documents), rows in a random order."""
    codes = np.r_[np.repeat(np.arange(4), 60), np.repeat(np.arange(4, 40), 4)]
    return codes[np.random.default_rng(seed).permutation(len(codes))]


def documents_left_before(batches: list[list[int]], doc_codes: np.ndarray) -> list[int]:
    """For each batch, in the order formed: how many documents still held pairs when it was formed."""
    unused, counts = np.ones(len(doc_codes), dtype=bool), []
    for batch in batches:
        counts.append(len(set(doc_codes[unused].tolist())))
        unused[batch] = False
    return counts


def most_full_batches(doc_codes: np.ndarray, batch_size: int) -> int:
    """The most full batches any document-disjoint batching can form: a document gives at most one
    pair to each batch, so k full batches need sum over documents of min(pairs, k) >= k * batch_size."""
    per_document = np.unique(doc_codes, return_counts=True)[1]
    k = 0
    while np.minimum(per_document, k + 1).sum() >= (k + 1) * batch_size:
        k += 1
    return k


def mean_size(batches: list[list[int]]) -> float:
    return float(np.mean([len(batch) for batch in batches]))


@pytest.mark.parametrize("seed", range(4))
def test_spread_keeps_batches_full_on_a_skewed_table(seed):
    """On a table where a few documents hold most pairs, spread's batches are all full: the mean
    size is >= 0.95 x batch size over the batches formed while at least batch-size documents held
    pairs (and over all of them), and it forms as many full batches as any document-disjoint
    batching can. Greedy fails the fullness check on the same table: once the short documents run
    out, its batches shrink to the four long ones. (Greedy scans every waiting pair, so its
    batches too are full while batch-size documents hold pairs: the difference is that it trains
    on that tail in small batches, which spread leaves out.)"""
    batch_size = 16
    doc_codes = skewed_codes(seed)
    spread = spread_batches(doc_codes, batch_size, seed)
    check_batches(spread, doc_codes, batch_size)
    while_enough = [batch for batch, left in zip(spread, documents_left_before(spread, doc_codes)) if left >= batch_size]
    assert while_enough == spread, "spread forms no batch once fewer than batch-size documents hold pairs"
    assert mean_size(while_enough) >= 0.95 * batch_size and mean_size(spread) >= 0.95 * batch_size
    assert len(spread) == most_full_batches(doc_codes, batch_size) == 12
    left = dropped(spread, len(doc_codes))
    assert len(set(doc_codes[left].tolist())) < batch_size, "a further full batch was possible"

    greedy = greedy_document_disjoint_batches(doc_codes, batch_size, seed)
    check_batches(greedy, doc_codes, batch_size)
    assert mean_size(greedy) < 0.95 * batch_size, "the point of spread: greedy's batches are not full here"
    greedy_full = sum(len(batch) == batch_size for batch in greedy)
    assert greedy_full <= len(spread)
    greedy_while_enough = [b for b, n in zip(greedy, documents_left_before(greedy, doc_codes)) if n >= batch_size]
    assert all(len(batch) == batch_size for batch in greedy_while_enough)


@pytest.mark.parametrize("seed", range(3))
def test_spread_reaches_the_bound_on_random_tables(seed):
    """On random skewed tables of many sizes: never two pairs of one document, every pair at most
    once, every batch full, and exactly as many batches as the bound allows."""
    rng = np.random.default_rng(seed)
    for documents, pairs, batch_size in [(40, 500, 8), (200, 3000, 32), (10, 100, 4), (33, 40, 32), (5, 50, 8)]:
        weights = 1.0 / np.arange(1, documents + 1) ** rng.uniform(0.5, 1.5)
        doc_codes = rng.choice(documents, size=pairs, p=weights / weights.sum())
        batches = spread_batches(doc_codes, batch_size, seed)
        check_batches(batches, doc_codes, batch_size)
        assert all(len(batch) == batch_size for batch in batches)
        assert len(batches) == most_full_batches(doc_codes, batch_size), (documents, pairs, batch_size)


def test_spread_hand_worked():
    """Documents A, B, C, D with 3, 2, 1, 1 pairs, batch size 2: at most 3 full batches (7 pairs,
    and A can give only one pair to each). Batch 1 takes A and B (most pairs left: 3 and 2); batch 2
    takes A (2 left) and one of B, C, D (1 each, drawn); then three documents hold one pair each,
    batch 3 takes two of them (drawn), and one pair is left over."""
    doc_codes = np.array([0, 0, 0, 1, 1, 2, 3])
    left_over = set()
    for seed in range(12):
        batches = spread_batches(doc_codes, 2, seed)
        assert [sorted(doc_codes[batch].tolist())[0] for batch in batches[:2]] == [0, 0]
        assert sorted(doc_codes[batches[0]].tolist()) == [0, 1]
        assert len(batches) == 3 and len(batches[2]) == 2
        left = dropped(batches, len(doc_codes))
        assert len(left) == 1
        left_over.add(int(doc_codes[left[0]]))
    assert len(left_over) > 1, "the tie in batch 3 is drawn with the seed"
    # with three devices sharing a batch of 7, each batch is cut to 6 pairs
    codes = np.repeat(np.arange(10), 3)
    batches = spread_batches(codes, 7, 0, multiple_of=3)
    check_batches(batches, codes, 7)
    assert [len(batch) for batch in batches] == [6] * 5


def test_spread_deterministic_per_seed_and_shuffled_within_documents():
    """Same seed -> same batches; another seed -> other batches; a document's pairs are taken in an
    order drawn with the seed (not its rows' order), and which of several equal documents goes
    first is drawn too."""
    doc_codes = skewed_codes(0)
    first = spread_batches(doc_codes, 16, 0)
    assert first == spread_batches(doc_codes, 16, 0)
    assert first != spread_batches(doc_codes, 16, 1)
    sorted_codes = np.sort(doc_codes)  # document 0's pairs are rows 0..59
    orders = [[index for batch in spread_batches(sorted_codes, 16, seed) for index in batch if index < 60]
              for seed in range(3)]
    assert all(order != sorted(order) for order in orders) and orders[0] != orders[1]
    equal = np.repeat(np.arange(8), 2)  # 8 documents of 2 pairs, batches of 4: who goes first is drawn
    firsts = {tuple(sorted(equal[spread_batches(equal, 4, seed)[0]].tolist())) for seed in range(10)}
    assert len(firsts) > 1


def test_spread_needs_batch_size_documents():
    """Fewer documents than the batch size: no full batch exists, so none is formed, and training
    says so in one line (greedy would train in batches of that many documents)."""
    doc_codes = np.repeat(np.arange(5), 4)
    assert spread_batches(doc_codes, 8, 0) == []
    assert spread_batches(np.array([], dtype=np.int64), 8, 0) == []
    pairs = pd.DataFrame({"doc_id": doc_codes.astype(str), "text_a": [f"a{i}" for i in range(len(doc_codes))],
                          "text_b": [f"b{i}" for i in range(len(doc_codes))]})
    training = config_with({}).train.model_copy(update=dict(sampler="spread", batch_size=8))
    with pytest.raises(StageError, match="from 5 documents, fewer than the batch size 8: use sampler `greedy`"):
        training_batches(pairs, training, 0)
    assert len(training_batches(pairs, training.model_copy(update=dict(sampler="greedy")), 0)) == 4


def test_training_batches_follow_the_sampler_param():
    """`train.sampler` picks the batching; the default is greedy, epoch e uses seed + e, and
    `devices` is passed on as the multiple each batch is cut to."""
    doc_codes = skewed_codes(0)
    pairs = pd.DataFrame({"doc_id": [f"doc-{code}" for code in doc_codes], "text_a": [f"a{i}" for i in range(len(doc_codes))],
                          "text_b": [f"b{i}" for i in range(len(doc_codes))]})
    default = config_with({"train": {"batch_size": 16, "epochs": 2}}).train
    assert default.sampler == "greedy"
    codes = pd.factorize(pairs["doc_id"])[0]
    texts = text_codes(pairs)
    assert training_batches(pairs, default, 3) == (greedy_document_disjoint_batches(codes, 16, 3, text_codes=texts)
                                                   + greedy_document_disjoint_batches(codes, 16, 4, text_codes=texts))
    spread = default.model_copy(update=dict(sampler="spread", devices=2))
    assert training_batches(pairs, spread, 3) == (spread_batches(codes, 16, 3, multiple_of=2, text_codes=texts)
                                                  + spread_batches(codes, 16, 4, multiple_of=2, text_codes=texts))


# ---------------------------------------------------------------- batch diagnostics
def test_batch_statistics_hand_worked():
    """Pairs of documents 0 (six pairs), 1 (two), 2 and 3 (one each); batches of 4, 2 and 3 pairs
    with batch size 4: 3 batches, mean 3.0, min 2, one of three full; pair 5 (document 0) is left out,
    so the top 10% of the four documents is one document (ceil), document 0, with 5 of the 9
    batched pairs (not 6 of the table's 10)."""
    doc_codes = np.array([0, 0, 0, 0, 0, 0, 1, 1, 2, 3])
    batches = [[0, 6, 8, 9], [1, 7], [2, 3, 4]]
    assert batch_statistics(batches, doc_codes, 4) == {
        "batches": 3, "mean_size": 3.0, "min_size": 2, "share_full": pytest.approx(1 / 3),
        "share_of_pairs_from_top_10pct_documents": 5 / 9}
    # one document of 20 pairs and 20 of one pair, all batched: the top 10% of 21 documents is three
    # (2.1 rounded up), 22 of 40 pairs; with 15 of the long document's pairs left out, 7 of 25
    codes = np.r_[np.zeros(20, dtype=np.int64), np.arange(1, 21)]
    assert batch_statistics([list(range(40))], codes, 4)["share_of_pairs_from_top_10pct_documents"] == 22 / 40
    assert batch_statistics([list(range(15, 40))], codes, 4)["share_of_pairs_from_top_10pct_documents"] == 7 / 25
    assert batch_statistics([], np.array([], dtype=np.int64), 4) == {
        "batches": 0, "mean_size": 0.0, "min_size": 0, "share_full": 0.0,
        "share_of_pairs_from_top_10pct_documents": 0.0}


# ---------------------------------------------------------------- data loading
def test_dataloader_workers_only_on_cuda(monkeypatch):
    """CPU training tokenizes in the loop, as it always did; on CUDA up to two workers per process
    tokenize ahead, leaving a core for the process itself."""
    for cores in (1, 2, 16, 64):
        monkeypatch.setattr(os, "cpu_count", lambda cores=cores: cores)
        assert dataloader_workers("cpu", 1) == 0
        assert dataloader_workers("cuda", 1) == min(2, cores - 1)
        assert dataloader_workers("cuda:0", 8) == max(0, min(2, cores // 8 - 1))


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
TRAIN = config_with({"train": {"batch_size": 8, "learning_rate": 3.0e-3, "warmup_ratio": 0.1, "temperature": 0.05,
                               "epochs": 2}}).train


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
    live = LiveCurves(tmp_path / "live", ("finetune", "unused"))
    stats = train_on_pairs(model, pairs, TRAIN, SEED, "cpu", tmp_path / "out", live=live, phase="finetune")
    after = positive_minus_negative(model, pairs)
    # a tokenizer that maps every word to [UNK] cannot learn this: see test_tiny_model_fixture_sees_words
    assert after > before + 0.1, (before, after)

    doc_codes = pd.factorize(pairs["doc_id"])[0]
    expected_batches = [b for epoch in range(TRAIN.epochs)
                        for b in greedy_document_disjoint_batches(doc_codes, TRAIN.batch_size, SEED + epoch,
                                                           text_codes=text_codes(pairs))]
    assert stats["steps"] == len(expected_batches) > 0
    assert math.isfinite(stats["train_loss"]) and stats["train_loss"] > 0
    assert stats["pairs_used"] == sum(len(b) for b in expected_batches)
    assert stats["pairs_used"] + stats["pairs_dropped"] == len(pairs) * TRAIN.epochs
    assert stats["loss_curve"] and all(math.isfinite(row["loss"]) for row in stats["loss_curve"])
    assert stats["batches"] == batch_statistics(expected_batches, doc_codes, TRAIN.batch_size)
    assert stats["batches"]["batches"] == stats["steps"]
    assert stats["sampler"] == "greedy" and stats["precision"] == "fp32"  # the default
    # the live curves, written while it trained, hold the trainer's logged steps: the loss curve it returned
    curves = {curve: pd.read_csv(tmp_path / f"live/plots/metrics/finetune/{curve}.tsv", sep="\t")
              for curve in ("loss", "learning_rate")}
    assert list(curves["loss"]["step"]) == [row["step"] for row in stats["loss_curve"]]
    assert list(curves["loss"]["loss"]) == pytest.approx([row["loss"] for row in stats["loss_curve"]], abs=1e-6)
    assert list(curves["learning_rate"]["step"]) == list(curves["loss"]["step"])
    assert (tmp_path / "live/plots/metrics/unused/loss.tsv").read_text() == "step\tloss\n"
    assert json.loads((tmp_path / "live/metrics.json").read_text()) == {"finetune": {
        "loss": pytest.approx(stats["loss_curve"][-1]["loss"], abs=1e-6), "step": stats["loss_curve"][-1]["step"],
        "learning_rate": pytest.approx(curves["learning_rate"]["learning_rate"].iloc[-1])}}


def test_live_curves_keep_no_phase_of_an_earlier_run(tmp_path):
    earlier = LiveCurves(tmp_path / "live", ("iteration-1", "iteration-2"))
    earlier.log("iteration-2", 10, {"loss": 1.5})
    LiveCurves(tmp_path / "live", ("iteration-1",))
    assert sorted(p.name for p in (tmp_path / "live/plots/metrics").iterdir()) == ["iteration-1"]
    assert json.loads((tmp_path / "live/metrics.json").read_text()) == {}


def test_training_is_deterministic(tiny_model_dir, tmp_path):
    """Two runs from the same weights with the same seed end with identical weights (that moved)."""
    pairs, _ = tiny_pairs()
    train = TRAIN.model_copy(update=dict(epochs=1))
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


def test_pairs_of_one_document_cannot_train(tiny_model_dir, tmp_path):
    """No batch can hold two of its pairs: training would silently do nothing, so it is an error."""
    pairs = tiny_pairs()[0]
    model = load_model(tiny_model_dir, "cpu")
    with pytest.raises(StageError, match="fewer than two documents"):
        train_on_pairs(model, pairs[pairs["doc_id"] == pairs["doc_id"].iloc[0]], TRAIN, SEED, "cpu", tmp_path / "out")


def train_once(model_dir, training, pairs=None) -> tuple[dict, dict]:
    model = load_model(model_dir, "cpu")
    stats = train_on_pairs(model, tiny_pairs()[0] if pairs is None else pairs, training, SEED, "cpu")
    return model.state_dict(), stats


def test_spread_sampler_trains_on_full_batches(tiny_model_dir):
    """`sampler: spread` reaches the trainer: one step per spread batch, all of them full."""
    pairs = tiny_pairs()[0]
    training = TRAIN.model_copy(update=dict(epochs=1, sampler="spread"))
    _, stats = train_once(tiny_model_dir, training, pairs)
    expected = spread_batches(pd.factorize(pairs["doc_id"])[0], TRAIN.batch_size, SEED, text_codes=text_codes(pairs))
    assert stats["steps"] == len(expected) > 0 and stats["sampler"] == "spread"
    assert stats["batches"]["share_full"] == 1.0 and stats["batches"]["min_size"] == TRAIN.batch_size
    assert stats["pairs_used"] == TRAIN.batch_size * len(expected)


def fake_cpu_bf16(monkeypatch, present: bool) -> None:
    """This process's CPU as one with (or without) bf16 matrix instructions, whatever it really has."""
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: present)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)


def test_precision_on_cpu(tiny_model_dir, monkeypatch):
    """The default trains in fp32; bf16 on a CPU with bf16 units is CPU autocast (the weights end
    elsewhere, and stay fp32); on a CPU without them bf16 is refused in one line, as fp16 is on any
    CPU, before any training."""
    one_epoch = TRAIN.model_copy(update=dict(epochs=1))
    assert one_epoch.precision == "fp32"
    fake_cpu_bf16(monkeypatch, True)
    fp32, fp32_stats = train_once(tiny_model_dir, one_epoch)
    bf16, bf16_stats = train_once(tiny_model_dir, one_epoch.model_copy(update=dict(precision="bf16")))
    assert fp32_stats["precision"] == "fp32" and bf16_stats["precision"] == "bf16"
    assert any(not torch.equal(bf16[k], fp32[k]) for k in fp32), "bf16 was asked for but not used"
    assert {tensor.dtype for tensor in bf16.values() if tensor.is_floating_point()} == {torch.float32}
    with pytest.raises(StageError, match="^params `precision` is fp16, which needs a CUDA GPU, and this stage runs on cpu"):
        train_once(tiny_model_dir, one_epoch.model_copy(update=dict(precision="fp16")))
    fake_cpu_bf16(monkeypatch, False)
    with pytest.raises(StageError, match="^params `precision` is bf16, but this CPU has no bf16 units"):
        train_once(tiny_model_dir, one_epoch.model_copy(update=dict(precision="bf16")))


def test_bf16_cpu_training_keeps_fp32_master_weights_and_a_plain_fp32_model(tiny_model_dir, tmp_path, monkeypatch):
    """bf16 on the CPU is mixed precision: the optimizer's state is fp32 (checked on the trainer's
    own AdamW), the saved model is fp32, and plain `SentenceTransformer(path)` loads it and encodes
    exactly what the trained model encodes in fp32."""
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer

    from infocse.models import save_model

    optimizer_dtypes = set()
    train = SentenceTransformerTrainer.train

    def train_and_look(self, *args, **kwargs):
        result = train(self, *args, **kwargs)
        optimizer_dtypes.update(value.dtype for state in self.optimizer.state.values()
                                for value in state.values() if torch.is_tensor(value) and value.is_floating_point())
        return result

    monkeypatch.setattr(SentenceTransformerTrainer, "train", train_and_look)
    fake_cpu_bf16(monkeypatch, True)
    model = load_model(tiny_model_dir, "cpu")
    bf16 = TRAIN.model_copy(update=dict(epochs=1, precision="bf16"))
    stats = train_on_pairs(model, tiny_pairs()[0], bf16, SEED, "cpu")
    assert stats["precision"] == "bf16" and optimizer_dtypes == {torch.float32}
    save_model(model, tmp_path / "model")
    loaded = SentenceTransformer(str(tmp_path / "model"), device="cpu")
    assert {p.dtype for p in loaded.parameters()} == {torch.float32}
    texts = ["The striker scored a late goal.", "Shares fell sharply on Monday."]
    np.testing.assert_array_equal(loaded.encode(texts), model.encode(texts))


def test_a_non_finite_loss_stops_training_naming_the_iteration(tiny_model_dir):
    """A model whose weights went NaN gives a NaN loss: training stops with one line naming where."""
    model = load_model(tiny_model_dir, "cpu")
    with torch.no_grad():
        model[0].auto_model.embeddings.word_embeddings.weight.fill_(float("nan"))
    with pytest.raises(StageError, match="^iteration 3: the (mean )?training loss (became|is) nan") as error:
        one_epoch = TRAIN.model_copy(update=dict(epochs=1))
        train_on_pairs(model, tiny_pairs()[0], one_epoch, SEED, "cpu", label="iteration 3")
    assert "\n" not in str(error.value)


# ---------------------------------------------------------------- no text twice in a batch
def duplicated_text_pairs(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """300 pairs of 40 documents whose texts repeat across documents (a byline, "he said."): text
    codes drawn from 150 texts, so many pairs share one."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, 40, size=300), rng.integers(0, 150, size=(300, 2))


@pytest.mark.parametrize("sampler", [greedy_document_disjoint_batches, spread_batches])
@pytest.mark.parametrize("seed", range(3))
def test_no_batch_holds_a_text_twice(sampler, seed):
    """With text codes, no batch repeats a text (across its anchors and positives, as
    sentence-transformers' no-duplicates sampler), and batches stay document-disjoint; without
    them the same table does put a text twice into some batch (so the rule is what prevents it)."""
    doc_codes, texts = duplicated_text_pairs(seed)
    doc_codes = np.sort(doc_codes)
    batches = sampler(doc_codes, 8, seed, text_codes=texts)
    assert batches
    check_batches(batches, doc_codes, 8)
    def repeats_a_text(batch: list[int]) -> bool:  # a text of one pair among another pair's texts
        own = [set(texts[index].tolist()) for index in batch]
        return sum(map(len, own)) > len(set().union(*own))

    assert not any(repeats_a_text(batch) for batch in batches)
    assert any(repeats_a_text(batch) for batch in sampler(doc_codes, 8, seed))


def test_a_pair_of_one_text_twice_is_allowed_alone():
    """SimCSE's (s, s): one pair's own two texts may be equal; only other pairs may not repeat them."""
    doc_codes = np.arange(4)
    texts = np.array([[0, 0], [1, 1], [0, 2], [3, 3]])
    batches = greedy_document_disjoint_batches(doc_codes, 4, 0, text_codes=texts)
    assert all(not ({0, 2} <= set(b)) for b in batches)
    assert sorted(i for b in batches for i in b) in ([0, 1, 3], [1, 2, 3])


def test_text_codes_cover_both_columns():
    pairs = pd.DataFrame({"text_a": ["x", "y", "z"], "text_b": ["y", "x", "z"]})
    codes = text_codes(pairs)
    assert codes.shape == (3, 2) and codes[0, 1] == codes[1, 0] and codes[0, 0] == codes[1, 1] and codes[2, 0] == codes[2, 1]


def test_training_leaves_no_scratch_folder(tiny_model_dir, tmp_path, monkeypatch):
    """Nothing of the training is in the system temp folder while it trains (a `kill -9` leaves
    what is there then) nor after it: the trainer's output folder is one that already exists."""
    from sentence_transformers import SentenceTransformerTrainer

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr(tempfile, "tempdir", None)  # recomputed from TMPDIR
    assert tempfile.gettempdir() == str(scratch)
    seen_while_training = []
    train = SentenceTransformerTrainer.train

    def train_and_look(self, *args, **kwargs):
        seen_while_training.append(sorted(os.listdir(scratch)))
        return train(self, *args, **kwargs)

    monkeypatch.setattr(SentenceTransformerTrainer, "train", train_and_look)
    from infocse.training import train_at_length

    model = load_model(tiny_model_dir, "cpu")
    stats = train_at_length(model, tiny_pairs()[0], TRAIN.model_copy(update=dict(epochs=1)), SEED, "cpu")
    assert stats["steps"] > 0
    assert seen_while_training == [[]]
    assert os.listdir(scratch) == []


@pytest.mark.parametrize("seed", range(6))
def test_a_text_clash_does_not_end_batching_early(seed):
    """Text clashes are not transitive as document clashes are. Greedy: pair 0 repeats a text of
    both others, which still form a batch together. Spread: four documents of three pairs, the
    first pairs of documents 0 and 1 sharing a text; each document can still give a pair that
    clashes with nothing, so all three full batches form."""
    greedy = greedy_document_disjoint_batches(np.array([0, 1, 2]), 4, seed, text_codes=np.array([[1, 10], [2, 10], [1, 4]]))
    assert [sorted(batch) for batch in greedy] == [[1, 2]]
    doc_codes = np.repeat(np.arange(4), 3)
    texts = np.arange(24).reshape(12, 2)
    texts[3, 0] = texts[0, 0]
    batches = spread_batches(doc_codes, 4, seed, text_codes=texts)
    assert len(batches) == 3 and sorted(i for b in batches for i in b) == list(range(12))

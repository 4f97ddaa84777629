"""Token tables (infocse/tokens.py) and the batching of embed_sentences: a batch padded from the
table is the tensors the model's own per-batch preprocessing gives, training on the table is
training on the library's collator step for step, and the token-budget batches are hand-worked."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import tiny_documents
from test_train import SEED, TRAIN, tiny_pairs

import infocse.tokens
import infocse.training
from infocse.embedding import embed_sentences, token_budget_batches
from infocse.models import load_model
from infocse.tokens import table_preprocess, tokenize, tokens_of

TEXTS = [d["text"] for d in tiny_documents()] + ["  Padded  ON BOTH sides  ", "goal", "", "The Striker."]


def assert_same_features(ours: dict, library: dict) -> None:
    assert ours.keys() == library.keys()
    for key, value in library.items():
        if torch.is_tensor(value):
            assert ours[key].dtype == value.dtype and torch.equal(ours[key], value), key
        else:
            assert ours[key] == value, key


@pytest.mark.parametrize("max_length", [5, 30])
@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("chunk", [3, 8192])
def test_a_padded_batch_is_the_models_own_preprocessing(tiny_model_dir, monkeypatch, max_length, side, chunk):
    monkeypatch.setattr(infocse.tokens, "CHUNK", chunk)  # texts per tokenizer call: chunks join seamlessly
    model = load_model(tiny_model_dir, "cpu", max_length)
    model.tokenizer.padding_side = side
    table = tokenize(model, TEXTS)
    assert table.lengths.max() == max_length  # some texts were truncated
    rng = np.random.default_rng(0)
    for rows in [np.arange(len(TEXTS)), rng.permutation(len(TEXTS))[:3], np.array([len(TEXTS) - 2]),
                 np.array([1, 1, 0])]:
        assert_same_features(table.batch(rows), model.preprocess([TEXTS[i] for i in rows]))


def test_a_text_set_is_tokenized_once_per_model_and_length(tiny_model_dir):
    model = load_model(tiny_model_dir, "cpu", 64)
    table = tokens_of(model, TEXTS)
    assert tokens_of(model, list(TEXTS)) is table
    model.max_seq_length = 5
    short = tokens_of(model, TEXTS)
    assert short is not table and short.lengths.max() == 5
    assert tokens_of(load_model(tiny_model_dir, "cpu", 5), TEXTS) is not short  # another model's tokenizer


def test_token_budget_batches_hand_worked():
    lengths = np.array([5, 3, 9, 2, 2, 7])
    # longest first (ties in input order); each batch as many texts as fit 10 padded tokens
    batches = token_budget_batches(lengths, 10)
    assert [batch.tolist() for batch in batches] == [[2], [5], [0, 1], [3, 4]]
    assert [batch.tolist() for batch in token_budget_batches(lengths, 100)] == [[2, 5, 0, 1, 3, 4]]
    assert [batch.tolist() for batch in token_budget_batches(lengths, 4)] == [[2], [5], [0], [1], [3, 4]]


@pytest.mark.parametrize("seed", range(3))
def test_token_budget_batches_cover_every_text_once_within_the_budget(seed):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 129, size=500)
    batches = token_budget_batches(lengths, 1024)
    rows = np.concatenate(batches)
    assert sorted(rows.tolist()) == list(range(500))
    assert all(len(b) * lengths[b].max() <= 1024 for b in batches)
    assert lengths[rows].tolist() == sorted(lengths.tolist(), reverse=True)


def test_the_collators_preprocessing_from_the_table_is_the_libraries(tiny_model_dir):
    model = load_model(tiny_model_dir, "cpu", 8)
    pairs, _ = tiny_pairs()
    preprocess = table_preprocess(model, pairs["text_a"].tolist() + pairs["text_b"].tolist())
    for start in range(0, len(pairs), 7):
        texts = pairs["text_b"][start:start + 7].tolist()
        assert_same_features(preprocess(texts), model.preprocess(texts))


def test_training_on_the_table_is_training_on_the_libraries_collator(tiny_model_dir, monkeypatch, one_torch_thread):
    """The same batches in the same order reach the same loss: the loss curve and the final weights
    are those of the trainer tokenizing every batch itself (the library's `model.preprocess`)."""
    pairs, _ = tiny_pairs()
    train = TRAIN.model_copy(update={"epochs": 4})
    results = []
    for library in (False, True):
        if library:
            monkeypatch.setattr(infocse.training, "table_preprocess", lambda model, texts: model.preprocess)
        model = load_model(tiny_model_dir, "cpu")
        stats = infocse.training.train_on_pairs(model, pairs, train, SEED, "cpu")
        results.append((stats, model.state_dict()))
    (ours, our_weights), (theirs, their_weights) = results
    assert ours["steps"] == theirs["steps"] >= 10 and ours["loss_curve"]
    assert ours["loss_curve"] == theirs["loss_curve"] and ours["train_loss"] == theirs["train_loss"]
    assert all(torch.equal(our_weights[key], their_weights[key]) for key in their_weights)


def test_a_model_without_a_transformer_keeps_the_librarys_own_path(tiny_model_dir, one_torch_thread):
    """A static-embedding model has no token table: it embeds with its own `encode` and trains
    with the library's collator, as before."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import StaticEmbedding

    tokenizer = load_model(tiny_model_dir, "cpu").tokenizer.backend_tokenizer
    torch.manual_seed(0)
    model = SentenceTransformer(modules=[StaticEmbedding(tokenizer, embedding_dim=16)], device="cpu")
    vectors = embed_sentences(model, TEXTS[:-2], 4, show_progress_bar=False)
    expected = model.encode(TEXTS[:-2], batch_size=4, normalize_embeddings=True, convert_to_numpy=True)
    assert vectors.dtype == np.float32 and vectors.tobytes() == expected.astype(np.float32).tobytes()
    pairs, _ = tiny_pairs()
    stats = infocse.training.train_on_pairs(model, pairs, TRAIN.model_copy(update={"epochs": 1}), SEED, "cpu")
    assert stats["steps"] > 0 and np.isfinite(stats["train_loss"])

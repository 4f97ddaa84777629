"""Encoding precision and batch size (infocse/models.py, embedding.py, retrieval.py, params): the
switch resolves by device; on CPU `auto` gives the fp32 outputs bit for bit; the half-precision
path (run here on CPU in bf16 and fp16) gives unit float32 vectors equal to those of a model cast
by hand, and leaves the model's own weights exactly as they were."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import TOPICS, config_with, tiny_documents

from infocse.embedding import embed_sentences
from infocse.errors import StageError
from infocse.models import encode_batch_size, encoding_dtype, encoding_precision, load_model, weights_in
from infocse.retrieval import rank_queries, score_model

SENTENCES = [sentence for sentences in TOPICS.values() for sentence in sentences]


def documents_frame() -> pd.DataFrame:
    """The tiny documents as the prepare stage lays them out, every third one in val, test, fewshot."""
    rows = [{"doc_id": d["id"], "title": d["title"], "body": d["text"], "category": d["category"],
             "split": ("val", "test", "fewshot")[i % 3]} for i, d in enumerate(tiny_documents())]
    return pd.DataFrame(rows)


def hand_ranks(query_vectors: np.ndarray, body_vectors: np.ndarray, gold: np.ndarray) -> np.ndarray:
    """0-based rank of each query's gold body, by sorting each query's scores (ties: gold last)."""
    ranks = []
    for query, gold_index in zip(query_vectors, gold):
        scores = body_vectors @ query
        ranks.append(int(np.sum(scores >= scores[gold_index])) - 1)
    return np.array(ranks)


def state_of(model) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


def assert_same_state(model, before: dict[str, torch.Tensor]) -> None:
    after = model.state_dict()
    assert after.keys() == before.keys()
    for name, tensor in after.items():
        assert tensor.dtype == before[name].dtype, name
        assert torch.equal(tensor, before[name]), name


# ---------------------------------------------------------------- the switch
@pytest.mark.parametrize("device, precision, expected", [
    ("cpu", "auto", None),
    (torch.device("cpu"), "auto", None),
    ("cuda", "auto", torch.float16),
    ("cuda:1", "auto", torch.float16),
    (torch.device("cuda", 0), "auto", torch.float16),
    ("mps", "auto", None),
    ("cpu", "fp32", None),
    ("cuda", "fp32", None),
    ("cpu", "bf16", torch.bfloat16),
    ("cuda:0", "bf16", torch.bfloat16),
    ("cpu", "fp16", torch.float16),
])
def test_encoding_dtype_by_device_and_param(device, precision, expected, cpu_without_bf16):
    assert encoding_dtype(device, precision) is expected


@pytest.fixture()
def cpu_without_bf16(monkeypatch):
    """This process's CPU as one with neither AMX nor AVX-512 BF16, whatever it really has."""
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)


@pytest.mark.parametrize("amx, avx512_bf16, expected", [
    (False, False, None), (True, False, torch.bfloat16), (False, True, torch.bfloat16), (True, True, torch.bfloat16)])
def test_cpu_auto_encodes_in_bf16_only_with_bf16_matrix_instructions(monkeypatch, amx, avx512_bf16, expected):
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
    assert encoding_dtype("cpu", "auto") is expected
    assert encoding_dtype("cpu", "fp32") is None  # explicit fp32 keeps fp32 on every CPU
    assert encoding_dtype("cuda", "auto") is torch.float16  # the GPU keeps its own default


@pytest.mark.parametrize("amx, avx512_bf16, device, precision, expected", [
    (False, False, "cpu", "auto", "fp32"), (False, True, "cpu", "auto", "bf16"), (True, False, "cpu", "auto", "bf16"),
    (True, True, "cpu", "fp32", "fp32"), (False, False, "cuda", "auto", "fp16"), (False, False, "cpu", "bf16", "bf16")])
def test_the_recorded_encoding_precision_is_the_dtype_encoding_uses(monkeypatch, amx, avx512_bf16, device, precision,
                                                                     expected):
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
    assert encoding_precision(device, precision) == expected


def test_unknown_precision_is_refused():
    with pytest.raises(StageError, match="fp8"):
        encoding_dtype("cuda", "fp8")


@pytest.mark.parametrize("batch_size, device, expected", [
    (None, "cpu", 64),  # the batch the pipeline always encoded with on CPU
    (None, torch.device("cpu"), 64),
    (None, "cuda", 512),
    (None, torch.device("cuda", 1), 512),
    (32, "cuda", 32),
    (7, "cpu", 7),
])
def test_auto_batch_size_by_device(batch_size, device, expected):
    assert encode_batch_size(batch_size, device) == expected


def test_params_accept_auto_batch_size_for_encoding_only():
    config = config_with({"embed": {"batch_size": "auto"}, "evaluate": {"batch_size": "auto"}})
    assert config.embed.batch_size is None and config.evaluate.batch_size is None
    default = config_with({})
    assert isinstance(default.embed.batch_size, int) and isinstance(default.evaluate.batch_size, int)
    with pytest.raises(StageError) as raised:
        config_with({"embed": {"batch_size": "big"}, "evaluate": {"batch_size": 0}, "train": {"batch_size": "auto"}})
    lines = str(raised.value).splitlines()
    assert len(lines) == 3
    assert any("embed.batch_size" in line and '"auto"' in line and "'big'" in line for line in lines)
    assert any("evaluate.batch_size" in line and '"auto"' in line for line in lines)
    assert any("train.batch_size" in line and '"auto"' not in line for line in lines)  # a method param: no auto


def test_precision_params_are_checked():
    assert config_with({"embed": {"precision": "bf16"}}).embed.precision == "bf16"
    with pytest.raises(StageError, match="evaluate.precision"):
        config_with({"evaluate": {"precision": "half"}})


# ---------------------------------------------------------------- CPU: unchanged
@pytest.mark.parametrize("batch_size", [64, None, 5])
def test_cpu_auto_embeddings_equal_fp32_bit_for_bit(tiny_model_dir, one_torch_thread, batch_size, cpu_without_bf16):
    model = load_model(tiny_model_dir, "cpu")
    # what the embed stage ran before precision existed
    before = model.encode(SENTENCES, batch_size=batch_size or 64, normalize_embeddings=True, convert_to_numpy=True,
                          show_progress_bar=False).astype(np.float32)
    for precision in ("auto", "fp32"):
        now = embed_sentences(model, SENTENCES, batch_size, show_progress_bar=False, precision=precision)
        assert now.dtype == np.float32 and now.shape == before.shape
        assert now.tobytes() == before.tobytes()


def test_cpu_auto_scoring_equals_fp32(tiny_model_dir, one_torch_thread, cpu_without_bf16):
    model = load_model(tiny_model_dir, "cpu")
    documents = documents_frame()
    queries = documents[documents["split"].isin(["val", "test"])]
    bodies = model.encode(documents["body"].tolist(), batch_size=64, normalize_embeddings=True)
    titles = model.encode(queries["title"].tolist(), batch_size=64, normalize_embeddings=True)
    expected = hand_ranks(titles, bodies, queries.index.to_numpy())
    for batch_size in (64, None):
        config = config_with({"evaluate": {"batch_size": batch_size or "auto", "precision": "auto"}})
        _, ranks = score_model(model, documents, config.evaluate)
        assert ranks["doc_id"].tolist() == queries["doc_id"].tolist()
        np.testing.assert_array_equal(ranks["rank"].to_numpy(), expected)


# ---------------------------------------------------------------- the half-precision path
def test_half_precision_embeddings_are_those_of_a_cast_model(tiny_model_dir, one_torch_thread):
    """fp16 on the CPU: the weights cast for the call (CUDA's path, for either half)."""
    model = load_model(tiny_model_dir, "cpu")
    before = state_of(model)
    fp32 = embed_sentences(model, SENTENCES, 8, show_progress_bar=False)
    half = embed_sentences(model, SENTENCES, 8, show_progress_bar=False, precision="fp16")
    assert_same_state(model, before)  # mining or scoring never rounds the model that trains next

    cast = load_model(tiny_model_dir, "cpu").to(torch.float16)  # the oracle: a separate copy cast by hand
    raw = cast.encode(SENTENCES, batch_size=8, convert_to_tensor=True).double().numpy()
    expected = raw / np.linalg.norm(raw, axis=1, keepdims=True)
    assert half.dtype == np.float32 and half.shape == fp32.shape
    np.testing.assert_allclose(half, expected, atol=2e-7)
    np.testing.assert_allclose(np.linalg.norm(half, axis=1), 1.0, atol=1e-6)  # normalised in float32
    assert not np.array_equal(half, fp32)  # it did run in half precision
    assert (half * fp32).sum(axis=1).min() > 0.99


def test_cpu_bf16_embeddings_are_those_of_autocast_with_fp32_weights(tiny_model_dir, one_torch_thread):
    """bf16 on the CPU: encode under torch's CPU autocast (LayerNorm and softmax in fp32), the
    model's weights untouched and fp32 throughout."""
    model = load_model(tiny_model_dir, "cpu")
    before = state_of(model)
    fp32 = embed_sentences(model, SENTENCES, 8, show_progress_bar=False)
    half = embed_sentences(model, SENTENCES, 8, show_progress_bar=False, precision="bf16")
    assert_same_state(model, before)
    oracle = load_model(tiny_model_dir, "cpu")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        raw = oracle.encode(SENTENCES, batch_size=8, convert_to_tensor=True).double().numpy()
    expected = raw / np.linalg.norm(raw, axis=1, keepdims=True)
    np.testing.assert_allclose(half, expected, atol=2e-7)
    assert half.dtype == np.float32 and not np.array_equal(half, fp32)
    assert (half * fp32).sum(axis=1).min() > 0.99


def test_half_precision_scoring_ranks_with_the_cast_model(tiny_model_dir, one_torch_thread):
    model = load_model(tiny_model_dir, "cpu")
    documents = documents_frame()
    queries = documents[documents["split"].isin(["val", "test"])]
    cast = load_model(tiny_model_dir, "cpu").to(torch.float16)

    def unit(texts):
        raw = cast.encode(texts, batch_size=4, convert_to_tensor=True).double().numpy()
        return raw / np.linalg.norm(raw, axis=1, keepdims=True)

    expected = hand_ranks(unit(queries["title"].tolist()), unit(documents["body"].tolist()), queries.index.to_numpy())
    config = config_with({"evaluate": {"batch_size": 4, "precision": "fp16"}})
    before = state_of(model)
    _, ranks = score_model(model, documents, config.evaluate)
    np.testing.assert_array_equal(ranks["rank"].to_numpy(), expected)
    np.testing.assert_array_equal(rank_queries(model, documents, 4, "fp16")["rank"].to_numpy(), expected)
    assert_same_state(model, before)


def test_weights_come_back_after_an_error(tiny_model_dir):
    model = load_model(tiny_model_dir, "cpu")
    before = state_of(model)
    with pytest.raises(RuntimeError, match="inside"):
        with weights_in(model, torch.bfloat16):
            assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
            raise RuntimeError("inside the block")
    assert_same_state(model, before)
    with weights_in(model, None):  # None: nothing is cast
        assert {p.dtype for p in model.parameters()} == {torch.float32}


def test_overflow_in_half_precision_is_a_clear_error(tiny_model_dir, one_torch_thread):
    model = load_model(tiny_model_dir, "cpu")
    with torch.no_grad():
        model[0].auto_model.embeddings.word_embeddings.weight.mul_(1e8)  # beyond fp16's range (65504)
    assert np.isfinite(embed_sentences(model, SENTENCES[:4], 4, show_progress_bar=False)).all()
    with pytest.raises(StageError, match="non-finite embeddings in fp16"):
        embed_sentences(model, SENTENCES[:4], 4, show_progress_bar=False, precision="fp16")


def test_a_nan_model_is_an_error_in_fp32_too(tiny_model_dir, one_torch_thread):
    """A model whose weights went NaN (a diverged training) cannot be scored: every path checks."""
    model = load_model(tiny_model_dir, "cpu")
    with torch.no_grad():
        model[0].auto_model.embeddings.word_embeddings.weight.fill_(float("nan"))
    for precision in ("fp32", "bf16"):
        with pytest.raises(StageError, match="non-finite embeddings"):
            embed_sentences(model, SENTENCES[:4], 4, show_progress_bar=False, precision=precision)

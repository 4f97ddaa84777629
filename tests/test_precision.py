"""Precision and encoding batch size (infocse/models.py, embedding.py, retrieval.py, params): one
plain `precision` param, checked against the device (a setting it cannot run at speed is one
line); fp32 gives the plain `encode` outputs bit for bit; the half-precision path (run here on the
CPU in bf16 and fp16, below the stage's check) gives unit float32 vectors equal to those of a model
cast by hand, and leaves the model's own weights exactly as they were."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import TOPICS, config_with, tiny_documents

from infocse.embedding import embed_sentences
from infocse.errors import StageError
from infocse.models import check_precision, encode_batching, encoding_dtype, load_model, weights_in
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
@pytest.fixture()
def cpu_without_bf16(monkeypatch):
    """This process's CPU as one with neither AMX nor AVX-512 BF16, whatever it really has."""
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)


@pytest.mark.parametrize("precision, expected", [("fp32", None), ("bf16", torch.bfloat16), ("fp16", torch.float16)])
def test_encoding_dtype_is_the_param_on_every_device(precision, expected):
    assert encoding_dtype(precision) is expected


@pytest.mark.parametrize("amx, avx512_bf16, cuda_bf16, device, precision", [
    (False, False, False, "cpu", "fp32"), (False, False, False, "cuda", "fp32"), (False, False, False, "mps", "fp32"),
    (True, False, False, "cpu", "bf16"), (False, True, False, "cpu", "bf16"),
    (False, False, True, "cuda", "bf16"), (False, False, True, torch.device("cuda", 1), "bf16"),
    (False, False, False, "cuda", "fp16"), (False, False, False, "cuda:0", "fp16")])
def test_a_precision_the_device_runs_is_what_runs(monkeypatch, amx, avx512_bf16, cuda_bf16, device, precision):
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: cuda_bf16)
    assert check_precision(device, precision) == precision


@pytest.mark.parametrize("device, precision, message", [
    ("cpu", "bf16", "this CPU has no bf16 units .* set `precision: fp32`"),
    ("cpu", "fp16", "fp16, which needs a CUDA GPU, and this stage runs on cpu: set `precision: fp32`"),
    ("mps", "fp16", "needs a CUDA GPU"),
    ("cuda:0", "bf16", r"bf16, which this GPU \(cuda:0\) does not support: set `precision: fp16` or fp32"),
    ("cuda", "auto", "must be fp32, bf16 or fp16, got 'auto'"),
])
def test_a_precision_the_device_cannot_run_is_one_line(monkeypatch, cpu_without_bf16, device, precision, message):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: False)
    with pytest.raises(StageError, match=message) as raised:
        check_precision(device, precision)
    assert "\n" not in str(raised.value)


def test_unknown_precision_is_refused():
    with pytest.raises(StageError, match="fp8"):
        encoding_dtype("fp8")


@pytest.mark.parametrize("batch_size, device, expected", [
    (None, "cpu", (64, None)),  # the batch the pipeline always encoded with on CPU
    (None, torch.device("cpu"), (64, None)),
    (None, "cuda", (None, 65536)),  # a token budget: 512 texts of 128 tokens
    (None, torch.device("cuda", 1), (None, 65536)),
    (32, "cuda", (32, None)),
    (7, "cpu", (7, None)),
])
def test_auto_batch_size_by_device(batch_size, device, expected):
    assert encode_batching(batch_size, device) == expected


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


def test_precision_is_one_plain_param():
    """One value for every stage, no `auto`; the per-stage keys of older params files are named."""
    config = config_with({"precision": "bf16"})
    assert config.precision == config.embed.precision == config.evaluate.precision == "bf16"
    assert config.train.precision == config.finetune.precision == "bf16"
    assert config_with({}).precision == "fp32"  # the default: the same outputs on every machine
    with pytest.raises(StageError) as raised:
        config_with({"precision": "auto", "embed": {"precision": "bf16"}, "finetune": {"precision": "fp32"}})
    lines = str(raised.value).splitlines()
    assert len(lines) == 3
    assert any("params `precision` must be one of ['fp32', 'bf16', 'fp16'], got 'auto'" in line for line in lines)
    assert any("`embed.precision` ('bf16') is now the one top-level `precision`" in line for line in lines)
    assert any("`finetune.precision`" in line for line in lines)


# ---------------------------------------------------------------- CPU: unchanged
@pytest.mark.parametrize("batch_size", [64, None, 5])
def test_cpu_fp32_embeddings_are_the_plain_encode_bit_for_bit(tiny_model_dir, one_torch_thread, batch_size):
    model = load_model(tiny_model_dir, "cpu")
    # what the embed stage ran before precision existed
    before = model.encode(SENTENCES, batch_size=batch_size or 64, normalize_embeddings=True, convert_to_numpy=True,
                          show_progress_bar=False).astype(np.float32)
    now = embed_sentences(model, SENTENCES, batch_size, show_progress_bar=False, precision="fp32")
    assert now.dtype == np.float32 and now.shape == before.shape
    assert now.tobytes() == before.tobytes()


def test_cpu_fp32_scoring_ranks_with_the_plain_encode(tiny_model_dir, one_torch_thread):
    model = load_model(tiny_model_dir, "cpu")
    documents = documents_frame()
    queries = documents[documents["split"].isin(["val", "test"])]
    bodies = model.encode(documents["body"].tolist(), batch_size=64, normalize_embeddings=True)
    titles = model.encode(queries["title"].tolist(), batch_size=64, normalize_embeddings=True)
    expected = hand_ranks(titles, bodies, queries.index.to_numpy())
    for batch_size in (64, None):
        config = config_with({"evaluate": {"batch_size": batch_size or "auto"}})
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
    config = config_with({"evaluate": {"batch_size": 4}, "precision": "fp16"})
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

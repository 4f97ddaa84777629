"""Sentence embeddings for mining and scoring: unit length, float32, one row per text, in input order."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from infocse.errors import StageError
from infocse.models import CPU_ENCODE_BATCH_SIZE, device_type, encode_batching, encoding_dtype, weights_in
from infocse.tokens import tokenizable, tokens_of


def reduced_precision(model, dtype):
    """How a half-precision encode runs. bf16 on the CPU: under autocast, where the matrix
    products run in bf16 and LayerNorm, softmax and the pooling stay fp32 (closer to fp32 than
    casting every weight: benchmarks/results/cpu_bf16.md; the products are where the time goes).
    Otherwise (fp16 and CUDA): the weights cast for this call, half the memory traffic."""
    import torch

    if device_type(model.device) == "cpu" and dtype == torch.bfloat16:
        return torch.autocast("cpu", dtype=dtype)
    return weights_in(model, dtype)


def count_batches(texts: list[str], batch_size: int) -> list[np.ndarray]:
    """`encode`'s batches: longest text (in characters) first, `batch_size` texts each. The same
    batches pad the same way, so fp32 on the CPU gives `encode`'s embeddings bit for bit."""
    order = np.argsort([-len(text) for text in texts])  # encode's own call (not stable: ties as it orders them)
    return [order[start:start + batch_size] for start in range(0, len(order), batch_size)]


def token_budget_batches(lengths: np.ndarray, budget: int) -> list[np.ndarray]:
    """Longest first (in tokens), each batch as many texts as fit `budget` padded tokens: short
    texts go in big batches, long ones in small, and the padding is what the sort leaves."""
    order = np.argsort(-lengths, kind="stable")
    batches, start = [], 0
    while start < len(order):
        size = max(1, budget // int(lengths[order[start]]))
        batches.append(order[start:start + size])
        start += size
    return batches


def embed_sentences(model, texts: list[str], batch_size: int | None, show_progress_bar: bool = True,
                    precision: str = "fp32") -> np.ndarray:
    """A transformer model's texts are tokenized once (`infocse.tokens`); a worker thread pads (and on CUDA pins)
    the next batch while the model computes this one; the vectors stay on the device until the
    end, normalised in float32, and come back in one copy. `batch_size` None is params `auto`:
    on CUDA a token budget, elsewhere `encode`'s 64 (`infocse.models.encode_batching`).
    `precision` is params `precision` (the stage checked it against the device). Non-finite
    vectors are an error in every precision: a NaN would rank nothing and be ranked by nothing,
    and silently spoil mining and scores."""
    import torch
    from tqdm.auto import tqdm

    device = model.device
    dtype = encoding_dtype(precision)
    if len(texts) == 0:
        return np.zeros((0, model.get_sentence_embedding_dimension()), dtype=np.float32)
    size, budget = encode_batching(batch_size, device)
    if not tokenizable(model):  # the library's own `encode`, normalised in the precision it ran in
        with reduced_precision(model, dtype):
            vectors = model.encode(texts, batch_size=size or CPU_ENCODE_BATCH_SIZE, normalize_embeddings=True,
                                   convert_to_numpy=True, show_progress_bar=show_progress_bar)
        return finite(np.asarray(vectors, dtype=np.float32), precision)
    tokens = tokens_of(model, texts)
    batches = token_budget_batches(tokens.lengths, budget) if budget else count_batches(texts, size)
    pin = device_type(device) == "cuda"

    def prepared(rows):
        features = {"rows": torch.from_numpy(rows), **tokens.batch(rows)}
        return {key: value.pin_memory() if pin and torch.is_tensor(value) else value for key, value in features.items()}

    vectors = None
    model.eval()
    with torch.inference_mode(), reduced_precision(model, dtype), ThreadPoolExecutor(1) as worker:
        upcoming = worker.submit(prepared, batches[0])
        for number in tqdm(range(len(batches)), desc="Batches", disable=not show_progress_bar):
            features = upcoming.result()
            if number + 1 < len(batches):
                upcoming = worker.submit(prepared, batches[number + 1])
            features = {key: value.to(device, non_blocking=True) if torch.is_tensor(value) else value
                        for key, value in features.items()}
            rows = features.pop("rows")
            embedded = torch.nn.functional.normalize(model(features)["sentence_embedding"].float(), p=2, dim=1)
            if vectors is None:
                vectors = torch.empty((len(texts), embedded.shape[1]), dtype=torch.float32, device=device)
            vectors[rows] = embedded
    return finite(vectors.cpu().numpy(), precision)


def finite(vectors: np.ndarray, precision: str) -> np.ndarray:
    if not np.isfinite(vectors).all():
        raise StageError(f"the model gave non-finite embeddings in {precision} (its weights are broken, or its "
                         "activations overflow that precision): retrain it, or set params `precision: fp32`")
    return vectors

"""Sentence embeddings for mining and scoring: unit length, float32, one row per text, in input order."""

from __future__ import annotations

import numpy as np

from infocse.errors import StageError
from infocse.models import device_type, encode_batch_size, encoding_dtype, weights_in


def reduced_precision(model, dtype):
    """How a half-precision encode runs. bf16 on the CPU: under autocast, where the matrix
    products run in bf16 and LayerNorm, softmax and the pooling stay fp32 (closer to fp32 than
    casting every weight: benchmarks/results/cpu_bf16.md; the products are where the time goes).
    Otherwise (fp16 and CUDA): the weights cast for this call, half the memory traffic."""
    import torch

    if device_type(model.device) == "cpu" and dtype == torch.bfloat16:
        return torch.autocast("cpu", dtype=dtype)
    return weights_in(model, dtype)


def embed_sentences(model, texts: list[str], batch_size: int | None, show_progress_bar: bool = True,
                    precision: str = "fp32") -> np.ndarray:
    """`model.encode` sorts by length internally and restores the input order.

    `batch_size` None is params `auto` (by device); `precision` is params `precision` (the stage
    checked it against the device: `infocse.models.check_precision`). In fp32 this is the plain `encode` call, so its output is what it always
    was. In half precision (`reduced_precision`) the vectors stay on the device until the end (no
    copy and sync per batch, so the next batch is tokenized while the GPU works), and they are
    normalised in float32. Non-finite vectors are an error in every precision: a NaN would rank
    nothing and be ranked by nothing, and silently spoil mining and scores."""
    device = model.device
    batch_size = encode_batch_size(batch_size, device)
    dtype = encoding_dtype(precision)
    if dtype is None or len(texts) == 0:
        vectors = model.encode(texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True,
                               show_progress_bar=show_progress_bar).astype(np.float32)
    else:
        import torch

        with reduced_precision(model, dtype):
            encoded = model.encode(texts, batch_size=batch_size, convert_to_tensor=True,
                                   show_progress_bar=show_progress_bar).float()
        vectors = torch.nn.functional.normalize(encoded, dim=1).cpu().numpy()
    if not np.isfinite(vectors).all():
        raise StageError(f"the model gave non-finite embeddings in {'fp32' if dtype is None else precision} (its "
                         "weights are broken, or its activations overflow that precision): retrain it, or set "
                         "params `precision: fp32`")
    return vectors

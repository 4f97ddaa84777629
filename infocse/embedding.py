"""Sentence embeddings for mining and scoring: unit length, float32, one row per text, in input order."""

from __future__ import annotations

import numpy as np

from infocse.errors import StageError
from infocse.models import encode_batch_size, encoding_dtype, weights_in


def embed_sentences(model, texts: list[str], batch_size: int | None, show_progress_bar: bool = True,
                    precision: str = "fp32") -> np.ndarray:
    """`model.encode` sorts by length internally and restores the input order.

    `batch_size` None is params `auto` (by device); `precision` is params `embed.precision` or
    `evaluate.precision`. In fp32 this is the plain `encode` call, so its output is what it always
    was. In half precision the weights are cast for this call only, the vectors stay on the device
    until the end (no copy and sync per batch, so the next batch is tokenized while the GPU works),
    and they are normalised in float32."""
    device = model.device
    batch_size = encode_batch_size(batch_size, device)
    dtype = encoding_dtype(device, precision)
    if dtype is None or len(texts) == 0:
        return model.encode(texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True,
                            show_progress_bar=show_progress_bar).astype(np.float32)
    import torch

    with weights_in(model, dtype):
        vectors = model.encode(texts, batch_size=batch_size, convert_to_tensor=True,
                               show_progress_bar=show_progress_bar).float()
    if not bool(torch.isfinite(vectors).all()):
        raise StageError(f"the model gave non-finite embeddings in {precision} (its activations overflow that "
                         "precision): set params `embed.precision` / `evaluate.precision` to bf16 or fp32")
    return torch.nn.functional.normalize(vectors, dim=1).cpu().numpy()

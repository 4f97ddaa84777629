"""Sentence embeddings for mining: unit length, float32, one row per text, in input order."""

from __future__ import annotations

import numpy as np


def embed_sentences(model, texts: list[str], batch_size: int, show_progress_bar: bool = True) -> np.ndarray:
    """`model.encode` sorts by length internally and restores the input order."""
    return model.encode(texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True,
                        show_progress_bar=show_progress_bar).astype(np.float32)

"""embed@t: encode every training sentence with model t-1 (L2-normalised), cached as an output."""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from stages.common import (
    SENTENCES,
    IterationPaths,
    iteration_is_active,
    load_model,
    load_params,
    positive_int,
    run_stage,
    save_numpy,
    write_json,
)


def embed_sentences(model, texts: list[str], batch_size: int) -> np.ndarray:
    """Unit-length float32 embeddings, one row per text, in input order."""
    return model.encode(texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True,
                        show_progress_bar=True).astype(np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iteration", type=int, required=True)
    t = parser.parse_args().iteration
    params = load_params()
    paths = IterationPaths(t)
    started = time.perf_counter()
    if iteration_is_active(params, t):
        texts = pd.read_parquet(SENTENCES, columns=["text"])["text"].tolist()
        model = load_model(IterationPaths(t - 1).model, params.get("device"), params["embed"]["max_seq_length"])
        embeddings = embed_sentences(model, texts, positive_int(params, "embed.batch_size"))
    else:
        print(f"iteration {t}: skipped (early stopping)")
        embeddings = np.empty((0, 0), np.float32)
    seconds = time.perf_counter() - started
    save_numpy(embeddings, paths.embeddings)
    write_json(paths.metrics / "embed.json", {"iteration": t, "sentences": len(embeddings), "seconds": seconds,
                                              "sentences_per_second": len(embeddings) / seconds if len(embeddings) else 0.0})


if __name__ == "__main__":
    run_stage(main)

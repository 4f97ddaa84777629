"""embed@t: encode every training sentence with model t-1 (L2-normalised), cached as an output.

Round 1 may be mined by another model than f_0 (`idc.first_round_annotator`, see stages/annotator.py).
`engine.name: ray` encodes with a pool of Ray model actors instead (stages/ray_engine.py), same output.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd

from stages.common import (
    ANNOTATOR_MODEL,
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
from stages.ray_engine import embed_with_ray, engine_settings


def embed_sentences(model, texts: list[str], batch_size: int, show_progress_bar: bool = True) -> np.ndarray:
    """Unit-length float32 embeddings, one row per text, in input order."""
    return model.encode(texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True,
                        show_progress_bar=show_progress_bar).astype(np.float32)


def mining_model_path(params: dict, t: int) -> Path:
    """Model t-1, except in round 1 when a separate first-round annotator is set."""
    if t == 1 and str(params["idc"].get("first_round_annotator") or "current") != "current":
        return ANNOTATOR_MODEL
    return IterationPaths(t - 1).model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iteration", type=int, required=True)
    t = parser.parse_args().iteration
    params = load_params()
    paths = IterationPaths(t)
    engine = engine_settings(params)
    started = time.perf_counter()
    active = iteration_is_active(params, t)
    if active and engine.name == "ray":  # writes the output as it goes
        sentences = embed_with_ray(engine, params, mining_model_path(params, t), paths.embeddings)
        seconds = time.perf_counter() - started
    else:
        if active:
            texts = pd.read_parquet(SENTENCES, columns=["text"])["text"].tolist()
            model = load_model(mining_model_path(params, t), params.get("device"), params["embed"]["max_seq_length"])
            embeddings = embed_sentences(model, texts, positive_int(params, "embed.batch_size"))
        else:
            print(f"iteration {t}: skipped (the loop stopped)")
            embeddings = np.empty((0, 0), np.float32)
        seconds = time.perf_counter() - started
        save_numpy(embeddings, paths.embeddings)
        sentences = len(embeddings)
    write_json(paths.metrics / "embed.json", {"iteration": t, "sentences": sentences, "seconds": seconds,
                                              "sentences_per_second": sentences / seconds if sentences else 0.0})


if __name__ == "__main__":
    run_stage(main)

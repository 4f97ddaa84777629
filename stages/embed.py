"""embed@t: every training sentence encoded by model t-1 (L2-normalised) ->
data/iterations/iter-t/embeddings.npy. Round 1 may be mined by a separate annotator model
(`idc.first_round_model`); `engine.name: ray` encodes with Ray model actors, same output."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd

from infocse.config import Config, load_config
from infocse.embedding import embed_sentences
from infocse.errors import run_stage
from infocse.io import save_numpy, write_json
from infocse.stopping import iteration_is_active
from infocse.models import CURRENT, load_model, stage_device
from infocse.paths import FIRST_ROUND_MODEL, SENTENCES, IterationPaths


def mining_model(config: Config, t: int) -> Path:
    """Model t-1, except in round 1 when a separate first-round annotator is set."""
    if t == 1 and config.idc.first_round_model != CURRENT:
        return FIRST_ROUND_MODEL
    return IterationPaths(t - 1).model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iteration", type=int, required=True)
    t = parser.parse_args().iteration
    config = load_config()
    device = stage_device(config)
    paths = IterationPaths(t)
    started = time.perf_counter()
    active = iteration_is_active(config, t)
    if active and config.engine.name == "ray":  # writes the output as it goes
        from infocse.engines.ray_embed import embed_with_ray

        sentences, ran = embed_with_ray(config, mining_model(config, t), paths.embeddings)
        seconds = time.perf_counter() - started
    else:
        if active:
            texts = pd.read_parquet(SENTENCES, columns=["text"])["text"].tolist()
            model = load_model(mining_model(config, t), device, config.embed.max_seq_length)
            embeddings = embed_sentences(model, texts, config.embed.batch_size, precision=config.precision)
        else:
            print(f"iteration {t}: skipped (the loop stopped)")
            embeddings = np.empty((0, 0), np.float32)
        seconds = time.perf_counter() - started
        save_numpy(embeddings, paths.embeddings)
        sentences, ran = len(embeddings), None
    write_json(paths.metrics / "embed.json", {
        "iteration": t, "sentences": sentences, "seconds": seconds,
        "sentences_per_second": sentences / seconds if sentences else 0.0,
        "device": device, "precision": ran or config.precision})


if __name__ == "__main__":
    run_stage(main)

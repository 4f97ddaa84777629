"""init: f_0, the model the InfoCSE loop starts from -> models/iterations/iter-0.

`init.method: none` keeps the seed model as it is. Otherwise the seed model first gets one round
of a classic annotator (CONPONO in the paper; SimCSE and ICT also converge) under the same pair
budget, batches and trainer as an IDC round. With `loop.max_iterations: 0` that round is the
whole run: this is how the baselines are run.
"""

from __future__ import annotations

import time

import pandas as pd

from infocse.baselines import baseline_pairs, training_length
from infocse.config import load_config
from infocse.corpora.mix import sources_pair_precision
from infocse.errors import StageError, run_stage
from infocse.io import write_json, write_parquet
from infocse.live import LiveCurves
from infocse.models import load_named_model, mask_token_of, save_model, stage_device
from infocse.pairs import empty_pair_table
from infocse.paths import SENTENCES, IterationPaths
from infocse.seeds import derived_seed
from infocse.training import train_at_length


def main() -> None:
    config = load_config()
    method = config.init.method
    paths = IterationPaths(0)
    started = time.perf_counter()
    device = stage_device(config)  # a bad device or precision fails here, before any model loads
    if method == "none":
        model = load_named_model(config.seed_model, device="cpu")
        pairs, pair_stats, train_stats = empty_pair_table(), {"method": method}, {"skipped": True}
        LiveCurves(paths.live, ("train",))  # empty curves: the stage's outputs exist
    else:
        model = load_named_model(config.seed_model, device)
        pairs, pair_stats = baseline_pairs(method, pd.read_parquet(SENTENCES), config.baselines, config.budget,
                                            derived_seed(config.seed, "pairs", 0), mask_token_of(model))
        if pairs.empty:
            raise StageError(f"init method {method!r} found no pairs in the corpus")
        pair_stats.update(sources_pair_precision(pairs, SENTENCES))
        length = training_length(method, config.baselines, config.train.max_seq_length)
        train_stats = {"skipped": False, "pairs": len(pairs), "max_seq_length": length,
                       **train_at_length(model, pairs, config.train, derived_seed(config.seed, "train", 0), device,
                                         label=f"init ({method})", max_seq_length=length,
                                         live=LiveCurves(paths.live, ("train",)))}
    save_model(model, paths.model)
    write_parquet(pairs, paths.pairs)
    write_json(paths.metrics / "pairs.json", {"iteration": 0, **pair_stats})
    write_json(paths.metrics / "train.json", {"iteration": 0, "method": method, **train_stats,
                                              "seconds": time.perf_counter() - started})
    print(f"f_0 = seed model {config.seed_model!r}" + ("" if method == "none" else
                                                       f" + one round of {method} ({len(pairs)} pairs)"))


if __name__ == "__main__":
    run_stage(main)

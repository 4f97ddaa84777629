"""cluster@t: Intra-Document Clustering of iteration t's embeddings -> the positive pairs
data/iterations/iter-t/pairs.parquet, capped by the pair budget (`engine.name: ray` mines
partitions of whole documents on Ray, same table)."""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from infocse.config import load_config
from infocse.corpora.mix import sources_pair_precision
from infocse.errors import StageError, run_stage
from infocse.idc import cluster_sentences
from infocse.io import write_json, write_parquet
from infocse.stopping import iteration_is_active
from infocse.pairs import empty_pair_table
from infocse.paths import SENTENCES, IterationPaths
from infocse.seeds import derived_seed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iteration", type=int, required=True)
    t = parser.parse_args().iteration
    config = load_config()
    paths = IterationPaths(t)
    started = time.perf_counter()
    if iteration_is_active(config, t):
        seed = derived_seed(config.seed, "pairs", t)
        if config.engine.name == "ray":
            from infocse.engines.ray_cluster import cluster_with_ray

            pairs, stats = cluster_with_ray(config, paths.embeddings, seed=seed)
        else:
            pairs, stats = cluster_sentences(config.idc, config.budget, seed, pd.read_parquet(SENTENCES),
                                             np.load(paths.embeddings))
        if pairs.empty:
            raise StageError("IDC found no positive pairs (no cluster has two sentences)")
        stats.update(sources_pair_precision(pairs, SENTENCES))
        print(f"iteration {t}: {stats['clusters']} clusters, {stats['pairs_mined']} pairs mined, {len(pairs)} kept")
    else:
        pairs, stats = empty_pair_table(), {}
        print(f"iteration {t}: skipped (the loop stopped)")
    stats.update({"iteration": t, "skipped": pairs.empty, "seconds": time.perf_counter() - started})
    write_parquet(pairs, paths.pairs)
    write_json(paths.metrics / "pairs.json", stats)


if __name__ == "__main__":
    run_stage(main)

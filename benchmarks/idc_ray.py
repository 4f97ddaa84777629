"""IDC throughput of the cluster stage: the local engine vs the ray engine on 1 and 2 workers.

    python -m benchmarks.idc_ray [--sentences 1000000] [--partition-sentences 50000] [--rounds 2]

Synthetic corpus (benchmarks.idc_speed's: random 384-d unit vectors in documents of BBC-like
sizes), written as the stage's inputs: a sentences.parquet (sentence_id, doc_id, a short text) and
an embeddings.npy. Each engine runs the whole stage function on those files with the pipeline's
default IDC and pair budget: local = read the table and the embeddings, `cluster_sentences`;
ray = `cluster_with_ray` on a local Ray started with 1 or 2 CPUs (= workers), Ray's start-up
excluded and a warm-up call first. Reported: sentences/s over all rounds for the whole stage and
for the clustering alone (`idc_seconds`), and whether ray's pair table equals local's.
"""

from __future__ import annotations

import argparse
import logging
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.idc_speed import synthetic_corpus
from infocse.config import Budget, Config, EngineConfig, load_config
from infocse.engines.ray import import_ray
from infocse.engines.ray_cluster import cluster_with_ray
from infocse.idc import cluster_sentences
from infocse.io import write_parquet


def pipeline_config() -> Config:
    """params.yaml with the pipeline's default IDC (partition, K = 1) and pair budget."""
    config = load_config()
    return config.model_copy(update=dict(seed=0, budget=Budget(max_pairs_per_document=20, max_pairs=2560),
                               idc=config.idc.model_copy(update=dict(method="partition", k=1))))


def write_inputs(folder: Path, n_sentences: int) -> tuple[Path, Path]:
    vectors, docs = synthetic_corpus(n_sentences, 384, seed=0)
    sentences = pd.DataFrame({"sentence_id": np.arange(len(docs), dtype=np.int64),
                              "doc_id": [f"d{code}" for code in docs],
                              "text": [f"sentence {i} of document {code}" for i, code in enumerate(docs)]})
    write_parquet(sentences, folder / "sentences.parquet")
    np.save(folder / "embeddings.npy", vectors)
    return folder / "sentences.parquet", folder / "embeddings.npy"


def run_local(config: Config, sentences_path: Path, embeddings_path: Path) -> tuple[pd.DataFrame, float, float]:
    started = time.perf_counter()
    pairs, stats = cluster_sentences(config.idc, config.budget, config.seed, pd.read_parquet(sentences_path),
                                     np.load(embeddings_path))
    return pairs, time.perf_counter() - started, stats["idc_seconds"]


def run_ray(config: Config, sentences_path: Path, embeddings_path: Path) -> tuple[pd.DataFrame, float, float]:
    started = time.perf_counter()
    pairs, stats = cluster_with_ray(config, embeddings_path, sentences_path)
    return pairs, time.perf_counter() - started, stats["idc_seconds"]


def report(name: str, n: int, runs: list[tuple[float, float]]) -> float:
    stage, idc = sum(r[0] for r in runs), sum(r[1] for r in runs)
    print(f"{name}: stage {len(runs) * n / stage:,.0f} sentences/s ({stage:.1f} s over {len(runs)} runs), "
          f"clustering alone {len(runs) * n / idc:,.0f} sentences/s")
    return len(runs) * n / stage


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sentences", type=int, default=1_000_000)
    parser.add_argument("--partition-sentences", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    ray = import_ray()
    logging.getLogger("ray").setLevel(logging.WARNING)  # Ray Data's per-dataset progress lines
    print(f"machine: {platform.processor() or platform.machine()}, ray {ray.__version__}")
    with tempfile.TemporaryDirectory() as folder:
        sentences_path, embeddings_path = write_inputs(Path(folder), args.sentences)
        n = args.sentences
        print(f"synthetic corpus: {n:,} sentences, partitions of <= {args.partition_sentences:,} sentences")
        config = pipeline_config()
        reference, *_ = run_local(config, sentences_path, embeddings_path)
        local_rate = report("local", n, [run_local(config, sentences_path, embeddings_path)[1:]
                                         for _ in range(args.rounds)])
        engine = EngineConfig(name="ray", partition_sentences=args.partition_sentences)
        config = config.model_copy(update=dict(engine=engine))
        for workers in (1, 2):
            ray.init(address="local", num_cpus=workers, include_dashboard=False)
            try:
                pairs, *_ = run_ray(config, sentences_path, embeddings_path)  # warm-up: workers, imports
                same = pairs.reset_index(drop=True).equals(reference.reset_index(drop=True))
                rate = report(f"ray, {workers} worker(s)", n,
                              [run_ray(config, sentences_path, embeddings_path)[1:] for _ in range(args.rounds)])
            finally:
                ray.shutdown()
            print(f"  ray {workers}/local stage throughput: {rate / local_rate:.2f}x; same pair table as local: {same}")


if __name__ == "__main__":
    main()

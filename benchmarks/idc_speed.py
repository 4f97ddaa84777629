"""IDC speed: vectorised clustering vs a per-document networkx version, and vs embedding time.

    python -m benchmarks.idc_speed [--sentences 1000000] [--embed-sample 2000]

Synthetic corpus: random unit vectors (384-d, like all-MiniLM-L6-v2) grouped into documents whose
sizes follow a log-normal fitted to BBC News bodies (median ~18 sentences). Timings exclude text
and file writing and include the pair indices. Embedding speed is measured on real BBC sentences
with the packaged all-MiniLM-L6-v2 at the pipeline's embed settings.
"""

from __future__ import annotations

import argparse
import itertools
import platform
import time

import networkx as nx
import numpy as np
import torch

from stages.cluster import mine_positive_pairs


def synthetic_corpus(n_sentences: int, dim: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    sizes = np.clip(rng.lognormal(np.log(18), 0.5, size=n_sentences // 5).astype(int), 1, 150)
    sizes = sizes[: np.searchsorted(np.cumsum(sizes), n_sentences) + 1]
    sizes[-1] -= sizes.sum() - n_sentences
    vectors = rng.standard_normal((n_sentences, dim), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors, np.repeat(np.arange(len(sizes)), sizes)


def networkx_pairs(embeddings: np.ndarray, doc_codes: np.ndarray, k: int) -> set[tuple[int, int]]:
    """The straightforward version: one graph per document, networkx components."""
    pairs = set()
    starts = np.flatnonzero(np.r_[True, doc_codes[1:] != doc_codes[:-1]])
    for start, end in zip(starts, np.r_[starts[1:], len(doc_codes)]):
        block = embeddings[start:end]
        similarity = block @ block.T
        np.fill_diagonal(similarity, -np.inf)
        graph = nx.Graph()
        graph.add_nodes_from(range(start, end))
        for i, row in enumerate(similarity):
            for j in np.argsort(-row, kind="stable")[: min(k, end - start - 1)]:
                graph.add_edge(start + i, start + int(j))
        for component in nx.connected_components(graph):
            pairs.update(itertools.combinations(sorted(component), 2))
    return pairs


def embedding_rate(sample: int) -> float:

    from stages.common import load_model, resolve_model_source
    from stages.prepare import build_sentence_table, read_bbc_news

    sentences, _ = build_sentence_table(read_bbc_news().head(400))
    texts = sentences["text"].tolist()[:sample]
    model = load_model(resolve_model_source("all-MiniLM-L6-v2"), device="cpu", max_seq_length=128)
    model.encode(texts[:64], batch_size=64)
    started = time.perf_counter()
    model.encode(texts, batch_size=64, normalize_embeddings=True)
    return len(texts) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sentences", type=int, default=1_000_000)
    parser.add_argument("--oracle-sentences", type=int, default=20_000)
    parser.add_argument("--embed-sample", type=int, default=2000)
    args = parser.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, torch threads {torch.get_num_threads()}")
    vectors, docs = synthetic_corpus(args.sentences, 384, seed=0)
    print(f"synthetic corpus: {len(vectors):,} sentences in {docs.max() + 1:,} documents")
    for k in (1, 2, 3):
        started = time.perf_counter()
        _, first, _ = mine_positive_pairs(vectors, docs, k)
        seconds = time.perf_counter() - started
        print(f"vectorised IDC K={k}: {seconds:.2f} s, {len(vectors) / seconds:,.0f} sentences/s, {len(first):,} pairs")
    small = args.oracle_sentences
    cut = np.searchsorted(docs, docs[small])  # whole documents only
    started = time.perf_counter()
    _, first, second = mine_positive_pairs(vectors[:cut], docs[:cut], 1)
    fast = time.perf_counter() - started
    started = time.perf_counter()
    oracle = networkx_pairs(vectors[:cut], docs[:cut], 1)
    slow = time.perf_counter() - started
    same = oracle == set(zip(first.tolist(), second.tolist()))
    print(f"on {cut:,} sentences, K=1: vectorised {cut / fast:,.0f} sentences/s, networkx {cut / slow:,.0f} "
          f"sentences/s ({slow / fast:.0f}x), same pairs: {same}")
    rate = embedding_rate(args.embed_sample)
    started = time.perf_counter()
    mine_positive_pairs(vectors, docs, 1)
    idc_rate = len(vectors) / (time.perf_counter() - started)
    print(f"embedding (all-MiniLM-L6-v2, max length 128): {rate:,.0f} sentences/s; "
          f"IDC time / embedding time for the same sentences: {rate / idc_rate:.3%}")


if __name__ == "__main__":
    main()

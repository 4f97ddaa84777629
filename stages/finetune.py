"""finetune@<start>: few-shot fine-tuning of a model on the labelled pairs, then its val/test metrics.

Starts: `f0` (iteration 0: the seed model, or the seed after one baseline round) and `best` (the
InfoCSE model chosen by validation; this is also InfoCSE++'s round 1). Training is the same
contrastive objective as the self-supervised rounds (symmetric in-batch negatives, here
query -> positive), with its own params in `finetune`.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import pandas as pd

from stages.common import (
    BEST_MODEL,
    DOCUMENTS,
    IterationPaths,
    load_model,
    load_params,
    positive_int,
    resolve_device,
    run_stage,
    save_model,
    sequence_length,
    write_json,
)
from stages.evaluate import next_state, score_model
from stages.labels import LABELS
from stages.train import train_on_pairs

STARTS = {"f0": IterationPaths(0).model, "best": BEST_MODEL}


def finetuned_model(name: str) -> Path:
    return Path(f"models/finetuned/{name}")


def finetuned_metrics(name: str) -> Path:
    """Scores and the InfoCSE++ state after fine-tuned model `name` (no timings: later rounds read it)."""
    return Path(f"metrics/finetuned/{name}.json")


def finetuned_timing(name: str) -> Path:
    return Path(f"metrics/finetuned/timings/{name}.json")


def finetune(model, labels: pd.DataFrame, params: dict, device: str) -> dict:
    """Train `model` in place on (query, positive) pairs at `finetune.max_seq_length`."""
    pairs = pd.DataFrame({"doc_id": labels["pair_id"], "text_a": labels["query"], "text_b": labels["positive"]})
    with sequence_length(model, positive_int(params, "finetune.max_seq_length")), tempfile.TemporaryDirectory() as scratch:
        stats = train_on_pairs(model, pairs, params["finetune"], int(params["seed"]), device, Path(scratch))
    return {key: stats[key] for key in ("steps", "train_loss", "pairs_used")}


def finetune_and_score(model, params: dict, device: str, documents: pd.DataFrame) -> dict:
    """Fine-tune on data/labels, then score on val and test (at the evaluation length)."""
    labels = pd.read_parquet(LABELS)
    train = finetune(model, labels, params, device)
    with sequence_length(model, positive_int(params, "evaluate.max_seq_length")):
        result, _ = score_model(params, model, documents)
    return {**result, "labels": len(labels), "train": train}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--start", choices=sorted(STARTS), required=True)
    start = parser.parse_args().start
    params = load_params()
    started = time.perf_counter()
    device = resolve_device(params.get("device"))
    model = load_model(STARTS[start], device)
    result = finetune_and_score(model, params, device, pd.read_parquet(DOCUMENTS))
    if start == "best":  # InfoCSE++ round 1: the state later rounds continue from
        state = next_state(None, 1, result["score"], positive_int(params, "plusplus.patience"))
        state["continue"] = state["continue"] and positive_int(params, "plusplus.max_rounds") > 1
        result.update({"round": 1, "stopped": False, **state})
    save_model(model, finetuned_model(start))
    write_json(finetuned_metrics(start), {"start": start, **result})
    write_json(finetuned_timing(start), {"seconds": time.perf_counter() - started})
    print(f"fine-tuned {start} on {result['labels']} labels: val {result['val']}, test {result['test']}")


if __name__ == "__main__":
    run_stage(main)

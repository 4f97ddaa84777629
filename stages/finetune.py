"""finetune@<start>: few-shot fine-tuning of a model on the labelled pairs, then its val/test
metrics -> models/finetuned/<start>. Starts: `f0` (iteration 0) and `best` (the InfoCSE model
chosen by validation; this is also InfoCSE++'s round 1)."""

from __future__ import annotations

import argparse
import time

import pandas as pd

from infocse.config import load_config
from infocse.errors import run_stage
from infocse.finetune import finetune_and_score
from infocse.io import write_json, write_placeholder
from infocse.live import LiveCurves
from infocse.models import load_model, save_model, stage_device
from infocse.paths import BEST_MODEL, DOCUMENTS, LABELS, IterationPaths, finetuned_live, finetuned_metrics, \
    finetuned_model, finetuned_timing
from infocse.stopping import first_round_state

STARTS = {"f0": IterationPaths(0).model, "best": BEST_MODEL}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--start", choices=sorted(STARTS), required=True)
    start = parser.parse_args().start
    config = load_config()
    device = stage_device(config)
    started = time.perf_counter()
    labels = pd.read_parquet(LABELS)
    live = LiveCurves(finetuned_live(start), ("finetune",))  # empty curves where nothing is fine-tuned
    if labels.empty:
        write_placeholder(finetuned_model(start), "no labelled pairs (the corpus has no titles): nothing to fine-tune")
        result = {"start": start, "skipped": True, "labels": 0, "val": {}, "test": {}}
        if start == "best":
            result.update({"round": 1, "stopped": True, "best_iteration": 1, "best_score": None, "since_best": 0,
                           "continue": False})
        print(f"fine-tuning {start}: skipped (no labelled pairs)")
    else:
        model = load_model(STARTS[start], device)
        result = finetune_and_score(model, labels, config, device, pd.read_parquet(DOCUMENTS), live=live)
        if start == "best":  # InfoCSE++ round 1: the state later rounds continue from
            result.update({"round": 1, "stopped": False, **first_round_state(config, result["score"])})
        save_model(model, finetuned_model(start))
        result = {"start": start, **result}
        print(f"fine-tuned {start} on {result['labels']} labels: val {result['val']}, test {result['test']}")
    write_json(finetuned_metrics(start), result)
    write_json(finetuned_timing(start), {"seconds": time.perf_counter() - started})


if __name__ == "__main__":
    run_stage(main)

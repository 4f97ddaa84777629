"""evaluate@t: retrieval of model t (titles -> all bodies) on the few-shot pool, val and test, and
the loop's state, stopped and selected on params `loop.validate_on` (val, or few-shot pool + val).

Writes the per-query ranks (data/ranks), the metrics with the best iteration so far
(metrics/iterations/iter-t/retrieval.json) and, on its own, whether iteration t+1 runs
(data/state/after-iter-t.json): early stopping on the validation metric only.
"""

from __future__ import annotations

import argparse
import time

import pandas as pd

from infocse.config import load_config
from infocse.errors import run_stage
from infocse.io import read_json, write_json, write_parquet
from infocse.stopping import iteration_is_active, next_state, stopped_state
from infocse.models import load_model, stage_device
from infocse.paths import DOCUMENTS, IterationPaths
from infocse.retrieval import LOOP_SPLITS, empty_ranks, score_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iteration", type=int, required=True)
    t = parser.parse_args().iteration
    config = load_config()
    device = stage_device(config)
    paths = IterationPaths(t)
    started = time.perf_counter()
    previous = read_json(IterationPaths(t - 1).retrieval) if t > 0 else None
    if iteration_is_active(config, t):
        documents = pd.read_parquet(DOCUMENTS)
        model = load_model(paths.model, device, config.evaluate.max_seq_length)
        scores, ranks = score_model(model, documents, config.evaluate, config.loop.validate_on, LOOP_SPLITS)
        score = scores.pop("score")
        if scores["validation_queries"] == 0:
            print(f"note: no validation queries (titled documents of {config.loop.validate_on}): nothing to stop or "
                  "select on; every iteration runs and the last one is kept")
        result = {"iteration": t, "stopped": False, **scores,
                  **next_state(previous, t, score, config.loop.patience, config.loop.max_iterations)}
    else:
        ranks = empty_ranks()
        result = {"iteration": t, "stopped": True, "val_metric": config.evaluate.metric, **stopped_state(previous)}
    write_parquet(ranks, paths.ranks)
    write_json(paths.retrieval, result)
    write_json(paths.continue_flag, {"continue": result["continue"]})
    write_json(paths.metrics / "evaluate.json", {
        "iteration": t, "seconds": time.perf_counter() - started,
        "device": device, "precision": config.precision})
    if result["stopped"]:
        print(f"iteration {t}: skipped (the loop stopped); best is iteration {result['best_iteration']}")
    elif result.get("val"):
        print(f"iteration {t}: validation ({config.loop.validate_on}) {result['validation']}, test {result['test']}")


if __name__ == "__main__":
    run_stage(main)

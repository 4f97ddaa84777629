"""select: the best iteration by the validation metric (params `loop.validate_on`) -> models/best
and metrics/best.json.

The loop state that evaluate@t carries already names the best iteration; iterations after the
stop did no work and cannot be chosen.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from infocse.config import VALIDATION_QUERIES, load_config
from infocse.errors import run_stage
from infocse.io import atomic_output, read_json, write_json
from infocse.model_card import model_card
from infocse.paths import BEST_METRICS, BEST_MODEL, CORPUS_METRICS, IterationPaths


def training_rounds(best: int) -> list[dict]:
    """The rounds that trained the chosen model: the init round (when it trained), then 1..best."""
    rounds = []
    for t in range(best + 1):
        train = read_json(IterationPaths(t).metrics / "train.json")
        if not train.get("skipped", True):
            rounds.append({"round": "init" if t == 0 else t, "pairs": train.get("pairs", 0), "steps": train["steps"],
                           "train_loss": train["train_loss"]})
    return rounds


def main() -> None:
    config = load_config()
    states = [read_json(IterationPaths(t).retrieval) for t in [0, *config.iterations]]
    best = states[-1]["best_iteration"]
    chosen, seed = states[best], states[0]
    summary = {"iteration": best, "val_metric": chosen["val_metric"], "val": chosen.get("val", {}),
               "test": chosen.get("test", {}),
               "iterations_run": sum(not state["stopped"] for state in states) - 1,
               "test_delta_vs_seed": {name: value - seed["test"][name] for name, value in chosen.get("test", {}).items()}}
    validation_queries = seed.get("validation_queries", 0)
    queries = VALIDATION_QUERIES[config.loop.validate_on]
    if validation_queries:
        summary["selected_by"] = f"validation {chosen['val_metric']} ({validation_queries} {queries})"
        print(f"best: iteration {best} ({chosen['val_metric']} on {queries}: {chosen['best_score']})")
    else:
        summary["selected_by"] = f"none: no {queries}, so no validation was possible; the last iteration run was kept"
        print(f"no {queries}, so no validation was possible: nothing stopped the loop early, and the last "
              f"iteration run, iteration {best}, was kept (not chosen by any metric)")
    summary.update({"validate_on": config.loop.validate_on, "validation_queries": validation_queries,
                    "validation": chosen.get("validation", {}), "val_queries": seed.get("val_queries", 0)})
    how = (f"InfoCSE iteration {best} of the {summary['iterations_run']} run" if best else
           f"The seed model as it is: none of the {summary['iterations_run']} InfoCSE iterations run beat it") + \
        f", chosen by {summary['selected_by']}. Each InfoCSE iteration, the current model clusters the sentences " \
        f"inside each document (top-{config.idc.k} similarity links, connected components; `idc.method` " \
        f"{config.idc.method}), every pair inside a cluster becomes a positive, and the next model is trained " \
        "contrastively with in-batch negatives from other documents."
    card = model_card(config, config.train, f"{Path(config.seed_model).name} adapted to {config.corpus.source} by InfoCSE",
                      how, read_json(CORPUS_METRICS), training_rounds(best),
                      {**({} if config.loop.validate_on == "val" else {f"validation ({queries})": summary["validation"]}),
                       "val": summary["val"], "test": summary["test"], "test − seed model": summary["test_delta_vs_seed"]},
                      seed.get("candidates", 0))
    with atomic_output(BEST_MODEL) as tmp:
        shutil.copytree(IterationPaths(best).model, tmp)
        (tmp / "README.md").write_text(card, encoding="utf-8")
    write_json(BEST_METRICS, summary)


if __name__ == "__main__":
    run_stage(main)

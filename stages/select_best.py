"""select: the best iteration by the validation metric -> models/best and metrics/best.json.

The loop state that evaluate@t carries already names the best iteration; iterations after the
stop did no work and cannot be chosen.
"""

from __future__ import annotations

import shutil

from infocse.config import load_config
from infocse.errors import run_stage
from infocse.io import atomic_output, read_json, write_json
from infocse.paths import BEST_METRICS, BEST_MODEL, IterationPaths


def main() -> None:
    config = load_config()
    states = [read_json(IterationPaths(t).retrieval) for t in [0, *config.iterations]]
    best = states[-1]["best_iteration"]
    with atomic_output(BEST_MODEL) as tmp:
        shutil.copytree(IterationPaths(best).model, tmp)
    chosen, seed = states[best], states[0]
    summary = {"iteration": best, "val_metric": chosen["val_metric"], "val": chosen.get("val", {}),
               "test": chosen.get("test", {}),
               "iterations_run": sum(not state["stopped"] for state in states) - 1,
               "test_delta_vs_seed": {name: value - seed["test"][name] for name, value in chosen.get("test", {}).items()}}
    val_queries = seed.get("val_queries", 0)
    if val_queries:
        summary["selected_by"] = f"validation {chosen['val_metric']} ({val_queries} val queries)"
        print(f"best: iteration {best} ({chosen['val_metric']} on val {chosen['best_score']})")
    else:
        summary["selected_by"] = "none: no val queries, so no validation was possible; the last iteration run was kept"
        print(f"no val queries, so no validation was possible: nothing stopped the loop early, and the last "
              f"iteration run, iteration {best}, was kept (not chosen by any metric)")
    summary["val_queries"] = val_queries
    write_json(BEST_METRICS, summary)


if __name__ == "__main__":
    run_stage(main)

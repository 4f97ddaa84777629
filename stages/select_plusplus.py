"""select_plusplus: the best fine-tuned InfoCSE++ round by validation -> models/plusplus/best and
metrics/plusplus.json (with the round-by-round curve)."""

from __future__ import annotations

import shutil

from infocse.config import load_config
from infocse.errors import run_stage
from infocse.io import atomic_output, read_json, write_json
from infocse.paths import PLUSPLUS_METRICS, PLUSPLUS_MODEL, finetuned_metrics, finetuned_model
from infocse.stopping import round_names


def main() -> None:
    names = round_names(load_config())
    states = {number: read_json(finetuned_metrics(name)) for number, name in names.items()}
    best = states[max(states)]["best_iteration"]
    with atomic_output(PLUSPLUS_MODEL) as tmp:
        shutil.copytree(finetuned_model(names[best]), tmp)
    curve = [{"round": number, "val": state.get("val", {}), "test": state.get("test", {})}
             for number, state in sorted(states.items()) if not state["stopped"]]
    chosen = states[best]
    if chosen.get("skipped"):
        selected_by = "none: nothing was fine-tuned (no labelled pairs)"
        print(f"InfoCSE++: nothing was fine-tuned (no labelled pairs); {PLUSPLUS_MODEL} is a placeholder")
    elif chosen.get("val_queries", 0):
        selected_by = f"validation {chosen['val_metric']} ({chosen['val_queries']} val queries)"
        print(f"InfoCSE++: best is round {best} of {len(curve)} (val {chosen['val_metric']} {chosen['best_score']})")
    else:
        selected_by = "none: no val queries, so no validation was possible; the last round run was kept"
        print(f"InfoCSE++: no val queries, so no validation was possible: the last round run, round {best} of "
              f"{len(curve)}, was kept (not chosen by any metric)")
    write_json(PLUSPLUS_METRICS, {"best_round": best, "rounds_run": len(curve), "val": chosen["val"],
                                  "test": chosen["test"], "labels": chosen["labels"], "curve": curve,
                                  "selected_by": selected_by})


if __name__ == "__main__":
    run_stage(main)

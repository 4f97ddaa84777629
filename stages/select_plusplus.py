"""select_plusplus: the best fine-tuned InfoCSE++ round by validation -> models/plusplus/best,
metrics/plusplus.json (with the round-by-round curve)."""

from __future__ import annotations

import shutil
from pathlib import Path

from stages.common import atomic_output, load_params, read_json, run_stage, write_json
from stages.finetune import finetuned_metrics, finetuned_model
from stages.plusplus import round_chain

PLUSPLUS_MODEL = Path("models/plusplus/best")


def round_names(params: dict) -> dict[int, str]:
    """{round: its fine-tuned model's name}: round 1 is finetune@best."""
    return {1: "best", **{number: f"round-{number}" for number in round_chain(params)}}


def main() -> None:
    params = load_params()
    names = round_names(params)
    states = {number: read_json(finetuned_metrics(name)) for number, name in names.items()}
    best = states[max(states)]["best_iteration"]
    with atomic_output(PLUSPLUS_MODEL) as tmp:
        shutil.copytree(finetuned_model(names[best]), tmp)
    curve = [{"round": number, "val": state.get("val", {}), "test": state.get("test", {})}
             for number, state in sorted(states.items()) if not state["stopped"]]
    chosen = states[best]
    write_json("metrics/plusplus.json", {"best_round": best, "rounds_run": len(curve), "val": chosen["val"],
                                         "test": chosen["test"], "labels": chosen["labels"], "curve": curve})
    print(f"InfoCSE++: best is round {best} of {len(curve)} (val {chosen['val_metric']} {chosen['best_score']})")


if __name__ == "__main__":
    run_stage(main)

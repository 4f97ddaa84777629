"""select_plusplus: the best fine-tuned InfoCSE++ round by validation -> models/plusplus/best and
metrics/plusplus.json (with the round-by-round curve)."""

from __future__ import annotations

import shutil
from pathlib import Path

from infocse.config import load_config
from infocse.errors import run_stage
from infocse.io import atomic_output, read_json, write_json
from infocse.model_card import model_card
from infocse.paths import CORPUS_METRICS, PLUSPLUS_METRICS, PLUSPLUS_MODEL, finetuned_metrics, finetuned_model
from infocse.stopping import round_names


def main() -> None:
    config = load_config()
    names = round_names(config)
    states = {number: read_json(finetuned_metrics(name)) for number, name in names.items()}
    best = states[max(states)]["best_iteration"]
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
    with atomic_output(PLUSPLUS_MODEL) as tmp:
        shutil.copytree(finetuned_model(names[best]), tmp)
        if not chosen.get("skipped"):  # a placeholder folder is no model
            (tmp / "README.md").write_text(plusplus_card(config, best, len(curve), chosen, selected_by), encoding="utf-8")
    write_json(PLUSPLUS_METRICS, {"best_round": best, "rounds_run": len(curve), "val": chosen["val"],
                                  "test": chosen["test"], "labels": chosen["labels"], "curve": curve,
                                  "selected_by": selected_by})


def plusplus_card(config, best: int, rounds_run: int, chosen: dict, selected_by: str) -> str:
    train = chosen["train"]
    how = (f"The InfoCSE model fine-tuned on {chosen['labels']:,} labelled (title, body) pairs of the few-shot pool"
           + (f", after {best - 1} more InfoCSE++ round(s) (each: InfoCSE from the fine-tuned model, then fine-tuning "
              "again)" if best > 1 else "") + f": round {best} of the {rounds_run} run, chosen by {selected_by}. "
           "The InfoCSE model itself, without labels, is `models/best`.")
    return model_card(config, config.finetune,
                      f"{Path(config.seed_model).name} adapted to {config.corpus.source} by InfoCSE, fine-tuned", how,
                      read_json(CORPUS_METRICS),
                      [{"round": f"fine-tuning (round {best})", "pairs": train.get("pairs_used", 0),
                        "steps": train.get("steps", 0), "train_loss": train.get("train_loss", float("nan"))}],
                      {"val": chosen["val"], "test": chosen["test"]}, chosen.get("candidates", 0))


if __name__ == "__main__":
    run_stage(main)

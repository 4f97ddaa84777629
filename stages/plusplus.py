"""plusplus@r: InfoCSE++ round r >= 2 -> models/finetuned/round-r: InfoCSE iterations from round
r-1's fine-tuned model, then few-shot fine-tuning again; skipped once the rounds have stopped.
Each round is one cached step that depends on the labels; the unlabelled main loop does not."""

from __future__ import annotations

import argparse
import time

import pandas as pd

from infocse.config import load_config
from infocse.errors import StageError, run_stage
from infocse.io import read_json, write_json, write_placeholder
from infocse.live import LiveCurves
from infocse.models import load_model, save_model, stage_device
from infocse.paths import DOCUMENTS, LABELS, SENTENCES, finetuned_live, finetuned_metrics, finetuned_model, \
    finetuned_timing
from infocse.plusplus import round_phases, run_round
from infocse.stopping import round_is_active, stopped_state


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--round", type=int, required=True)
    number = parser.parse_args().round
    config = load_config()
    device = stage_device(config)
    if number not in config.plusplus.rounds:
        raise StageError(f"round {number} is not in params `plusplus.rounds`")
    prev = config.plusplus.rounds[number]
    previous_state = read_json(finetuned_metrics(prev))
    started = time.perf_counter()
    live = LiveCurves(finetuned_live(f"round-{number}"), round_phases(config))  # empty where the round is skipped
    if round_is_active(config, number, previous_state):
        model = load_model(finetuned_model(prev), device)
        result = run_round(model, config, number, previous_state, pd.read_parquet(SENTENCES),
                           pd.read_parquet(DOCUMENTS), pd.read_parquet(LABELS), device, live=live)
        save_model(model, finetuned_model(f"round-{number}"))
        print(f"InfoCSE++ round {number}: fine-tuned val {result['val']}, test {result['test']}")
    else:
        write_placeholder(finetuned_model(f"round-{number}"), "InfoCSE++ stopped before this round: it did no work")
        result = {"round": number, "stopped": True, **stopped_state(previous_state)}
        print(f"InfoCSE++ round {number}: skipped (stopped); best is round {result['best_iteration']}")
    write_json(finetuned_metrics(f"round-{number}"), {**result, "prev": prev})
    write_json(finetuned_timing(f"round-{number}"), {"seconds": time.perf_counter() - started})


if __name__ == "__main__":
    run_stage(main)

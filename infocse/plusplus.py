"""InfoCSE++: fine-tune, send the fine-tuned model back as InfoCSE's start, mine and train
again, fine-tune again -- until the fine-tuned validation score stops improving.

Round 1 is the main pipeline followed by fine-tuning its best model. Round r >= 2 starts from
round r-1's fine-tuned model, runs the InfoCSE loop in one process (`infocse.loop.run_loop`, the
same early stopping as the staged loop), then fine-tunes. Rounds are early-stopped on the
fine-tuned validation metric with `plusplus.patience`, at most `plusplus.max_rounds`.
"""

from __future__ import annotations

import pandas as pd

from infocse.config import Config
from infocse.finetune import finetune_and_score
from infocse.loop import run_loop
from infocse.stopping import next_state


def round_phases(config: Config) -> tuple[str, ...]:
    """The training phases of a round, as its live curves name them (infocse/live.py)."""
    return (*(f"iteration-{t}" for t in config.iterations), "finetune")


def run_round(model, config: Config, number: int, previous_state: dict, sentences: pd.DataFrame,
              documents: pd.DataFrame, labels: pd.DataFrame, device: str, live=None) -> dict:
    """Round `number` on `model` (round r-1's fine-tuned model), in place: InfoCSE, then fine-tuning.
    Returns the round's metrics and the InfoCSE++ state after it."""
    history = run_loop(model, config, sentences, documents, device, round_number=number, live=live)
    result = finetune_and_score(model, labels, config, device, documents, round_number=number, live=live)
    state = next_state(previous_state, number, result["score"], config.plusplus.patience)
    if number >= config.plusplus.max_rounds:
        state["continue"] = False
    return {"round": number, "stopped": False, "infocse": history, **result, **state}

"""Early stopping of the InfoCSE loop and of InfoCSE++'s rounds, on the validation metric only
(never on test).

The DVC pipeline runs one stage per step (embed@t, cluster@t, train@t, evaluate@t); evaluate@t
calls `next_state` and writes whether t+1 runs, and every later step reads it with
`iteration_is_active`. InfoCSE++ (`infocse.loop.run_loop`) keeps the same state in one process,
so both stop and select alike. Kept apart from the loop so that the stages, which need only the
state, do not depend on (and rerun for) the code of IDC and training.
"""

from __future__ import annotations

from infocse.config import Config
from infocse.errors import StageError
from infocse.io import read_json
from infocse.paths import IterationPaths


def next_state(previous: dict | None, t: int, score: float | None, patience: int,
               max_iterations: int | None = None) -> dict:
    """Best iteration so far by the validation `score`, iterations since it last improved, and
    whether the next iteration runs (fewer than `patience` iterations without a gain, and fewer
    than `max_iterations` done). A None score (no val queries) never counts as a gain."""
    if previous is None or previous.get("best_score") is None or (score is not None and score > previous["best_score"]):
        best = {"best_iteration": t, "best_score": score, "since_best": 0}
    else:
        best = {"best_iteration": previous["best_iteration"], "best_score": previous["best_score"],
                "since_best": previous["since_best"] + 1}
    within_limit = max_iterations is None or t < max_iterations
    return {**best, "continue": best["since_best"] < patience and within_limit}


def stopped_state(previous: dict) -> dict:
    """An iteration after the stop: keeps the best so far, and stops every later one."""
    return {"best_iteration": previous["best_iteration"], "best_score": previous["best_score"],
            "since_best": previous["since_best"], "continue": False}


def iteration_is_active(config: Config, t: int) -> bool:
    """Iteration t does work unless the loop stopped after t-1 (evaluate@t-1 decided it: early
    stopping, or `loop.max_iterations` reached)."""
    if t == 0:
        return True
    if t not in config.iterations:
        raise StageError(f"iteration {t} is not in params `iterations`")
    return bool(read_json(IterationPaths(t - 1).continue_flag)["continue"])


# ---------------------------------------------------------------- InfoCSE++ rounds
def round_names(config: Config) -> dict[int, str]:
    """{round: its fine-tuned model's name}: round 1 is finetune@best, round r is `round-r`."""
    return {1: "best", **{number: f"round-{number}" for number in config.plusplus.rounds}}


def first_round_state(config: Config, score: float | None) -> dict:
    """The InfoCSE++ state after round 1 (finetune@best), which later rounds continue from."""
    state = next_state(None, 1, score, config.plusplus.patience)
    state["continue"] = state["continue"] and config.plusplus.max_rounds > 1
    return state


def round_is_active(config: Config, number: int, previous_state: dict) -> bool:
    return bool(previous_state["continue"]) and number <= config.plusplus.max_rounds

"""The InfoCSE loop: early stopping on validation, which iterations do work, and the loop itself.

The DVC pipeline runs one stage per step (embed@t, cluster@t, train@t, evaluate@t); evaluate@t
calls `next_state` and writes whether t+1 runs, and every later step reads it with
`iteration_is_active`. InfoCSE++ runs the same loop in one process with `run_loop`. Both use the
same state, so they stop and select alike: on the validation metric only, never on test.
"""

from __future__ import annotations

import copy

import pandas as pd

from infocse.config import Config, LoopConfig
from infocse.embedding import embed_sentences
from infocse.errors import StageError
from infocse.idc import cluster_sentences
from infocse.io import read_json
from infocse.models import sequence_length
from infocse.paths import IterationPaths
from infocse.retrieval import score_model
from infocse.training import train_at_length


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


def scored(model, documents: pd.DataFrame, config: Config) -> dict:
    """Val and test metrics at the evaluation length; the model keeps its own length afterwards."""
    with sequence_length(model, config.evaluate.max_seq_length):
        return score_model(model, documents, config.evaluate)[0]


def run_loop(model, config: Config, sentences: pd.DataFrame, documents: pd.DataFrame, device: str,
             loop: LoopConfig | None = None) -> list[dict]:
    """InfoCSE iterations on `model`, in place and in one process: embed -> IDC -> train -> score,
    early-stopped on validation exactly as the staged loop is. `model` ends as the iteration
    validation chose; returns one entry per iteration run."""
    loop = loop or config.loop
    texts = sentences["text"].tolist()
    result = scored(model, documents, config)
    state = next_state(None, 0, result["score"], loop.patience, loop.max_iterations)
    history = [{"iteration": 0, "val": result["val"], "test": result["test"]}]
    best_weights = copy.deepcopy(model.state_dict())
    for t in config.iterations:
        if not state["continue"]:
            break
        with sequence_length(model, config.embed.max_seq_length):
            embeddings = embed_sentences(model, texts, config.embed.batch_size, precision=config.embed.precision)
        pairs, stats = cluster_sentences(config.idc, config.budget, config.seed, sentences, embeddings)
        if pairs.empty:
            raise StageError(f"iteration {t}: IDC found no positive pairs")
        train_at_length(model, pairs, config.train, config.seed, device)
        result = scored(model, documents, config)
        state = next_state(state, t, result["score"], loop.patience, loop.max_iterations)
        if state["best_iteration"] == t:
            best_weights = copy.deepcopy(model.state_dict())
        history.append({"iteration": t, "val": result["val"], "test": result["test"], "pairs": stats["pairs"]})
    model.load_state_dict(best_weights)
    return [{**entry, "chosen": entry["iteration"] == state["best_iteration"]} for entry in history]

"""plusplus@r: one InfoCSE++ round r >= 2 -- InfoCSE iterations from round r-1's fine-tuned model,
then few-shot fine-tuning again. Rounds stop once the fine-tuned validation metric has not
improved for `plusplus.patience` rounds, or after `plusplus.max_rounds`.

Round 1 is the main pipeline followed by finetune@best. A later round runs its InfoCSE iterations
inside this one stage, with the same functions and params as the embed/cluster/train/evaluate
stages (early stopping included), so each round is one cached DVC step that depends on the labels;
the unlabelled main loop does not.
"""

from __future__ import annotations

import argparse
import copy
import time

import pandas as pd

from stages.cluster import cluster_iteration
from stages.common import (
    DOCUMENTS,
    SENTENCES,
    StageError,
    atomic_output,
    iteration_numbers,
    load_model,
    load_params,
    positive_int,
    read_json,
    resolve_device,
    run_stage,
    save_model,
    sequence_length,
    write_json,
)
from stages.embed import embed_sentences
from stages.evaluate import next_state, score_model, stopped_state
from stages.finetune import finetune_and_score, finetuned_metrics, finetuned_model, finetuned_timing
from stages.train import train_at_length


def round_chain(params: dict) -> dict[int, str]:
    """{round: the fine-tuned model it starts from}: round 2 from `best` (round 1), r from `round-(r-1)`."""
    rounds = (params.get("plusplus") or {}).get("rounds") or {}
    chain = {}
    for number in sorted(int(key) for key in rounds):
        expected = "best" if number == 2 else f"round-{number - 1}"
        prev = (rounds.get(str(number)) or rounds.get(number) or {}).get("prev")
        if prev != expected:
            raise StageError(f"params `plusplus.rounds.{number}.prev` must be {expected!r}, got {prev!r}")
        chain[number] = prev
    if sorted(chain) != list(range(2, len(chain) + 2)):
        raise StageError(f"params `plusplus.rounds` must be numbered 2..R, got {sorted(chain)}")
    return chain


def scored(params: dict, model, documents: pd.DataFrame) -> dict:
    """score_model at the evaluation length; the model keeps its own length afterwards."""
    with sequence_length(model, positive_int(params, "evaluate.max_seq_length")):
        return score_model(params, model, documents)[0]


def infocse_loop(model, params: dict, sentences: pd.DataFrame, documents: pd.DataFrame, device: str) -> list[dict]:
    """InfoCSE iterations on `model`, in place: embed -> IDC -> train -> score, early-stopped on
    validation as the main loop is. `model` ends as the iteration validation chose."""
    patience = positive_int(params, "loop.patience")
    max_iterations = positive_int(params, "loop.max_iterations", allow_all=True, minimum=0)
    texts = sentences["text"].tolist()
    result = scored(params, model, documents)
    state = next_state(None, 0, result["score"], patience, max_iterations)
    history = [{"iteration": 0, "val": result["val"], "test": result["test"]}]
    best_weights = copy.deepcopy(model.state_dict())
    for t in iteration_numbers(params):
        if not state["continue"]:
            break
        with sequence_length(model, positive_int(params, "embed.max_seq_length")):
            embeddings = embed_sentences(model, texts, positive_int(params, "embed.batch_size"))
        pairs, stats = cluster_iteration(params, sentences, embeddings)
        if pairs.empty:
            raise StageError(f"InfoCSE++ iteration {t}: IDC found no positive pairs")
        train_at_length(model, pairs, params, device)
        result = scored(params, model, documents)
        state = next_state(state, t, result["score"], patience, max_iterations)
        if state["best_iteration"] == t:
            best_weights = copy.deepcopy(model.state_dict())
        history.append({"iteration": t, "val": result["val"], "test": result["test"], "pairs": stats["pairs"]})
    model.load_state_dict(best_weights)
    return [{**entry, "chosen": entry["iteration"] == state["best_iteration"]} for entry in history]


def run_round(params: dict, number: int, prev: str, previous_state: dict) -> dict:
    """Round `number` from fine-tuned model `prev`; saves the fine-tuned model, returns its metrics."""
    device = resolve_device(params.get("device"))
    model = load_model(finetuned_model(prev), device)
    documents = pd.read_parquet(DOCUMENTS)
    history = infocse_loop(model, params, pd.read_parquet(SENTENCES), documents, device)
    result = finetune_and_score(model, params, device, documents)
    save_model(model, finetuned_model(f"round-{number}"))
    state = next_state(previous_state, number, result["score"], positive_int(params, "plusplus.patience"))
    if number >= positive_int(params, "plusplus.max_rounds"):
        state["continue"] = False
    return {"round": number, "stopped": False, "prev": prev, "infocse": history, **result, **state}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--round", type=int, required=True)
    number = parser.parse_args().round
    params = load_params()
    chain = round_chain(params)
    if number not in chain:
        raise StageError(f"round {number} is not in params `plusplus.rounds`")
    previous_state = read_json(finetuned_metrics(chain[number]))
    started = time.perf_counter()
    if previous_state["continue"] and number <= positive_int(params, "plusplus.max_rounds"):
        result = run_round(params, number, chain[number], previous_state)
        print(f"InfoCSE++ round {number}: fine-tuned val {result['val']}, test {result['test']}")
    else:
        with atomic_output(finetuned_model(f"round-{number}")) as tmp:
            tmp.mkdir()
            (tmp / "SKIPPED").write_text("InfoCSE++ stopped before this round: it did no work\n")
        result = {"round": number, "stopped": True, "prev": chain[number], **stopped_state(previous_state)}
        print(f"InfoCSE++ round {number}: skipped (stopped); best is round {result['best_iteration']}")
    write_json(finetuned_metrics(f"round-{number}"), result)
    write_json(finetuned_timing(f"round-{number}"), {"seconds": time.perf_counter() - started})


if __name__ == "__main__":
    run_stage(main)

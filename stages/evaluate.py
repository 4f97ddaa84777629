"""evaluate@t: headline -> body retrieval for val and test, and the early-stopping state.

Queries are the split's titles; candidates are ALL bodies of the corpus, encoded once per model.
Per-query ranks are kept (data/ranks) for paired bootstrap intervals in the report. The state
(best iteration by the validation metric, iterations since it improved) is carried from t-1 to t,
and the decision whether iteration t+1 does any work is written on its own (data/state).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from stages.common import (
    DOCUMENTS,
    IterationPaths,
    StageError,
    iteration_is_active,
    load_model,
    load_params,
    positive_int,
    read_json,
    run_stage,
    write_json,
    write_parquet,
)

CUTOFFS = (1, 5, 10)
METRICS = ("recall@1", "recall@5", "recall@10", "mrr@10", "ndcg@10")


def gold_ranks(query_embeddings: np.ndarray, candidate_embeddings: np.ndarray, gold: np.ndarray) -> np.ndarray:
    """0-based rank of each query's gold candidate: how many candidates score strictly higher."""
    scores = query_embeddings @ candidate_embeddings.T
    gold_scores = scores[np.arange(len(gold)), gold]
    return (scores > gold_scores[:, None]).sum(axis=1).astype(np.int64)


def per_query_scores(ranks: np.ndarray) -> dict[str, np.ndarray]:
    """Each metric per query, for one relevant document per query."""
    ranks = np.asarray(ranks)
    scores = {f"recall@{k}": (ranks < k).astype(float) for k in CUTOFFS}
    scores["mrr@10"] = np.where(ranks < 10, 1.0 / (ranks + 1), 0.0)
    scores["ndcg@10"] = np.where(ranks < 10, 1.0 / np.log2(ranks + 2), 0.0)
    return scores


def retrieval_metrics(ranks: np.ndarray) -> dict[str, float]:
    return {name: float(values.mean()) for name, values in per_query_scores(ranks).items()}


def rank_queries(model, documents: pd.DataFrame, batch_size: int) -> pd.DataFrame:
    """Ranks of the val and test queries of `documents` against all bodies."""
    queries = documents[documents["split"].isin(["val", "test"]) & documents["title"].notna()]
    encode = dict(batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=True)
    candidates = model.encode(documents["body"].tolist(), **encode)
    query_embeddings = model.encode(queries["title"].tolist(), **encode)
    ranks = gold_ranks(query_embeddings, candidates, queries.index.to_numpy())
    return pd.DataFrame({"doc_id": queries["doc_id"].to_numpy(), "split": queries["split"].to_numpy(), "rank": ranks})


def next_state(previous: dict | None, t: int, score: float | None, patience: int, max_iterations: int | None = None) -> dict:
    """Best iteration so far, iterations since the validation metric last improved, and whether
    the next iteration runs (fewer than `patience` iterations without a gain, and fewer than
    `max_iterations` done)."""
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


def validation_metric(params: dict) -> str:
    metric = params["evaluate"]["metric"]
    if metric not in METRICS:
        raise StageError(f"params `evaluate.metric` must be one of {list(METRICS)}, got {metric!r}")
    return metric


def score_model(params: dict, model, documents: pd.DataFrame) -> tuple[dict, pd.DataFrame]:
    """Val and test retrieval metrics of `model` (queries = titles, candidates = all bodies), and
    the per-query ranks; `score` is the validation metric (None when the corpus has no titles)."""
    ranks = rank_queries(model, documents, positive_int(params, "evaluate.batch_size"))
    result = {"val_metric": validation_metric(params), "candidates": len(documents)}
    for split in ("val", "test"):
        split_ranks = ranks.loc[ranks["split"] == split, "rank"].to_numpy()
        result[split] = retrieval_metrics(split_ranks) if len(split_ranks) else {}
        result[f"{split}_queries"] = int(len(split_ranks))
    result["score"] = result["val"].get(result["val_metric"])
    return result, ranks


def evaluate_iteration(params: dict, t: int) -> tuple[dict, pd.DataFrame]:
    paths = IterationPaths(t)
    previous = read_json(IterationPaths(t - 1).state) if t > 0 else None
    metric = validation_metric(params)
    patience = positive_int(params, "loop.patience")
    max_iterations = positive_int(params, "loop.max_iterations", allow_all=True, minimum=0)
    if not iteration_is_active(params, t):
        return {"iteration": t, "stopped": True, "val_metric": metric, **stopped_state(previous)}, pd.DataFrame(
            {"doc_id": pd.Series(dtype=str), "split": pd.Series(dtype=str), "rank": pd.Series(dtype="int64")})
    documents = pd.read_parquet(DOCUMENTS)
    model = load_model(paths.model, params.get("device"), params["evaluate"].get("max_seq_length"))
    result, ranks = score_model(params, model, documents)
    score = result.pop("score")  # None when the corpus has no titles: the last iteration is kept
    return {"iteration": t, "stopped": False, **result, **next_state(previous, t, score, patience, max_iterations)}, ranks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iteration", type=int, required=True)
    t = parser.parse_args().iteration
    params = load_params()
    paths = IterationPaths(t)
    started = time.perf_counter()
    result, ranks = evaluate_iteration(params, t)
    write_parquet(ranks, paths.ranks)
    write_json(paths.state, result)
    write_json(paths.decision, {"continue": result["continue"]})
    write_json(paths.metrics / "evaluate.json", {"iteration": t, "seconds": time.perf_counter() - started})
    if result["stopped"]:
        print(f"iteration {t}: skipped (the loop stopped); best is iteration {result['best_iteration']}")
    elif result.get("val"):
        print(f"iteration {t}: val {result['val']}, test {result['test']}")


if __name__ == "__main__":
    run_stage(main)

"""The evaluation protocol: title -> body retrieval, queries of one split against ALL bodies.

Queries are the titles of the evaluated splits (val and test; the unsupervised loop adds the
few-shot pool, which nothing has trained on yet); the candidates are every body of the corpus (not only the
split's), encoded once per model. A query's gold is its own document's body. Per-query ranks are
kept so the report can pair models query by query.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from infocse.config import VALIDATION_SETS, Config, EvaluateConfig
from infocse.embedding import embed_sentences
from infocse.errors import StageError
from infocse.models import sequence_length

CUTOFFS = (1, 5, 10)
EVALUATED_SPLITS = ("val", "test")
LOOP_SPLITS = ("fewshot", "val", "test")  # the unsupervised loop: the few-shot pool is not training data yet


def gold_ranks(query_embeddings: np.ndarray, candidate_embeddings: np.ndarray, gold: np.ndarray) -> np.ndarray:
    """0-based rank of each query's gold candidate, ties counted against the gold: how many other
    candidates score at least as high. A model that cannot tell the gold from another candidate
    gets no credit for it (a collapsed model, all scores equal, ranks every gold last). Scores
    must be finite: a NaN compares false with everything, and would rank first."""
    scores = query_embeddings @ candidate_embeddings.T
    if not np.isfinite(scores).all():
        raise StageError("non-finite similarity scores: the embeddings hold NaN or infinity")
    gold_scores = scores[np.arange(len(gold)), gold]
    return ((scores >= gold_scores[:, None]).sum(axis=1) - 1).astype(np.int64)


def per_query_scores(ranks: np.ndarray) -> dict[str, np.ndarray]:
    """Each metric per query, for one relevant document per query."""
    ranks = np.asarray(ranks)
    scores = {f"recall@{k}": (ranks < k).astype(float) for k in CUTOFFS}
    scores["mrr@10"] = np.where(ranks < 10, 1.0 / (ranks + 1), 0.0)
    scores["ndcg@10"] = np.where(ranks < 10, 1.0 / np.log2(ranks + 2), 0.0)
    return scores


def retrieval_metrics(ranks: np.ndarray) -> dict[str, float]:
    return {name: float(values.mean()) for name, values in per_query_scores(ranks).items()}


def evaluation_queries(documents: pd.DataFrame, splits: tuple[str, ...] = EVALUATED_SPLITS) -> pd.DataFrame:
    """The documents of `splits` that have a title: their titles are the queries."""
    return documents[documents["split"].isin(splits) & documents["title"].notna()]


def empty_ranks() -> pd.DataFrame:
    return pd.DataFrame({"doc_id": pd.Series(dtype=str), "split": pd.Series(dtype=str), "rank": pd.Series(dtype="int64")})


def rank_queries(model, documents: pd.DataFrame, batch_size: int | None, precision: str = "fp32",
                 splits: tuple[str, ...] = EVALUATED_SPLITS) -> pd.DataFrame:
    """Rank of each query of `splits` (its gold body among all bodies of `documents`); `batch_size`
    as params `evaluate.batch_size` (None: auto), `precision` as params `precision`."""
    queries = evaluation_queries(documents, splits)
    if queries.empty:
        return empty_ranks()
    candidates = embed_sentences(model, documents["body"].tolist(), batch_size, precision=precision)
    query_embeddings = embed_sentences(model, queries["title"].tolist(), batch_size, precision=precision)
    ranks = gold_ranks(query_embeddings, candidates, documents.index.get_indexer(queries.index))
    return pd.DataFrame({"doc_id": queries["doc_id"].to_numpy(), "split": queries["split"].to_numpy(), "rank": ranks})


def score_model(model, documents: pd.DataFrame, evaluate: EvaluateConfig, validate_on: str = "val",
                splits: tuple[str, ...] = EVALUATED_SPLITS) -> tuple[dict, pd.DataFrame]:
    """Metrics of `model` on each of `splits` and on its validation set (the splits that params
    `loop.validate_on` names, pooled query by query), and the per-query ranks; `score` is the
    validation metric, None when the validation set has no queries (no titles, or splits too small)."""
    validation = VALIDATION_SETS[validate_on]
    ranks = rank_queries(model, documents, evaluate.batch_size, evaluate.precision, splits)
    result = {"val_metric": evaluate.metric, "candidates": len(documents)}
    for split in splits:
        split_ranks = ranks.loc[ranks["split"] == split, "rank"].to_numpy()
        result[split] = retrieval_metrics(split_ranks) if len(split_ranks) else {}
        result[f"{split}_queries"] = int(len(split_ranks))
    validation_ranks = ranks.loc[ranks["split"].isin(validation), "rank"].to_numpy()
    result.update({"validate_on": validate_on, "validation_queries": int(len(validation_ranks)),
                   "validation": retrieval_metrics(validation_ranks) if len(validation_ranks) else {}})
    result["score"] = result["validation"].get(evaluate.metric)
    return result, ranks


def scored(model, documents: pd.DataFrame, config: Config) -> dict:
    """Val and test metrics at the evaluation length; the model keeps its own length afterwards."""
    with sequence_length(model, config.evaluate.max_seq_length):
        return score_model(model, documents, config.evaluate)[0]

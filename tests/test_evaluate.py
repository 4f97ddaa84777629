"""Retrieval evaluation (infocse/retrieval.py) and the loop's state (infocse/stopping.py), as the
evaluate stage uses them: gold ranks and metrics against sentence-transformers'
InformationRetrievalEvaluator, hand-worked per-query scores, and the early-stopping state and rule."""

from __future__ import annotations

import math
import sys

import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import TOPICS, config_with, repo_params, tiny_documents
from pipeline_helpers import deep_merge

from infocse.config import METRICS, VALIDATION_SETS, EvaluateConfig
from infocse.errors import StageError
from infocse.io import read_json, write_json
from infocse.stopping import iteration_is_active, next_state, stopped_state
from infocse.models import load_model
from infocse.paths import IterationPaths
from infocse.retrieval import LOOP_SPLITS, gold_ranks, per_query_scores, rank_queries, retrieval_metrics, score_model


# ---------------------------------------------------------------- against sentence-transformers
def retrieval_task() -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """Queries (titles and single sentences), candidates (bodies and cross-topic mixes), gold per query."""
    documents = tiny_documents()
    corpus = {f"body-{d['id']}": d["text"] for d in documents}
    topics = list(TOPICS)
    for i, topic in enumerate(topics):
        other = topics[(i + 1) % len(topics)]
        corpus[f"mix-{topic}"] = f"{TOPICS[topic][i % 5]} {TOPICS[other][(i + 2) % 5]}"
    queries, gold = {}, {}
    for d in documents:
        queries[f"title-{d['id']}"] = d["title"]
        gold[f"title-{d['id']}"] = f"body-{d['id']}"
    for topic, sentences in TOPICS.items():
        for j, sentence in enumerate(sentences):
            queries[f"sent-{topic}-{j}"] = sentence
            gold[f"sent-{topic}-{j}"] = f"body-{topic}-{j % 2}"
    return queries, corpus, gold


def test_metrics_match_information_retrieval_evaluator(tiny_model_dir, one_torch_thread):
    """recall@1/5/10, mrr@10 and ndcg@10 from gold_ranks + retrieval_metrics equal sentence-transformers'
    evaluator (accuracy@k there is recall@k here: one relevant document per query)."""
    from sentence_transformers.sentence_transformer.evaluation import InformationRetrievalEvaluator

    model = load_model(tiny_model_dir, "cpu")
    assert model.similarity_fn_name in (None, "cosine")
    queries, corpus, gold = retrieval_task()
    corpus_ids = list(corpus)
    query_ids = list(queries)
    encode = dict(normalize_embeddings=True, convert_to_numpy=True)
    candidate_embeddings = model.encode([corpus[c] for c in corpus_ids], **encode)
    query_embeddings = model.encode([queries[q] for q in query_ids], **encode)
    gold_index = np.array([corpus_ids.index(gold[q]) for q in query_ids])

    scores = query_embeddings @ candidate_embeddings.T
    gold_scores = scores[np.arange(len(query_ids)), gold_index]
    others = np.where(np.arange(len(corpus_ids))[None, :] == gold_index[:, None], np.inf, scores)
    assert np.abs(others - gold_scores[:, None]).min() > 1e-6, (
        "(near-)tied scores, so the two rankings may differ: does the tiny model's tokenizer map every word to "
        "[UNK]? (see test_train.py::test_tiny_model_fixture_sees_words)")

    ranks = gold_ranks(query_embeddings, candidate_embeddings, gold_index)
    assert len(set(ranks.tolist())) >= 3 and ranks.max() >= 10, "task too easy to tell the metrics apart"
    ours = retrieval_metrics(ranks)

    evaluator = InformationRetrievalEvaluator(
        queries=queries, corpus=corpus, relevant_docs={q: {gold[q]} for q in query_ids},
        accuracy_at_k=[1, 5, 10], precision_recall_at_k=[1, 5, 10], mrr_at_k=[10], ndcg_at_k=[10], map_at_k=[10],
        batch_size=64, write_csv=False)
    theirs = evaluator(model)
    expected = {"recall@1": theirs["cosine_accuracy@1"], "recall@5": theirs["cosine_accuracy@5"],
                "recall@10": theirs["cosine_accuracy@10"], "mrr@10": theirs["cosine_mrr@10"],
                "ndcg@10": theirs["cosine_ndcg@10"]}
    for k in (1, 5, 10):
        assert theirs[f"cosine_recall@{k}"] == pytest.approx(theirs[f"cosine_accuracy@{k}"])
    assert set(ours) == set(METRICS)
    for name in METRICS:
        assert ours[name] == pytest.approx(expected[name], abs=1e-6), name


def test_gold_ranks_matches_sorting_oracle():
    """On random vectors (no ties) the rank is the gold candidate's position in a descending sort."""
    rng = np.random.default_rng(0)
    queries, candidates = rng.normal(size=(40, 6)), rng.normal(size=(25, 6))
    gold = rng.integers(0, 25, size=40)
    order = np.argsort(-(queries @ candidates.T), axis=1)
    expected = [int(np.flatnonzero(order[i] == gold[i])[0]) for i in range(40)]
    assert gold_ranks(queries, candidates, gold).tolist() == expected


def test_gold_ranks_hand_worked_with_ties():
    """Rank = number of other candidates scoring at least as high as the gold one: a tie counts
    against the gold (queries 3 and 4 tie their gold with another candidate, so rank 1, not 0)."""
    candidates = np.array([[1.0, 0.0], [0.6, 0.8], [1.0, 0.0]])
    queries = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 0.0]])
    assert gold_ranks(queries, candidates, np.array([1, 1, 0, 2])).tolist() == [2, 0, 1, 1]


def test_a_constant_encoder_scores_nothing_not_everything():
    """Every embedding equal (a collapsed model): every gold ties with all 50 candidates, so it
    ranks last and every metric is 0 (counting ties for the gold would give MRR@10 = 1.0)."""
    queries, candidates = np.ones((20, 4)) / 2, np.ones((50, 4)) / 2
    ranks = gold_ranks(queries, candidates, np.arange(20))
    assert ranks.tolist() == [49] * 20
    assert all(value == 0.0 for value in retrieval_metrics(ranks).values())


def test_nan_embeddings_are_an_error_not_a_perfect_score():
    queries, candidates = np.full((3, 4), np.nan), np.eye(4)[:3]
    with pytest.raises(StageError, match="non-finite"):
        gold_ranks(queries, candidates, np.arange(3))


# ---------------------------------------------------------------- hand-worked scores
def test_per_query_scores_hand_worked():
    """Ranks 0, 2, 10, 9, 4 give the hand-computed recall, reciprocal rank and nDCG per query."""
    scores = per_query_scores(np.array([0, 2, 10, 9, 4]))
    assert scores["recall@1"].tolist() == [1, 0, 0, 0, 0]
    assert scores["recall@5"].tolist() == [1, 1, 0, 0, 1]
    assert scores["recall@10"].tolist() == [1, 1, 0, 1, 1]
    assert scores["mrr@10"] == pytest.approx([1.0, 1 / 3, 0.0, 0.1, 0.2])
    assert scores["ndcg@10"] == pytest.approx([1.0, 0.5, 0.0, 1 / math.log2(11), 1 / math.log2(6)])
    metrics = retrieval_metrics(np.array([0, 2, 10, 9, 4]))
    assert metrics["mrr@10"] == pytest.approx((1 + 1 / 3 + 0 + 0.1 + 0.2) / 5)
    assert metrics["recall@5"] == pytest.approx(3 / 5)


def test_rank_queries_uses_val_and_test_titles(tiny_model_dir, one_torch_thread):
    """Only val/test documents with a title are queries; ranks are against all bodies, gold = own body."""
    documents = pd.DataFrame(tiny_documents()).rename(columns={"id": "doc_id", "text": "body"})
    documents["split"] = ["fewshot", "val", "test"] * 4
    documents.loc[2, "title"] = None
    model = load_model(tiny_model_dir, "cpu")
    ranks = rank_queries(model, documents, batch_size=8)
    expected_ids = [d for d, s, t in zip(documents["doc_id"], documents["split"], documents["title"])
                    if s != "fewshot" and pd.notna(t)]
    assert ranks["doc_id"].tolist() == expected_ids
    assert list(ranks.columns) == ["doc_id", "split", "rank"]
    bodies = model.encode(documents["body"].tolist(), normalize_embeddings=True)
    rows = documents.index[documents["doc_id"].isin(expected_ids)]
    titles = model.encode(documents.loc[rows, "title"].tolist(), normalize_embeddings=True)
    # the gold counts itself among the bodies within 1e-6 of its score: the upper bound leaves it out
    manual = [(int((bodies @ q > bodies[row] @ q + 1e-6).sum()), int((bodies @ q > bodies[row] @ q - 1e-6).sum()) - 1)
              for q, row in zip(titles, rows)]
    assert all(low <= rank <= high for rank, (low, high) in zip(ranks["rank"], manual))


# ---------------------------------------------------------------- early-stopping state
def test_next_state():
    """First score is best; a gain resets since_best; no gain (equal, lower or missing) counts up and keeps best;
    the next iteration runs while since_best < patience."""
    state = next_state(None, 0, 0.5, patience=2)
    assert state == {"best_iteration": 0, "best_score": 0.5, "since_best": 0, "continue": True}
    state = next_state(state, 1, 0.4, patience=2)
    assert state == {"best_iteration": 0, "best_score": 0.5, "since_best": 1, "continue": True}
    state = next_state(state, 2, 0.5, patience=2)
    assert state == {"best_iteration": 0, "best_score": 0.5, "since_best": 2, "continue": False}
    state = next_state(state, 3, None, patience=2)
    assert state == {"best_iteration": 0, "best_score": 0.5, "since_best": 3, "continue": False}
    state = next_state(state, 4, 0.51, patience=2)
    assert state == {"best_iteration": 4, "best_score": 0.51, "since_best": 0, "continue": True}
    assert next_state({"best_iteration": 0, "best_score": None, "since_best": 0}, 1, 0.2, patience=1) == \
        {"best_iteration": 1, "best_score": 0.2, "since_best": 0, "continue": True}
    assert stopped_state(state) == {"best_iteration": 4, "best_score": 0.51, "since_best": 0, "continue": False}


def test_max_iterations_stops_the_loop_even_while_improving():
    """`loop.max_iterations` = n: the decision after iteration n is to stop; 0 means f_0 alone."""
    assert next_state(None, 0, 0.5, patience=1, max_iterations=0)["continue"] is False
    state = next_state(None, 0, 0.5, patience=1, max_iterations=1)
    assert state["continue"] is True
    assert next_state(state, 1, 0.9, patience=1, max_iterations=1) == \
        {"best_iteration": 1, "best_score": 0.9, "since_best": 0, "continue": False}
    assert next_state(state, 1, 0.9, patience=1, max_iterations=None)["continue"] is True


def loop_overrides(patience: int, iterations: int) -> dict:
    return {"loop": {"patience": patience, "max_iterations": "all"},
            "iterations": {str(t): {"prev": t - 1} for t in range(1, iterations + 1)}, "evaluate": {"metric": "mrr@10"}}


def simulate_loop(config, scores: list[float]) -> list[bool]:
    """Run the loop's bookkeeping as evaluate@t does, through the files the next iteration reads."""
    active, previous = [], None
    for t, score in enumerate(scores):
        is_active = iteration_is_active(config, t)
        state = next_state(previous, t, score, config.loop.patience) if is_active else stopped_state(previous)
        active.append(is_active)
        write_json(IterationPaths(t).retrieval, state)
        write_json(IterationPaths(t).continue_flag, {"continue": state["continue"]})
        previous = state
    return active


@pytest.mark.parametrize("patience, scores, expected_active, best", [
    (1, [0.5, 0.4, 0.6, 0.7], [True, True, False, False], 0),
    (1, [0.5, 0.6, 0.7, 0.65, 0.9], [True, True, True, True, False], 2),
    (2, [0.5, 0.4, 0.45, 0.3, 0.9], [True, True, True, False, False], 0),
    (2, [0.5, 0.4, 0.6, 0.55, 0.5, 0.9], [True, True, True, True, True, False], 2),
    (2, [0.1, 0.2, 0.3, 0.4], [True, True, True, True], 3),
])
def test_stop_rule_ends_the_loop(tmp_path, monkeypatch, patience, scores, expected_active, best):
    """iteration_is_active reads t-1's continue flag: `patience` iterations without a gain stop every later one."""
    monkeypatch.chdir(tmp_path)
    config = config_with(loop_overrides(patience, len(scores) - 1))
    assert simulate_loop(config, scores) == expected_active
    assert read_json(IterationPaths(len(scores) - 1).retrieval)["best_iteration"] == best


def test_iteration_is_active_checks_chain(tmp_path, monkeypatch):
    """Iteration 0 is always active; an iteration outside params `iterations` is a StageError."""
    monkeypatch.chdir(tmp_path)
    config = config_with(loop_overrides(1, 2))
    assert iteration_is_active(config, 0)
    write_json(IterationPaths(2).continue_flag, {"continue": True})
    with pytest.raises(StageError, match="not in params `iterations`"):
        iteration_is_active(config, 3)


def test_score_model_scores_each_split_against_all_bodies(tiny_model_dir, one_torch_thread):
    """Val and test metrics are those of the split's ranks; `score` is the configured val metric;
    candidates are all bodies; without val queries the score is None, never a test number."""
    documents = pd.DataFrame(tiny_documents()).rename(columns={"id": "doc_id", "text": "body"})
    documents["split"] = ["fewshot", "val", "test"] * 4
    model = load_model(tiny_model_dir, "cpu")
    evaluate = EvaluateConfig(metric="recall@5", batch_size=8, max_seq_length=64, precision="fp32")
    result, ranks = score_model(model, documents, evaluate)
    assert result["candidates"] == 12 and result["val_queries"] == 4 and result["test_queries"] == 4
    for split in ("val", "test"):
        assert result[split] == retrieval_metrics(ranks.loc[ranks["split"] == split, "rank"].to_numpy())
    assert result["score"] == result["val"]["recall@5"]
    documents["split"] = ["fewshot", "test"] * 6
    result, _ = score_model(model, documents, evaluate)
    assert result["val_queries"] == 0 and result["val"] == {} and result["score"] is None


@pytest.mark.parametrize("validate_on, splits", [("val", {"val"}), ("fewshot+val", {"fewshot", "val"})])
def test_validation_queries_are_the_titles_of_the_named_splits_and_never_test(tiny_model_dir, one_torch_thread,
                                                                              validate_on, splits):
    """The loop's validation set (params `loop.validate_on`) holds exactly the titled documents of
    the splits it names, pooled query by query; no test title is ever among them; an untitled
    document is no query."""
    documents = pd.DataFrame(tiny_documents()).rename(columns={"id": "doc_id", "text": "body"})
    documents["split"] = ["fewshot", "val", "test"] * 4
    documents.loc[3, "title"] = None  # a few-shot document without a title
    model = load_model(tiny_model_dir, "cpu")
    evaluate = EvaluateConfig(metric="mrr@10", batch_size=8, max_seq_length=64, precision="fp32")
    result, ranks = score_model(model, documents, evaluate, validate_on, LOOP_SPLITS)
    titled = documents[documents["title"].notna()]
    assert sorted(ranks["doc_id"]) == sorted(titled["doc_id"])
    validation = ranks[ranks["split"].isin(VALIDATION_SETS[validate_on])]
    assert set(validation["doc_id"]) == set(titled.loc[titled["split"].isin(splits), "doc_id"])
    assert not set(validation["doc_id"]) & set(documents.loc[documents["split"] == "test", "doc_id"])
    assert result["validation_queries"] == len(validation) == {"val": 4, "fewshot+val": 7}[validate_on]
    assert result["validation"] == retrieval_metrics(validation["rank"].to_numpy())
    assert result["score"] == result["validation"]["mrr@10"]
    assert result["fewshot_queries"] == 3 and result["test_queries"] == 4


def test_evaluate_stage_after_stop_carries_state(tmp_path, monkeypatch):
    """A stopped iteration (the stage's entry point, in a scratch project) reports stopped, keeps the
    previous best and since_best, stops every later one, and has no ranks."""
    from stages import evaluate

    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(deep_merge(repo_params(), loop_overrides(1, 2))))
    write_json(IterationPaths(1).retrieval, {"stopped": False, "best_iteration": 0, "best_score": 0.5, "since_best": 1,
                                             "continue": False})
    write_json(IterationPaths(1).continue_flag, {"continue": False})
    monkeypatch.setattr(sys, "argv", ["evaluate", "--iteration", "2"])
    evaluate.main()
    assert read_json(IterationPaths(2).retrieval) == {
        "iteration": 2, "stopped": True, "val_metric": "mrr@10", "best_iteration": 0, "best_score": 0.5,
        "since_best": 1, "continue": False}
    assert read_json(IterationPaths(2).continue_flag) == {"continue": False}
    ranks = pd.read_parquet(IterationPaths(2).ranks)
    assert ranks.empty and list(ranks.columns) == ["doc_id", "split", "rank"]

"""Tests that fail when the method is changed in a way that matters, each against an oracle
written here rather than a tiny model's luck:

- the training loss is symmetric InfoNCE over cosine similarity at temperature τ (logits cos/τ):
  one direction only, scale τ instead of 1/τ, or a dot product fail it;
- early stopping and model selection follow the validation metric only: a crafted run where val
  and test disagree, through the real evaluate and select stages (and `next_state`);
- the candidates of every query are all bodies of the corpus, every split, titled or not.

(The paired bootstrap is pinned in tests/test_reporting.py.)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
import yaml
from conftest import repo_params

from infocse.errors import run_stage
from infocse.stopping import next_state
from infocse.retrieval import rank_queries
from infocse.training import contrastive_loss

# ---------------------------------------------------------------------------------------- the loss


class FixedEmbeddings(torch.nn.Module):
    """Stands in for the sentence encoder: input `row` i embeds as row i of `table`."""

    def __init__(self, table: torch.Tensor):
        super().__init__()
        self.table = table

    def forward(self, features: dict) -> dict:
        return {"sentence_embedding": self.table[features["row"]]}


def symmetric_info_nce(anchors: torch.Tensor, positives: torch.Tensor, temperature: float) -> torch.Tensor:
    """Mean of the cross-entropy anchor -> positives and positive -> anchors, logits cos / τ."""
    logits = F.normalize(anchors, dim=1) @ F.normalize(positives, dim=1).T / temperature
    target = torch.arange(len(anchors))
    return (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target)) / 2


def one_direction(anchors, positives, temperature):
    logits = F.normalize(anchors, dim=1) @ F.normalize(positives, dim=1).T / temperature
    return F.cross_entropy(logits, torch.arange(len(anchors)))


def batch(seed: int = 0, size: int = 8, dim: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """Anchors and noisy positives (the loss stays far from 0 even at τ = 0.05), not unit length,
    with unequal norms (so cosine matters); float64, so the comparison can be tight."""
    generator = torch.Generator().manual_seed(seed)
    anchors = torch.randn(size, dim, generator=generator, dtype=torch.float64)
    positives = anchors + 1.5 * torch.randn(size, dim, generator=generator, dtype=torch.float64)
    return anchors * torch.linspace(0.5, 3.0, size, dtype=torch.float64)[:, None], positives


@pytest.mark.parametrize("temperature", [0.05, 0.2, 1.0])
def test_the_loss_is_symmetric_info_nce_at_temperature_tau(temperature):
    anchors, positives = batch()
    size = len(anchors)
    loss = contrastive_loss(FixedEmbeddings(torch.cat([anchors, positives])), temperature)
    features = [{"row": torch.arange(size)}, {"row": torch.arange(size, 2 * size)}]
    value = loss(features, labels=None).item()
    assert value > 0.1  # a batch the loss has not already solved
    assert value == pytest.approx(symmetric_info_nce(anchors, positives, temperature).item(), rel=1e-9)


def test_the_fixed_batch_tells_the_variants_apart():
    """The oracle above would not notice a wrong loss on a batch where the variants agree."""
    anchors, positives = batch()
    right = symmetric_info_nce(anchors, positives, 0.05).item()
    assert abs(one_direction(anchors, positives, 0.05).item() - right) > 1e-3
    assert abs(symmetric_info_nce(anchors, positives, 1 / 0.05).item() - right) > 1e-3
    dot = (anchors @ positives.T) / 0.05
    target = torch.arange(len(anchors))
    assert abs(((F.cross_entropy(dot, target) + F.cross_entropy(dot.T, target)) / 2).item() - right) > 1e-3


# ----------------------------------------------------------------------- stopping and selection

# Six documents, bodies embedded as one-hot vectors; a query embeds at its own body ("good": rank
# 0) or mostly at the first few-shot body ("bad": rank 1).
DOCS = ["f1", "f2", "v1", "v2", "t1", "t2"]
SPLITS = ["fewshot", "fewshot", "val", "val", "test", "test"]
# Which queries are good, per iteration: val improves at 1 and falls at 2; test does the opposite.
GOOD = {0: {"v1", "t1"}, 1: {"v1", "v2"}, 2: {"t1", "t2"}}


def documents() -> pd.DataFrame:
    return pd.DataFrame({"doc_id": DOCS, "title": [f"title {d}" for d in DOCS], "body": [f"body {d}" for d in DOCS],
                         "category": "x", "split": SPLITS})


class StubEncoder:
    """A model whose `encode` returns the vector chosen for each text (unit length if asked)."""

    device = torch.device("cpu")

    def __init__(self, vectors: dict[str, np.ndarray]):
        self.vectors = vectors

    def encode(self, texts, normalize_embeddings: bool = False, **_) -> np.ndarray:
        rows = np.array([self.vectors[text] for text in texts], dtype=np.float32)
        return rows / np.linalg.norm(rows, axis=1, keepdims=True) if normalize_embeddings else rows


def stub_model_at(t: int, good: dict[int, set[str]] = GOOD) -> StubEncoder:
    one_hot = np.eye(len(DOCS))
    vectors = {f"body {d}": one_hot[i] for i, d in enumerate(DOCS)}
    for i, d in enumerate(DOCS):
        vectors[f"title {d}"] = one_hot[i] if d in good[t] else one_hot[0] + 0.5 * one_hot[i]
    return StubEncoder(vectors)


@pytest.fixture()
def crafted_project(tmp_path, monkeypatch) -> Path:
    """A project with two iterations, patience 1, and stub models per iteration."""
    params = repo_params()
    params.update({"device": "cpu", "iterations": {"1": {"prev": 0}, "2": {"prev": 1}}})
    params["loop"] = {"patience": 1, "max_iterations": "all"}
    params["evaluate"]["metric"] = "mrr@10"
    params["precision"] = "fp32"  # pinned numbers: the default, stated
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    (tmp_path / "data/corpus").mkdir(parents=True)
    documents().to_parquet(tmp_path / "data/corpus/documents.parquet", index=False)
    for t in GOOD:
        model = tmp_path / f"models/iterations/iter-{t}"
        model.mkdir(parents=True)
        (model / "weights.txt").write_text(f"iter-{t}")
        metrics = tmp_path / f"metrics/iterations/iter-{t}"  # what init and train write, for the model card
        metrics.mkdir(parents=True)
        (metrics / "train.json").write_text(json.dumps({"skipped": t == 0, "steps": 1, "train_loss": 1.0, "pairs": 2}))
    (tmp_path / "metrics/corpus.json").write_text(json.dumps({"documents": len(DOCS), "sentences": 2 * len(DOCS)}))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run_evaluate(t: int, monkeypatch, good: dict[int, set[str]] = GOOD) -> dict:
    import stages.evaluate

    monkeypatch.setattr(stages.evaluate, "load_model", lambda path, *_, **__: stub_model_at(int(Path(path).name[5:]), good))
    monkeypatch.setattr(sys, "argv", ["evaluate", "--iteration", str(t)])
    run_stage(stages.evaluate.main)
    return json.loads(Path(f"metrics/iterations/iter-{t}/retrieval.json").read_text())


def test_stopping_and_selection_follow_val_where_test_disagrees(crafted_project, monkeypatch):
    """val MRR@10 0.75 -> 1.0 -> 0.5 and test 0.75 -> 0.5 -> 1.0: by val, iteration 1 is best and
    iteration 2 the one that stops the loop; by test, the loop would stop after 1 and keep 0, or
    select 2."""
    import stages.select

    states = [run_evaluate(t, monkeypatch) for t in GOOD]
    assert [s["val"]["mrr@10"] for s in states] == [0.75, 1.0, 0.5]
    assert [s["test"]["mrr@10"] for s in states] == [0.75, 0.5, 1.0]
    assert [(s["best_iteration"], s["since_best"], s["continue"]) for s in states] == [
        (0, 0, True), (1, 0, True), (1, 1, False)]
    monkeypatch.setattr(sys, "argv", ["select"])
    run_stage(stages.select.main)
    best = json.loads(Path("metrics/best.json").read_text())
    assert best["iteration"] == 1 and Path("models/best/weights.txt").read_text() == "iter-1"
    assert best["val"]["mrr@10"] == 1.0 and best["test"]["mrr@10"] == 0.5


# Few-shot title f2 ranks first only at iteration 0 (f1 always does); val as GOOD.
GOOD_FEWSHOT_DISAGREES = {0: {"f2", "v1", "t1"}, 1: {"v1", "v2"}, 2: {"t1", "t2"}}


@pytest.mark.parametrize("validate_on, selected, stopped", [("val", 1, [False, False, False]),
                                                            ("fewshot+val", 0, [False, False, True])])
def test_the_loop_stops_and_selects_on_the_validation_set_the_param_names(crafted_project, monkeypatch,
                                                                          validate_on, selected, stopped):
    """val MRR@10 0.75 -> 1.0 -> 0.5, but over the few-shot pool and val together 0.875 -> 0.875 (f2
    falls from rank 1 to 2 as v2 rises): by val, iteration 1 is a gain and is selected; by few-shot
    pool + val it is not (a gain must be strictly higher), the loop stops after it and keeps 0."""
    import stages.select

    params = yaml.safe_load(Path("params.yaml").read_text())
    params["loop"]["validate_on"] = validate_on
    Path("params.yaml").write_text(yaml.safe_dump(params))
    states = [run_evaluate(t, monkeypatch, GOOD_FEWSHOT_DISAGREES) for t in GOOD_FEWSHOT_DISAGREES]
    assert [s["stopped"] for s in states] == stopped
    assert [s["val"]["mrr@10"] for s in states[:2]] == [0.75, 1.0]
    assert [s["fewshot"]["mrr@10"] for s in states[:2]] == [1.0, 0.75]
    assert states[0]["validation_queries"] == {"val": 2, "fewshot+val": 4}[validate_on]
    assert [s["validation"]["mrr@10"] for s in states[:2]] == {"val": [0.75, 1.0], "fewshot+val": [0.875, 0.875]}[validate_on]
    monkeypatch.setattr(sys, "argv", ["select"])
    run_stage(stages.select.main)
    best = json.loads(Path("metrics/best.json").read_text())
    assert best["iteration"] == selected and Path("models/best/weights.txt").read_text() == f"iter-{selected}"
    assert best["validate_on"] == validate_on and best["validation_queries"] == states[0]["validation_queries"]


def test_next_state_stops_on_the_validation_scores_it_is_given():
    """The same run as the state machine sees it: a gain must be strictly higher; patience 1."""
    state = next_state(None, 0, 0.75, patience=1)
    state = next_state(state, 1, 1.0, patience=1)
    assert (state["best_iteration"], state["continue"]) == (1, True)
    state = next_state(state, 2, 0.5, patience=1)
    assert (state["best_iteration"], state["since_best"], state["continue"]) == (1, 1, False)
    assert next_state(next_state(None, 0, 0.75, patience=1), 1, 0.75, patience=1)["best_iteration"] == 0


# ---------------------------------------------------------------------------------- candidates


def test_every_body_of_the_corpus_is_a_candidate():
    """Query t1 scores the bodies f1 0.9 (few-shot, no title), v1 0.8 (val), t2 0.7 (test), its own
    0.6: rank 3. Candidates from the query's split only would give 1; val and test only, or only
    documents with a title, 2."""
    docs = documents()
    docs.loc[0, "title"] = None
    one_hot = np.eye(len(DOCS))
    vectors = {f"body {d}": one_hot[i] for i, d in enumerate(DOCS)}
    vectors.update({f"title {d}": one_hot[i] for i, d in enumerate(DOCS)})
    vectors["title t1"] = 0.9 * one_hot[0] + 0.8 * one_hot[2] + 0.7 * one_hot[5] + 0.6 * one_hot[4]
    ranks = rank_queries(StubEncoder(vectors), docs, 8)
    assert dict(zip(ranks["doc_id"], ranks["rank"])) == {"v1": 0, "v2": 0, "t1": 3, "t2": 0}
    assert dict(zip(ranks["doc_id"], ranks["split"])) == {"v1": "val", "v2": "val", "t1": "test", "t2": "test"}

"""Smoke run of the real path: the packaged all-MiniLM-L6-v2 and BBC News, a few dozen documents,
one iteration -- so a broken install of the real model or data cannot hide behind the tiny model."""

from __future__ import annotations

import json

from pipeline_helpers import make_project, repro
from sentence_transformers import SentenceTransformer


def test_real_model_and_corpus_run_one_iteration(tmp_path):
    project = make_project(tmp_path / "project", {
        "device": "cpu",
        "corpus": {"source": "bbc", "max_documents": 30},
        "budget": {"max_pairs": 48},
        "finetune": {"labels": 8, "batch_size": 4, "max_seq_length": 128, "epochs": 1},
        "train": {"batch_size": 16},
        "evaluate": {"max_seq_length": 128},
        "report": {"bootstrap_samples": 200},
        "iterations": {"1": {"prev": 0}},
    })
    ran, _ = repro(project, "finetune@f0", "finetune@best")  # the real model through training, selection, fine-tuning
    assert {"train@1", "select", "finetune@f0", "finetune@best"} <= set(ran)
    seed = json.loads((project / "metrics/iterations/iter-0/retrieval.json").read_text())
    trained = json.loads((project / "metrics/iterations/iter-1/retrieval.json").read_text())
    assert seed["candidates"] == 30 and trained["test_queries"] == seed["test_queries"] > 5
    assert seed["test"]["recall@10"] > 0.5  # a real sentence model finds most headlines among 30 articles
    train = json.loads((project / "metrics/iterations/iter-1/train.json").read_text())
    assert train["steps"] >= 2 and train["pairs_used"] > 16
    finetuned = json.loads((project / "metrics/finetuned/f0.json").read_text())
    assert finetuned["labels"] == 8 and finetuned["test_queries"] == seed["test_queries"]
    model = SentenceTransformer(str(project / "models/best"), device="cpu")
    assert model.encode(["Shares fell sharply"]).shape == (1, 384)

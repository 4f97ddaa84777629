"""Tiny end-to-end `dvc repro`, continued from test_pipeline.py: reruns after a change, byte-identical
outputs, early stopping, the round-1 annotator and InfoCSE++ stopping."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
from pipeline_helpers import locked_outputs, repro, update_params
from pipeline_project import FEWSHOT_STAGES, FROZEN, RECORD_STAGES


def test_changing_k_reruns_clustering_onward_but_not_first_embed(project):
    update_params(project, {"idc": {"k": 2}})
    ran, _ = repro(project)
    assert ran[:4] == ["cluster@1", "train@1", "evaluate@1", "select"] and ran[-3:] == ["report", *RECORD_STAGES], ran
    # the InfoCSE++ rounds (which use K) follow, and fine-tuning if the selected model changed; nothing else
    after = set(ran[4:-3])
    assert {"plusplus@2", "plusplus@3", "select_plusplus"} <= after <= set(FEWSHOT_STAGES) - {"labels", "finetune@f0"}


def test_rerun_gives_byte_identical_outputs(project):
    before = locked_outputs(project)
    repro(project, "--force", "--single-item", "prepare", "init", "embed@1", "cluster@1", "train@1", "evaluate@1", "select")
    after = locked_outputs(project)
    for path in ["data/corpus/documents.parquet", "data/corpus/sentences.parquet", "models/iterations/iter-0",
                 "data/iterations/iter-1/embeddings.npy", "data/iterations/iter-1/pairs.parquet",
                 "models/iterations/iter-1", "data/ranks/iter-1.parquet", "metrics/iterations/iter-1/retrieval.json",
                 "metrics/iterations/iter-0/live/plots", "metrics/iterations/iter-1/live/plots",
                 "metrics/iterations/iter-1/live/metrics.json", "models/best"]:  # its model card included
        assert after[path] == before[path], path


def test_no_gain_stops_early_and_later_iterations_do_no_work(project):
    """With a frozen learning rate the model cannot improve on val: iteration 2 must be skipped."""
    update_params(project, {"train": {"learning_rate": FROZEN}, "loop": {"patience": 1},
                            "iterations": {"1": {"prev": 0}, "2": {"prev": 1}}})
    repro(project, "select")  # the loop's stages: what comes after them does not decide when it stops
    train2 = json.loads((project / "metrics/iterations/iter-2/train.json").read_text())
    assert train2["skipped"] is True
    assert [p.name for p in (project / "models/iterations/iter-2").iterdir()] == ["SKIPPED"]
    assert json.loads((project / "metrics/iterations/iter-2/retrieval.json").read_text())["stopped"] is True
    assert json.loads((project / "metrics/best.json").read_text())["iteration"] == 0


def test_first_round_model_mines_round_one_while_f0_is_trained(project, tmp_path):
    """With another model as round-1 annotator, embed@1 holds that model's embeddings, and
    train@1 still starts from f_0 (the first embedding is not f_0's)."""
    from conftest import build_tiny_model
    from sentence_transformers import SentenceTransformer

    annotator = build_tiny_model(tmp_path / "annotator", seed=1)
    update_params(project, {"idc": {"first_round_model": str(annotator)}})
    ran, _ = repro(project, "embed@1")  # round 1's embeddings: what the annotator changes first
    assert ran == ["first_round_model", "embed@1"], ran
    texts = pd.read_parquet(project / "data/corpus/sentences.parquet")["text"].tolist()
    embeddings = np.load(project / "data/iterations/iter-1/embeddings.npy")
    expected = SentenceTransformer(str(annotator), device="cpu").encode(texts, normalize_embeddings=True)
    f0 = SentenceTransformer(str(project / "models/iterations/iter-0"), device="cpu").encode(texts, normalize_embeddings=True)
    np.testing.assert_allclose(embeddings, expected, atol=1e-5)
    assert not np.allclose(embeddings, f0, atol=1e-3)


def test_plusplus_stops_when_the_fine_tuned_validation_score_stops_improving(project):
    """Frozen learning rates: fine-tuned val cannot improve, so round 2 runs (patience 1) and round 3 does no work."""
    update_params(project, {"train": {"learning_rate": FROZEN}, "finetune": {"learning_rate": FROZEN},
                            "plusplus": {"max_rounds": 3}})
    repro(project, "select_plusplus")  # the rounds and their choice
    round2 = json.loads((project / "metrics/finetuned/round-2.json").read_text())
    round3 = json.loads((project / "metrics/finetuned/round-3.json").read_text())
    assert round2["stopped"] is False and round2["since_best"] == 1 and round2["continue"] is False
    assert round3["stopped"] is True
    assert [p.name for p in (project / "models/finetuned/round-3").iterdir()] == ["SKIPPED"]
    summary = json.loads((project / "metrics/plusplus.json").read_text())
    assert summary["best_round"] == 1 and summary["rounds_run"] == 2

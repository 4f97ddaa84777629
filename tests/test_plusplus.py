"""InfoCSE++ rounds (infocse/plusplus.py, run by stages/plusplus.py): a round starts from the
previous round's fine-tuned model (checked by weights), its InfoCSE loop stops early like the main
loop, and rounds stop on the fine-tuned validation score. The round chain in params is checked
with all other params (tests/test_config.py)."""

from __future__ import annotations

import sys

import pandas as pd
import pytest
import torch
import yaml
from conftest import build_tiny_model, config_with, repo_params, tiny_documents
from pipeline_helpers import deep_merge
from safetensors.torch import load_file

from infocse.corpora.sentences import build_sentence_table
from infocse.errors import StageError
from infocse.io import read_json, write_json
from infocse.paths import DOCUMENTS, LABELS, SENTENCES, finetuned_metrics, finetuned_model
from infocse.stopping import first_round_state, round_is_active, round_names

# A learning rate this small moves no weight that is not zero (and a zero one by ~1e-30): the
# model cannot improve on val, so every stop rule must fire. Params refuse a rate of 0.
FROZEN = 1.0e-30


def tiny_overrides(plusplus_rounds: dict | None = None) -> dict:
    training = {"batch_size": 4, "learning_rate": FROZEN, "warmup_ratio": 0.1, "temperature": 0.05,
                "max_seq_length": 64, "epochs": 1}
    return {
        "seed": 0, "device": "cpu",
        "embed": {"batch_size": 16, "max_seq_length": 64},
        "idc": {"method": "partition", "k": 1, "kmeans_clusters": 2},
        "budget": {"max_pairs_per_document": "all", "max_pairs": "all"},
        "train": training,
        "evaluate": {"metric": "mrr@10", "batch_size": 16, "max_seq_length": 64},
        "loop": {"patience": 1, "max_iterations": "all"},
        "iterations": {"1": {"prev": 0}, "2": {"prev": 1}},
        "finetune": {"labels": "all", "source": "file", "path": "labels.jsonl", **training},
        "plusplus": {"patience": 1, "max_rounds": 3, "rounds": plusplus_rounds or {"2": {"prev": "best"}}},
    }


@pytest.fixture()
def tiny_project(tmp_path, monkeypatch):
    """The tables and params a round reads, in a scratch working directory."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(deep_merge(repo_params(), tiny_overrides())))
    docs = pd.DataFrame(tiny_documents()).rename(columns={"id": "doc_id", "text": "body"})
    docs["split"] = ["val", "test"] * (len(docs) // 2)
    sentences, _ = build_sentence_table(docs)
    DOCUMENTS.parent.mkdir(parents=True)
    docs.to_parquet(DOCUMENTS)
    sentences.to_parquet(SENTENCES)
    LABELS.parent.mkdir(parents=True)
    pd.DataFrame({"pair_id": ["a", "b", "c", "d"], "query": ["goal", "rain", "soup", "rocket"],
                  "positive": ["The striker scored a late goal.", "Heavy rain fell across the valley.",
                               "The soup simmered for an hour.", "The rocket launched from the coast."]}).to_parquet(LABELS)
    return tmp_path


def run_stage_round(number: int, monkeypatch) -> dict:
    from stages import plusplus

    monkeypatch.setattr(sys, "argv", ["plusplus", "--round", str(number)])
    plusplus.main()
    return read_json(finetuned_metrics(f"round-{number}"))


def weights(folder) -> dict[str, torch.Tensor]:
    return load_file(str(next(folder.rglob("model.safetensors"))))


def test_a_round_starts_from_the_previous_rounds_fine_tuned_model(tiny_project, monkeypatch, one_torch_thread):
    """With a frozen learning rate the round's output must be its start: round-1's fine-tuned
    model (tiny model, seed 1), not some other model (seed 0)."""
    start = build_tiny_model(tiny_project / "start", seed=1)
    other = build_tiny_model(tiny_project / "other", seed=0)
    finetuned_model("best").parent.mkdir(parents=True)
    start.rename(finetuned_model("best"))
    write_json(finetuned_metrics("best"), {"round": 1, "stopped": False, "best_iteration": 1, "best_score": 0.0,
                                           "since_best": 0, "continue": True})
    result = run_stage_round(2, monkeypatch)
    produced = weights(finetuned_model("round-2"))
    expected, unrelated = weights(finetuned_model("best")), weights(other)
    assert produced.keys() == expected.keys()
    assert all(torch.allclose(produced[name], expected[name], rtol=0, atol=1e-20) for name in produced)
    assert not all(torch.allclose(produced[name], unrelated[name], atol=1e-3) for name in produced)
    # no validation gain, so the inner loop stops after one iteration and keeps iteration 0
    assert [(entry["iteration"], entry["chosen"]) for entry in result["infocse"]] == [(0, True), (1, False)]
    assert result["round"] == 2 and result["prev"] == "best" and result["labels"] == 4
    assert result["stopped"] is False and result["best_iteration"] == 2  # any val score beats round 1's 0.0


def test_a_round_after_the_stop_does_no_work(tiny_project, monkeypatch):
    """Round 2 after a stop: a SKIPPED placeholder, and the previous state carried, stopped."""
    write_json(finetuned_metrics("best"), {"round": 1, "stopped": False, "best_iteration": 1, "best_score": 0.4,
                                           "since_best": 1, "continue": False})
    result = run_stage_round(2, monkeypatch)
    assert [p.name for p in finetuned_model("round-2").iterdir()] == ["SKIPPED"]
    assert result == {"round": 2, "stopped": True, "best_iteration": 1, "best_score": 0.4, "since_best": 1,
                      "continue": False, "prev": "best"}


def test_a_round_outside_params_is_refused(tiny_project, monkeypatch):
    with pytest.raises(StageError, match="round 3 is not in params `plusplus.rounds`"):
        run_stage_round(3, monkeypatch)


def test_round_state_and_names():
    """Round 1's state stops the rounds when `max_rounds` is 1; a round runs only while the
    previous state continues and within `max_rounds`."""
    config = config_with(tiny_overrides({"2": {"prev": "best"}, "3": {"prev": "round-2"}}))
    assert round_names(config) == {1: "best", 2: "round-2", 3: "round-3"}
    assert first_round_state(config, 0.5) == {"best_iteration": 1, "best_score": 0.5, "since_best": 0,
                                              "continue": True}
    single = config_with({**tiny_overrides(), "plusplus": {"patience": 1, "max_rounds": 1, "rounds": {}}})
    assert first_round_state(single, 0.5)["continue"] is False
    assert round_is_active(config, 3, {"continue": True})
    assert not round_is_active(config, 2, {"continue": False})
    capped = config_with({**tiny_overrides(), "plusplus": {"patience": 1, "max_rounds": 2,
                                                           "rounds": {"2": {"prev": "best"}, "3": {"prev": "round-2"}}}})
    assert not round_is_active(capped, 3, {"continue": True})

"""InfoCSE++ rounds (stages/plusplus.py): a round starts from the previous round's fine-tuned
model (checked by weights), its InfoCSE loop stops early like the main loop, and the round chain
is checked."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from conftest import build_tiny_model, tiny_documents
from safetensors.torch import load_file

from stages.common import DOCUMENTS, SENTENCES, StageError
from stages.finetune import finetuned_model
from stages.labels import LABELS
from stages.plusplus import round_chain, run_round
from stages.prepare import build_sentence_table


def tiny_params(plusplus_rounds: dict | None = None) -> dict:
    return {
        "seed": 0, "device": "cpu",
        "embed": {"batch_size": 16, "max_seq_length": 64},
        "idc": {"method": "partition", "k": 1, "kmeans_clusters": 2},
        "budget": {"max_pairs_per_document": "all", "max_pairs": "all"},
        "train": {"batch_size": 4, "learning_rate": 0.0, "warmup_ratio": 0.1, "temperature": 0.05,
                  "max_seq_length": 64, "epochs": 1},
        "evaluate": {"metric": "mrr@10", "batch_size": 16, "max_seq_length": 64},
        "loop": {"patience": 1, "max_iterations": "all"},
        "iterations": {"1": {"prev": 0}, "2": {"prev": 1}},
        "finetune": {"labels": "all", "source": "file", "path": "labels.jsonl", "batch_size": 4, "learning_rate": 0.0,
                     "warmup_ratio": 0.1, "temperature": 0.05, "max_seq_length": 64, "epochs": 1},
        "plusplus": {"patience": 1, "max_rounds": 3, "rounds": plusplus_rounds or {"2": {"prev": "best"}}},
    }


@pytest.fixture()
def tiny_project(tmp_path, monkeypatch):
    """The tables a round reads, in a scratch working directory."""
    monkeypatch.chdir(tmp_path)
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


def weights(folder) -> dict[str, torch.Tensor]:
    return load_file(str(next(folder.rglob("model.safetensors"))))


def test_a_round_starts_from_the_previous_rounds_fine_tuned_model(tiny_project, one_torch_thread):
    """With learning rates 0 the round's output must be exactly its start: round-1's fine-tuned
    model (tiny model, seed 1), not some other model (seed 0)."""
    start = build_tiny_model(tiny_project / "start", seed=1)
    other = build_tiny_model(tiny_project / "other", seed=0)
    finetuned_model("best").parent.mkdir(parents=True)
    start.rename(finetuned_model("best"))
    result = run_round(tiny_params(), 2, "best", {"best_iteration": 1, "best_score": 0.0, "since_best": 0,
                                                  "continue": True})
    produced = weights(finetuned_model("round-2"))
    expected, unrelated = weights(finetuned_model("best")), weights(other)
    assert produced.keys() == expected.keys()
    assert all(torch.equal(produced[name], expected[name]) for name in produced)
    assert not all(torch.equal(produced[name], unrelated[name]) for name in produced)
    # lr 0: no validation gain, so the inner loop stops after one iteration and keeps iteration 0
    assert [(entry["iteration"], entry["chosen"]) for entry in result["infocse"]] == [(0, True), (1, False)]
    assert result["round"] == 2 and result["prev"] == "best" and result["labels"] == 4


def test_round_chain_is_checked():
    assert round_chain(tiny_params({"2": {"prev": "best"}, "3": {"prev": "round-2"}})) == {2: "best", 3: "round-2"}
    with pytest.raises(StageError, match="`plusplus.rounds.3.prev` must be 'round-2'"):
        round_chain(tiny_params({"2": {"prev": "best"}, "3": {"prev": "best"}}))
    with pytest.raises(StageError, match="numbered 2..R"):
        round_chain(tiny_params({"2": {"prev": "best"}, "4": {"prev": "round-3"}}))

"""Labelled pairs for few-shot fine-tuning (infocse.corpora.labels): only few-shot pool documents,
deterministic sampling by `seed`, nested budgets, a user's own pairs, none for a corpus without
titles, clear errors."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from conftest import config_with

from infocse.config import Config
from infocse.corpora.labels import LABEL_COLUMNS, fewshot_pairs, labelled_pairs, read_labelled_pairs, sample_labels
from infocse.errors import StageError


def documents(n: int = 60) -> pd.DataFrame:
    splits = ["fewshot", "val", "test"] * (n // 3)
    return pd.DataFrame({"doc_id": [f"d{i:03d}" for i in range(n)], "title": [f"title {i}" for i in range(n)],
                         "body": [f"body {i}" for i in range(n)], "split": splits, "category": "all"})


def params(labels, seed: int = 0, **finetune) -> Config:
    return config_with({"seed": seed, "finetune": {"labels": labels, "source": "fewshot", "path": "corpus", **finetune}})


def test_fewshot_pairs_take_only_the_fewshot_pool_with_titles():
    docs = documents()
    docs.loc[0, "title"] = None  # d000 is few-shot but has no title
    pairs = fewshot_pairs(docs)
    assert list(pairs.columns) == LABEL_COLUMNS
    expected = docs[(docs["split"] == "fewshot") & docs["title"].notna()]
    assert pairs["pair_id"].tolist() == expected["doc_id"].tolist()
    assert (pairs["query"] == expected["title"].to_numpy()).all() and (pairs["positive"] == expected["body"].to_numpy()).all()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sampling_never_takes_a_val_or_test_document_and_is_deterministic(seed):
    docs = documents()
    first = labelled_pairs(params(7, seed), docs)
    assert len(first) == 7
    split_of = dict(zip(docs["doc_id"], docs["split"]))
    assert {split_of[pair_id] for pair_id in first["pair_id"]} == {"fewshot"}
    pd.testing.assert_frame_equal(first, labelled_pairs(params(7, seed), docs))


def test_seeds_draw_different_samples_and_budgets_are_nested():
    docs = documents()
    assert labelled_pairs(params(7, 0), docs)["pair_id"].tolist() != labelled_pairs(params(7, 1), docs)["pair_id"].tolist()
    small, large = labelled_pairs(params(5, 3), docs), labelled_pairs(params(12, 3), docs)
    assert set(small["pair_id"]) < set(large["pair_id"])
    assert len(labelled_pairs(params("all"), docs)) == 20


def test_sample_labels_keeps_the_original_order():
    pairs = pd.DataFrame({"pair_id": [str(i) for i in range(10)], "query": "q", "positive": "p"})
    ids = sample_labels(pairs, 4, seed=5)["pair_id"].astype(int).tolist()
    assert ids == sorted(ids) and len(set(ids)) == 4


def test_a_users_file_of_pairs(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps({"query": f"q{i}", "positive": f"p{i}"}) + "\n" for i in range(6)))
    pairs = labelled_pairs(params("all", source="file", path=str(path)), documents())
    assert pairs["query"].tolist() == [f"q{i}" for i in range(6)] and pairs["pair_id"].tolist() == [str(i) for i in range(6)]
    pd.DataFrame({"query": ["a", "b"], "positive": ["x", "y"], "id": ["k1", "k2"]}).to_parquet(tmp_path / "pairs.parquet")
    assert read_labelled_pairs(tmp_path / "pairs.parquet")["pair_id"].tolist() == ["k1", "k2"]


@pytest.mark.parametrize("overrides, message", [
    ({"labels": 100}, "only 20 labelled pairs exist"),
    ({"labels": 0}, "`finetune.labels` must be an integer >= 1"),
    ({"labels": 5, "source": "web"}, r"`finetune.source` must be one of \['fewshot', 'file'\]"),
    ({"labels": 5, "source": "file", "path": "no/such.jsonl"}, "no such file"),
])
def test_bad_params_are_clear_errors(overrides, message):
    """Out-of-range params are refused by the config, the rest when the pairs are drawn."""
    with pytest.raises(StageError, match=message):
        labelled_pairs(config_with({"finetune": {"source": "fewshot", "path": "corpus", **overrides}}), documents())


def test_a_corpus_without_titles_has_no_labels():
    """No titles at all: an empty table (the finetune stages then skip), not an error."""
    docs = documents().assign(title=None)
    pairs = labelled_pairs(params(5), docs)
    assert pairs.empty and list(pairs.columns) == LABEL_COLUMNS


def test_too_few_titled_fewshot_documents_say_what_to_change():
    """Titles exist, but the few-shot pool has one titled document: the error counts them and names the params."""
    docs = documents()
    docs.loc[docs["split"] == "fewshot", "title"] = None
    docs.loc[0, "title"] = "the only one"
    with pytest.raises(StageError, match=r"^1 labelled pair\(s\) available \(.*`split.fewshot`.*`finetune.source: file`"):
        labelled_pairs(params(5), docs)


def test_a_file_without_the_columns_is_a_clear_error(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps({"question": "q", "answer": "a"}) + "\n")
    with pytest.raises(StageError, match=r"missing column\(s\) \['query', 'positive'\]"):
        read_labelled_pairs(path)

"""The prepared corpus (infocse.corpora): sentence splitting, the sentence table, the stratified
label split, user corpora in JSONL / Parquet / .txt folders, their error messages, and the
built-in BBC loader. Bad inputs fed through the prepare stage itself: test_bad_inputs.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import config_with, tiny_documents

from infocse.config import SPLITS, Config
from infocse.corpora.build import prepare_corpus
from infocse.corpora.readers import read_bbc_news
from infocse.corpora.sentences import build_sentence_table, split_sentences
from infocse.corpora.splits import assign_splits
from infocse.errors import StageError

FRACTIONS = {"fewshot": 0.4, "val": 0.2, "test": 0.4}


def config_for(source: str, path: Path | str, seed: int = 0, **corpus) -> Config:
    """The repository's params with `seed`, the split above and this corpus."""
    return config_with({"seed": seed, "split": dict(FRACTIONS),
                        "corpus": {"source": source, "path": str(path), "title_first_line": True,
                                   "max_documents": "all", **corpus}})


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


# ---------------------------------------------------------------- split_sentences
def test_split_sentences():
    """Sentences are split, stripped, and blank lines dropped."""
    body = "First sentence. Second one!\n\n   \n  Third here?  \n\tLead space.   Another one.  "
    assert split_sentences(body) == ["First sentence.", "Second one!", "Third here?", "Lead space.", "Another one."]
    assert split_sentences("") == []
    assert split_sentences("\n  \n") == []
    assert split_sentences("  Just one  ") == ["Just one"]


# ---------------------------------------------------------------- build_sentence_table
def test_build_sentence_table():
    """Repeats inside a document dropped and counted; the same sentence in two documents kept;
    short documents counted; ids 0..n-1; positions restart per document."""
    documents = pd.DataFrame({
        "doc_id": ["d1", "d2", "d3", "d4"],
        "body": ["Alpha one. Beta two. Alpha one. Gamma three.", "Alpha one.\nDelta four.",
                 "Only one sentence.", "Echo five. Echo five."],
    })
    table, stats = build_sentence_table(documents)
    assert list(table.columns) == ["sentence_id", "doc_id", "position", "text"]
    assert table["doc_id"].tolist() == ["d1", "d1", "d1", "d2", "d2", "d3", "d4"]
    assert table["text"].tolist() == ["Alpha one.", "Beta two.", "Gamma three.", "Alpha one.", "Delta four.",
                                      "Only one sentence.", "Echo five."]
    assert table["position"].tolist() == [0, 1, 2, 0, 1, 0, 0]
    assert table["sentence_id"].tolist() == list(range(7))
    assert stats == {"sentences": 7, "repeated_sentences_dropped": 2, "documents_under_two_sentences": 2}


# ---------------------------------------------------------------- assign_splits
def categorised(counts: dict[str, int]) -> pd.DataFrame:
    categories = [c for c, n in counts.items() for _ in range(n)]
    return pd.DataFrame({"doc_id": [f"doc{i:03d}" for i in range(len(categories))], "category": categories})


def test_assign_splits_is_stratified():
    """Each category is split 40/20/40 on its own (rounded cumulative bounds)."""
    documents = categorised({"a": 50, "b": 25, "c": 10, "d": 5})
    split = assign_splits(documents, FRACTIONS, seed=0)
    assert set(split) == set(SPLITS)
    counts = pd.crosstab(documents["category"], split)
    expected = {"a": (20, 10, 20), "b": (10, 5, 10), "c": (4, 2, 4), "d": (2, 1, 2)}
    for category, (fewshot, val, test) in expected.items():
        assert (counts.loc[category, "fewshot"], counts.loc[category, "val"], counts.loc[category, "test"]) == \
               (fewshot, val, test), category


def test_assign_splits_seeded():
    """Same seed -> same assignment; another seed -> another one."""
    documents = categorised({"a": 40, "b": 30})
    first = assign_splits(documents, FRACTIONS, seed=0)
    assert first.equals(assign_splits(documents, FRACTIONS, seed=0))
    assert not first.equals(assign_splits(documents, FRACTIONS, seed=1))


@pytest.mark.parametrize("fractions, message", [
    ({"fewshot": 0.5, "val": 0.2, "test": 0.4}, "`split` fractions must sum to 1"),
    ({"fewshot": 0.3, "val": 0.2, "test": 0.4}, "`split` fractions must sum to 1"),
    ({"fewshot": 1.2, "val": -0.2, "test": 0.0}, r"`split.fewshot` must be a number in \[0, 1\], got 1.2.*\n"
                                                 r".*`split.val` must be a number in \[0, 1\], got -0.2"),
])
def test_bad_split_fractions_are_refused_by_the_config(fractions, message):
    """Fractions must each lie in [0, 1] and sum to 1: checked with the params, before any split."""
    with pytest.raises(StageError, match=message):
        config_with({"split": fractions})


# ---------------------------------------------------------------- prepare_corpus: good corpora
def expected_sentence_count() -> int:
    return sum(len(split_sentences(d["text"])) for d in tiny_documents())


def test_prepare_jsonl_corpus(tiny_corpus_jsonl):
    """A JSONL corpus gives documents with titles, categories and splits, and its sentences."""
    documents, sentences, stats = prepare_corpus(config_for("jsonl", tiny_corpus_jsonl))
    source = pd.DataFrame(tiny_documents()).sort_values("id").reset_index(drop=True)
    assert documents["doc_id"].tolist() == source["id"].tolist()
    assert documents["title"].tolist() == source["title"].tolist()
    assert documents["body"].tolist() == source["text"].tolist()
    assert documents["category"].tolist() == source["category"].tolist()
    assert len(sentences) == expected_sentence_count() == 54
    assert set(sentences["doc_id"]) == set(documents["doc_id"])
    # two documents per category: fewshot 1, val 0, test 1 each
    assert documents.groupby("category")["split"].apply(sorted).map(tuple).unique().tolist() == [("fewshot", "test")]
    assert stats["documents"] == 12 and stats["documents_with_title"] == 12
    assert (stats["fewshot_documents"], stats["val_documents"], stats["test_documents"]) == (6, 0, 6)
    assert stats["sentences"] == 54 and stats["duplicate_bodies_dropped"] == 0


def test_prepare_parquet_corpus_matches_jsonl(tmp_path, tiny_corpus_jsonl):
    """The same corpus as Parquet gives the same tables as JSONL."""
    path = tmp_path / "corpus.parquet"
    pd.DataFrame(tiny_documents()).to_parquet(path, index=False)
    from_parquet = prepare_corpus(config_for("parquet", path))
    from_jsonl = prepare_corpus(config_for("jsonl", tiny_corpus_jsonl))
    pd.testing.assert_frame_equal(from_parquet[0], from_jsonl[0])
    pd.testing.assert_frame_equal(from_parquet[1], from_jsonl[1])
    assert from_parquet[2] == from_jsonl[2]


def test_prepare_txt_folder(tmp_path):
    """A folder of .txt files: ids from relative paths, first line the title (or part of the body)."""
    root = tmp_path / "texts"
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text("Title A\nAlpha one. Alpha two.\n", encoding="utf-8")
    (root / "sub" / "b.txt").write_text("Title B\nBeta one. Beta two. Beta three.", encoding="utf-8")
    (root / "ignored.md").write_text("Not a text file. Skipped.", encoding="utf-8")
    documents, sentences, _ = prepare_corpus(config_for("txt", root))
    assert documents["doc_id"].tolist() == ["a", "sub/b"]
    assert documents["title"].tolist() == ["Title A", "Title B"]
    assert documents["body"].tolist() == ["Alpha one. Alpha two.", "Beta one. Beta two. Beta three."]
    assert documents["category"].tolist() == ["all", "all"]
    assert sentences["text"].tolist() == ["Alpha one.", "Alpha two.", "Beta one.", "Beta two.", "Beta three."]

    documents, sentences, stats = prepare_corpus(config_for("txt", root, title_first_line=False))
    assert documents["title"].isna().all() and stats["documents_with_title"] == 0
    assert sentences["text"].tolist()[:3] == ["Title A", "Alpha one.", "Alpha two."]


def test_prepare_corpus_without_titles(tmp_path):
    """No `title` field: the title column is all null and nothing fails."""
    rows = [{"id": d["id"], "text": d["text"], "category": d["category"]} for d in tiny_documents()]
    documents, sentences, stats = prepare_corpus(config_for("jsonl", write_jsonl(tmp_path / "c.jsonl", rows)))
    assert len(documents) == 12 and documents["title"].isna().all()
    assert stats["documents_with_title"] == 0
    assert len(sentences) == 54


def test_prepare_blank_titles_become_null(tmp_path):
    """Blank or missing titles on some rows become null; real titles are stripped."""
    rows = [{"id": "a", "title": "  Real title ", "text": "One. Two."},
            {"id": "b", "title": "   ", "text": "Three. Four."},
            {"id": "c", "text": "Five. Six."}]
    documents, _, stats = prepare_corpus(config_for("jsonl", write_jsonl(tmp_path / "c.jsonl", rows)))
    assert documents["title"].tolist()[0] == "Real title"
    assert documents["title"].iloc[1:].isna().all()
    assert stats["documents_with_title"] == 1


def test_prepare_max_documents_samples(tiny_corpus_jsonl):
    """`max_documents` keeps that many documents (a reproducible sample) and only their sentences."""
    documents, sentences, stats = prepare_corpus(config_for("jsonl", tiny_corpus_jsonl, max_documents=5))
    ids = {d["id"] for d in tiny_documents()}
    assert len(documents) == 5 and stats["documents"] == 5
    assert set(documents["doc_id"]) <= ids and documents["doc_id"].is_unique
    assert documents["doc_id"].is_monotonic_increasing
    assert set(sentences["doc_id"]) == set(documents["doc_id"])
    assert sentences["sentence_id"].tolist() == list(range(len(sentences)))
    again, _, _ = prepare_corpus(config_for("jsonl", tiny_corpus_jsonl, max_documents=5))
    assert again["doc_id"].tolist() == documents["doc_id"].tolist()
    everything, _, _ = prepare_corpus(config_for("jsonl", tiny_corpus_jsonl, max_documents=100))
    assert len(everything) == 12


def test_prepare_drops_duplicate_bodies(tmp_path):
    """Two documents with the same body: one is kept and the drop is counted."""
    rows = [{"id": "a", "text": "One. Two."}, {"id": "b", "text": "One. Two."}, {"id": "c", "text": "Three. Four."}]
    documents, _, stats = prepare_corpus(config_for("jsonl", write_jsonl(tmp_path / "c.jsonl", rows)))
    assert documents["doc_id"].tolist() == ["a", "c"]
    assert stats["duplicate_bodies_dropped"] == 1


def test_prepare_duplicate_bodies_up_to_whitespace(tmp_path):
    """Bodies differing only in whitespace count as duplicates; the first id (sorted) is kept."""
    rows = [{"id": "z", "text": "One. Two."}, {"id": "b", "text": "One.   Two.\n"},
            {"id": "c", "text": "One. Two. Three."}]
    documents, _, stats = prepare_corpus(config_for("jsonl", write_jsonl(tmp_path / "c.jsonl", rows)))
    assert documents["doc_id"].tolist() == ["b", "c"]
    assert stats["duplicate_bodies_dropped"] == 1


def test_prepare_split_follows_top_level_seed(tmp_path):
    """The label split uses params `seed`: the same seed repeats it, another seed changes it."""
    rows = [{"id": f"d{i:02d}", "text": f"Sentence {i} one. Sentence {i} two.", "category": "ab"[i % 2]}
            for i in range(40)]
    path = write_jsonl(tmp_path / "c.jsonl", rows)
    first = prepare_corpus(config_for("jsonl", path, seed=0))[0]["split"]
    assert first.equals(prepare_corpus(config_for("jsonl", path, seed=0))[0]["split"])
    assert not first.equals(prepare_corpus(config_for("jsonl", path, seed=5))[0]["split"])


# ---------------------------------------------------------------- prepare_corpus: errors
def test_error_empty_jsonl(tmp_path):
    """An empty JSONL file says the corpus is empty (not some other fault)."""
    path = tmp_path / "corpus.jsonl"
    path.write_text("", encoding="utf-8")
    with pytest.raises(StageError) as error:
        prepare_corpus(config_for("jsonl", path))
    message = str(error.value).replace(str(path), "<path>")  # the tmp path itself contains "empty"
    assert re.search(r"(?i)\bempty\b|no documents", message), message


def test_error_empty_txt_folder(tmp_path):
    """A folder without .txt files says the corpus has no documents."""
    (tmp_path / "texts").mkdir()
    with pytest.raises(StageError, match="no documents"):
        prepare_corpus(config_for("txt", tmp_path / "texts"))


@pytest.mark.parametrize("text", ["", "   \n ", None])
def test_error_document_without_text(tmp_path, text):
    """A document with empty, blank or null text is named in the error."""
    rows = [{"id": "good", "text": "One. Two."}, {"id": "bad-doc", "text": text}]
    with pytest.raises(StageError, match="no text.*bad-doc"):
        prepare_corpus(config_for("jsonl", write_jsonl(tmp_path / "c.jsonl", rows)))


def test_error_parquet_missing_text_column(tmp_path):
    """Parquet without `text` names the missing column."""
    path = tmp_path / "c.parquet"
    pd.DataFrame({"id": ["a", "b"], "body": ["One. Two.", "Three. Four."]}).to_parquet(path)
    with pytest.raises(StageError, match=r"missing column.*'text'"):
        prepare_corpus(config_for("parquet", path))


def test_error_jsonl_missing_text_column(tmp_path):
    """JSONL without `text` names the missing column."""
    path = write_jsonl(tmp_path / "c.jsonl", [{"id": "a", "body": "One. Two."}, {"id": "b", "body": "Three. Four."}])
    with pytest.raises(StageError, match=r"missing column.*'text'"):
        prepare_corpus(config_for("jsonl", path))


def test_error_jsonl_invalid_utf8(tmp_path):
    """Invalid UTF-8 in JSONL names the line and column (in characters) and the file's byte offset:
    line 1 is 32 characters and a newline, and `{"id": "b", "text": "caf` is 24 more."""
    path = tmp_path / "c.jsonl"
    path.write_bytes(b'{"id": "a", "text": "One. Two."}\n{"id": "b", "text": "caf\xe9. Two."}\n')
    with pytest.raises(StageError, match=r"c\.jsonl: invalid UTF-8 on line 2, column 25 \(byte 57\)$"):
        prepare_corpus(config_for("jsonl", path))


def test_error_jsonl_invalid_json(tmp_path):
    """A line that is not JSON names its line number."""
    path = tmp_path / "c.jsonl"
    path.write_text('{"id": "a", "text": "One. Two."}\n{"id": "b", "text": \n', encoding="utf-8")
    with pytest.raises(StageError, match=r"line 2: not valid JSON"):
        prepare_corpus(config_for("jsonl", path))


def test_error_txt_invalid_utf8(tmp_path):
    """Invalid UTF-8 in a .txt file names the file, its line and column in characters: "Prïce " is
    6 characters but 7 bytes, after "Title" and a newline (6 bytes)."""
    root = tmp_path / "texts"
    root.mkdir()
    (root / "good.txt").write_text("T\nOne. Two.", encoding="utf-8")
    (root / "bad.txt").write_bytes(b"Title\nPr\xc3\xafce \x80 ten. Two.")
    with pytest.raises(StageError, match=r"bad\.txt: invalid UTF-8 on line 2, column 7 \(byte 13\)"):
        prepare_corpus(config_for("txt", root))


@pytest.mark.parametrize("source", ["jsonl", "parquet", "txt"])
def test_error_nonexistent_path(tmp_path, source):
    """A path that does not exist is named in the error."""
    with pytest.raises(StageError, match="does not exist"):
        prepare_corpus(config_for(source, tmp_path / "nowhere"))


def test_error_txt_source_needs_folder(tiny_corpus_jsonl):
    """`txt` pointed at a file says it needs a folder."""
    with pytest.raises(StageError, match="needs a folder of .txt files"):
        prepare_corpus(config_for("txt", tiny_corpus_jsonl))


def test_error_unreadable_parquet(tiny_corpus_jsonl):
    """`parquet` pointed at a non-Parquet file is a StageError, not a pyarrow traceback."""
    with pytest.raises(StageError, match="not a readable Parquet"):
        prepare_corpus(config_for("parquet", tiny_corpus_jsonl))


@pytest.mark.parametrize("source", ["csv", "", None])
def test_error_unknown_source(tiny_corpus_jsonl, source):
    """An unknown source lists the accepted ones."""
    with pytest.raises(StageError, match=r"`corpus.source` must be one of \['bbc', 'manpages', 'jsonl', 'parquet', "
                                         r"'txt'\]"):
        config_for(source, tiny_corpus_jsonl)


def test_error_duplicate_ids(tmp_path):
    """Two documents with one id: the id is named."""
    rows = [{"id": "same", "text": "One. Two."}, {"id": "other", "text": "Three. Four."},
            {"id": "same", "text": "Five. Six."}]
    with pytest.raises(StageError, match="duplicate document id 'same'"):
        prepare_corpus(config_for("jsonl", write_jsonl(tmp_path / "c.jsonl", rows)))


def test_error_ids_equal_as_strings(tmp_path):
    """Ids 7 and "7" become the same doc_id; they must be rejected as duplicates, not merged."""
    rows = [{"id": 7, "text": "One. Two."}, {"id": "7", "text": "Three. Four."}]
    with pytest.raises(StageError, match="duplicate document id"):
        prepare_corpus(config_for("jsonl", write_jsonl(tmp_path / "c.jsonl", rows)))


def test_error_no_document_with_two_sentences(tmp_path):
    """A corpus of one-sentence documents has nothing to pair."""
    rows = [{"id": "a", "text": "Only one."}, {"id": "b", "text": "Just this. Just this."}]
    with pytest.raises(StageError, match="no document has two or more sentences"):
        prepare_corpus(config_for("jsonl", write_jsonl(tmp_path / "c.jsonl", rows)))


@pytest.mark.parametrize("value", [0, -3, "some", 2.5, True])
def test_error_bad_max_documents(tiny_corpus_jsonl, value):
    """`max_documents` must be an integer >= 1 or "all"."""
    with pytest.raises(StageError, match=r'`corpus.max_documents` must be an integer >= 1 or "all"'):
        config_for("jsonl", tiny_corpus_jsonl, max_documents=value)


# ---------------------------------------------------------------- BBC
def test_read_bbc_news():
    """The built-in corpus: 2225 articles in 5 categories, each with a headline and a body."""
    bbc = read_bbc_news()
    assert len(bbc) == 2225
    assert sorted(bbc["category"].unique()) == ["business", "entertainment", "politics", "sports", "tech"]
    assert bbc["doc_id"].is_unique
    assert (bbc["title"].str.strip() != "").all() and (bbc["body"].str.strip() != "").all()
    assert (bbc["doc_id"].str.split("/").str[0] == bbc["category"]).all()
    assert not bbc["body"].apply(lambda b: b.startswith("\n")).any()
    assert np.all(bbc["body"].str.len() > bbc["title"].str.len())


def test_integer_ids_stay_integers_next_to_missing_fields(tmp_path):
    """JSONL values keep their JSON types: integer ids become "1", "2" (not "1.0"), and a row
    without a category gets "all"."""
    rows = [{"id": 2, "text": "Three. Four.", "category": "b"}, {"id": 1, "text": "One. Two."}]
    documents, _, _ = prepare_corpus(config_for("jsonl", write_jsonl(tmp_path / "c.jsonl", rows)))
    assert documents["doc_id"].tolist() == ["1", "2"]
    assert documents["category"].tolist() == ["all", "b"]

"""Mixed-topic corpora (infocse.corpora.mix): who goes with whom, both orders, seeds, and the
precision of pairs against a hand count."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pandas as pd
import pytest

from infocse.corpora.mix import MIXED_COLUMNS, group_sources, mix_sentences, pair_precision
from infocse.errors import StageError

# Six documents in three categories, two or three sentences each.
LENGTHS = {"a": 2, "b": 3, "c": 2, "d": 3, "e": 2, "f": 2}
CATEGORIES = {"a": "x", "b": "x", "c": "y", "d": "y", "e": "z", "f": "z"}


def corpus(categories: dict | None = None, lengths: dict | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(sentences, documents) as prepare writes them; sentence texts are "<doc><position>"."""
    categories = CATEGORIES if categories is None else categories
    lengths = LENGTHS if lengths is None else lengths
    documents = pd.DataFrame({"doc_id": list(categories), "title": [f"Title {d}" for d in categories],
                              "body": "", "category": list(categories.values()), "split": "test"})
    rows = [(doc, position, f"{doc}{position}") for doc in categories for position in range(lengths[doc])]
    sentences = pd.DataFrame(rows, columns=["doc_id", "position", "text"])
    sentences.insert(0, "sentence_id", np.arange(len(sentences), dtype=np.int64))
    return sentences, documents


def sources_of(mixed: pd.DataFrame) -> dict[str, list[str]]:
    """Each mixed document's sequence of sources, one entry per sentence."""
    return {doc: group["source_id"].tolist() for doc, group in mixed.groupby("doc_id", sort=True)}


def groups_of(mixed: pd.DataFrame) -> set[frozenset]:
    return {frozenset(sequence) for sequence in sources_of(mixed).values()}


def check_layout(mixed: pd.DataFrame, sentences: pd.DataFrame) -> None:
    """The sentence-table layout, and every source sentence exactly once, with its own source."""
    assert list(mixed.columns) == MIXED_COLUMNS
    assert mixed["sentence_id"].tolist() == list(range(len(sentences)))
    codes = pd.factorize(mixed["doc_id"])[0]
    assert np.all(np.diff(codes) >= 0), "rows grouped by mixed document"
    assert mixed["position"].tolist() == mixed.groupby("doc_id", sort=False).cumcount().tolist()
    assert sorted(mixed["text"]) == sorted(sentences["text"])
    assert (mixed["text"].str[0] == mixed["source_id"]).all()
    assert mixed.groupby("source_id")["doc_id"].nunique().eq(1).all(), "a source in one mixed document"


# ---------------------------------------------------------------- grouping
def test_who_goes_with_whom_for_seed_0():
    """Seed 0, three sources: two mixed documents, each one document of each category, checked by hand."""
    sentences, documents = corpus()
    mixed = mix_sentences(sentences, documents, sources=3, order="concatenated", seed=0)
    check_layout(mixed, sentences)
    assert groups_of(mixed) == {frozenset("bdf"), frozenset("ace")}
    for doc, group in mixed.groupby("doc_id"):
        per_source = group.drop_duplicates("source_id")
        assert sorted(per_source["source_category"]) == ["x", "y", "z"], doc
        assert (per_source["source_category"] == per_source["source_id"].map(CATEGORIES)).all()


def test_seed_repeats_and_another_seed_changes_the_grouping():
    sentences, documents = corpus()
    first = mix_sentences(sentences, documents, 3, "interleaved", seed=0)
    pd.testing.assert_frame_equal(first, mix_sentences(sentences, documents, 3, "interleaved", seed=0))
    assert groups_of(mix_sentences(sentences, documents, 3, "concatenated", seed=1)) == {frozenset("bde"),
                                                                                        frozenset("acf")}
    groupings = {frozenset(groups_of(mix_sentences(sentences, documents, 3, "concatenated", seed)))
                 for seed in range(10)}
    assert len(groupings) > 1
    for grouping in groupings:  # whatever the seed, categories stay distinct
        for group in grouping:
            assert sorted(CATEGORIES[d] for d in group) == ["x", "y", "z"]


def test_uneven_categories_deal_distinct_groups_first_then_the_rest():
    """Five x, two y, one z in threes: one group of x, y, z; then only x and y are left, so the
    remaining five go into a group of three and a last group of two, categories repeating."""
    categories = pd.Series(list("xxxxxyyz"))
    for seed in range(5):
        groups = group_sources(categories, 3, np.random.default_rng(seed))
        assert [len(g) for g in groups] == [3, 3, 2]
        assert sorted(categories[groups[0]]) == ["x", "y", "z"]
        assert sorted(np.concatenate(groups).tolist()) == list(range(8))


def test_largest_categories_first_makes_the_most_distinct_groups():
    """Counts 4, 4, 2 in pairs: five distinct pairs are possible (taking from the largest first);
    taking in a fixed category order could leave x, x left over."""
    categories = pd.Series(list("xxxxyyyyzz"))
    for seed in range(10):
        groups = group_sources(categories, 2, np.random.default_rng(seed))
        assert len(groups) == 5 and all(len(set(categories[g])) == 2 for g in groups)


def test_fewer_categories_than_sources_or_none_at_all():
    """Two categories for four sources, or no categories: plain seeded groups of four, the last one smaller."""
    two = {"a": "x", "b": "x", "c": "y", "d": "y", "e": "y", "f": "x"}
    for categories in (two, dict.fromkeys(CATEGORIES)):
        sentences, documents = corpus(categories)
        mixed = mix_sentences(sentences, documents, 4, "concatenated", seed=3)
        check_layout(mixed, sentences)
        assert sorted(len(g) for g in groups_of(mixed)) == [2, 4]
    assert mixed["source_category"].map(lambda c: c is None).all()


def test_one_source_keeps_each_document_in_order():
    sentences, documents = corpus()
    for order in ("concatenated", "interleaved"):
        mixed = mix_sentences(sentences, documents, 1, order, seed=7)
        check_layout(mixed, sentences)
        assert mixed["text"].tolist() == sentences["text"].tolist()
        assert mixed["position"].tolist() == sentences["position"].tolist()
        assert mixed["source_id"].tolist() == sentences["doc_id"].tolist()
        assert mixed.drop_duplicates("doc_id")["doc_id"].tolist() == [f"mix-0000{i}" for i in range(6)]


def test_documents_without_sentences_are_left_out():
    """A document with no sentence (still a retrieval candidate) is in no mixed document."""
    sentences, documents = corpus()
    sentences = sentences[sentences["doc_id"] != "c"].assign(sentence_id=lambda s: np.arange(len(s)))
    mixed = mix_sentences(sentences, documents, 2, "interleaved", seed=0)
    check_layout(mixed, sentences)
    assert set(mixed["source_id"]) == set("abdef")


# ---------------------------------------------------------------- orders
def test_concatenated_is_one_block_per_source():
    """Each mixed document is its sources one after another, each in its own order."""
    sentences, documents = corpus()
    mixed = mix_sentences(sentences, documents, 3, "concatenated", seed=0)
    for sequence in sources_of(mixed).values():
        blocks = [source for source, _ in itertools.groupby(sequence)]
        assert len(blocks) == len(set(blocks)) == 3
        assert [sequence.count(s) for s in blocks] == [LENGTHS[s] for s in blocks]
    for source, rows in mixed.groupby("source_id"):
        assert rows["text"].tolist() == [f"{source}{p}" for p in range(LENGTHS[source])]


def test_interleaved_keeps_each_sources_order():
    """Interleaved: sources alternate inside a mixed document, and each source's sentences keep
    their relative order; positions run 0..n-1."""
    sentences, documents = corpus()
    mixed = mix_sentences(sentences, documents, 3, "interleaved", seed=0)
    check_layout(mixed, sentences)
    assert groups_of(mixed) == {frozenset("bdf"), frozenset("ace")}
    for source, rows in mixed.groupby("source_id"):
        assert rows["text"].tolist() == [f"{source}{p}" for p in range(LENGTHS[source])]
    runs = sum(len(list(itertools.groupby(sequence))) for sequence in sources_of(mixed).values())
    assert runs > 6, "some mixed document is not just its blocks"


def test_interleaving_draws_every_label_sequence_alike():
    """Two sources of two sentences each: the six sequences of source labels are equally likely."""
    sentences, documents = corpus({"a": "x", "b": "y"}, {"a": 2, "b": 2})
    counts = Counter("".join(mix_sentences(sentences, documents, 2, "interleaved", seed)["source_id"])
                     for seed in range(300))
    assert set(counts) == {"".join(p) for p in set(itertools.permutations("aabb"))}
    assert all(25 <= count <= 75 for count in counts.values()), counts


# ---------------------------------------------------------------- bad params
@pytest.mark.parametrize("sources", [0, -1, 2.5, True, "3"])
def test_bad_sources(sources):
    sentences, documents = corpus()
    with pytest.raises(StageError, match=r"mix `sources` must be an integer >= 1"):
        mix_sentences(sentences, documents, sources, "interleaved", 0)


@pytest.mark.parametrize("order", ["random", "", None])
def test_bad_order(order):
    sentences, documents = corpus()
    with pytest.raises(StageError, match=r"mix `order` must be one of \['interleaved', 'concatenated'\]"):
        mix_sentences(sentences, documents, 3, order, 0)


def test_sentences_of_an_unknown_document():
    sentences, documents = corpus()
    with pytest.raises(StageError, match="not in the documents table, e.g. 'f'"):
        mix_sentences(sentences, documents[documents["doc_id"] != "f"], 3, "interleaved", 0)


# ---------------------------------------------------------------- pair precision
def precision_sentences(categories=("x", "x", "x", "x", "y", "y")) -> pd.DataFrame:
    return pd.DataFrame({"sentence_id": [10, 11, 12, 13, 14, 15],
                         "source_id": ["a", "a", "b", "b", "c", "c"],
                         "source_category": list(categories)})


PAIRS = pd.DataFrame({"sentence_a": [10, 10, 12, 14, 11, 13],
                      "sentence_b": [11, 12, 13, 15, 14, -1]})  # the last one is ICT-style: no sentence


def test_pair_precision_against_a_hand_count():
    """Five pairs with a second sentence: (10, 11), (12, 13), (14, 15) share a source, 3 of 5;
    those and (10, 12) share a category, 4 of 5; (11, 14) shares neither; (13, -1) is left out."""
    assert pair_precision(PAIRS, precision_sentences()) == {
        "pair_source_precision": 0.6, "pair_category_precision": 0.8, "pairs_with_sources": 5}


def test_pair_precision_without_categories_or_pairs():
    assert pair_precision(PAIRS, precision_sentences([None] * 6)) == {
        "pair_source_precision": 0.6, "pair_category_precision": None, "pairs_with_sources": 5}
    missing_one = precision_sentences(["x", "x", None, "x", "y", "y"])  # sentence 12's category unknown
    assert pair_precision(PAIRS, missing_one)["pair_category_precision"] == pytest.approx(0.4)
    assert pair_precision(PAIRS.iloc[5:], precision_sentences()) == {
        "pair_source_precision": None, "pair_category_precision": None, "pairs_with_sources": 0}


def test_pair_precision_on_a_mixed_corpus():
    """Every pair inside each mixed document, counted against the sources by brute force."""
    sentences, documents = corpus()
    mixed = mix_sentences(sentences, documents, 3, "interleaved", seed=0)
    pairs = [(a, b) for _, group in mixed.groupby("doc_id") for a, b in itertools.combinations(group["sentence_id"], 2)]
    source = dict(zip(mixed["sentence_id"], mixed["source_id"]))
    category = dict(zip(mixed["sentence_id"], mixed["source_category"]))
    result = pair_precision(pd.DataFrame(pairs, columns=["sentence_a", "sentence_b"]), mixed)
    assert result["pairs_with_sources"] == len(pairs) == 28 + 15  # 8 and 6 sentences
    assert result["pair_source_precision"] == pytest.approx(np.mean([source[a] == source[b] for a, b in pairs]))
    assert result["pair_category_precision"] == pytest.approx(np.mean([category[a] == category[b] for a, b in pairs]))


def test_pair_precision_unknown_sentence():
    with pytest.raises(StageError, match="pair sentence id 99 is not in the sentence table"):
        pair_precision(pd.DataFrame({"sentence_a": [10], "sentence_b": [99]}), precision_sentences())

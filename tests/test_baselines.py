"""Positive-pair annotators (infocse/baselines.py), checked pair by pair on hand-made documents.
Their options are validated with all other params (tests/test_config.py)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd
import pytest

from infocse.baselines import (
    BASELINES,
    annotate,
    baseline_pairs,
    MIRROR_MIN_CHARS,
    ict_pairs,
    mirror_pairs,
    neighbour_pairs,
    simcse_pairs,
    text_shuffle_cutoff_pairs,
    training_length,
)
from infocse.config import BaselineOptions, Budget
from infocse.errors import StageError
from infocse.pairs import PAIR_COLUMNS

OPTIONS = BaselineOptions(mirror_span_chars=3, text_cutoff_rate=0.2, ict_context_sentences=1,
                           ict_remove_probability=0.9, ict_max_seq_length=256, neighbour_window=2)

# Doc "a" has 4 sentences (ids 0-3), "b" one (id 4), "c" three (ids 5-7).
DOCUMENTS = {
    "a": ["a0 one two three four five", "a1 x", "a2 alpha beta gamma", "a3 q r s t u v w"],
    "b": ["b0 lonely sentence here"],
    "c": ["c0 red green", "c1 blue", "c2 one two three"],
}
T = [text for texts in DOCUMENTS.values() for text in texts]


def sentence_table(documents: dict[str, list[str]]) -> pd.DataFrame:
    rows = [(doc_id, position, text) for doc_id, texts in documents.items() for position, text in enumerate(texts)]
    table = pd.DataFrame(rows, columns=["doc_id", "position", "text"])
    table.insert(0, "sentence_id", np.arange(len(table), dtype=np.int64))
    table["position"] = table["position"].astype(np.int32)
    return table


def generated_documents(n_docs: int = 150, seed: int = 7) -> dict[str, list[str]]:
    """Documents of 1..12 sentences of 1..15 distinct words (every word unique in the corpus)."""
    rng = np.random.default_rng(seed)
    return {f"d{d:03d}": [" ".join(f"d{d}s{s}w{w}" for w in range(rng.integers(1, 16)))
                          for s in range(rng.integers(1, 13))]
            for d in range(n_docs)}


@pytest.fixture()
def small() -> pd.DataFrame:
    return sentence_table(DOCUMENTS)


@pytest.fixture(scope="module")
def large() -> pd.DataFrame:
    return sentence_table(generated_documents())


def id_pairs(pairs: pd.DataFrame) -> list[tuple[int, int]]:
    return list(zip(pairs["sentence_a"].tolist(), pairs["sentence_b"].tolist()))


def assert_pair_frame(pairs: pd.DataFrame) -> None:
    assert list(pairs.columns) == PAIR_COLUMNS
    for column in ["doc_id", "text_a", "text_b"]:
        assert pd.api.types.is_string_dtype(pairs[column]), column
    for column in ["sentence_a", "sentence_b", "cluster"]:
        assert pairs[column].dtype == np.int64, column
    assert (pairs["cluster"] == -1).all()
    assert pairs.index.equals(pd.RangeIndex(len(pairs)))
    assert id_pairs(pairs) == sorted(id_pairs(pairs))


# ---------------------------------------------------------------- neighbours (CONPONO-style)
@pytest.mark.parametrize("window, expected", [
    (1, [(0, 1), (1, 2), (2, 3), (5, 6), (6, 7)]),
    (2, [(0, 1), (0, 2), (1, 2), (1, 3), (2, 3), (5, 6), (5, 7), (6, 7)]),
    (3, [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3), (5, 6), (5, 7), (6, 7)]),
    (50, [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3), (5, 6), (5, 7), (6, 7)]),
])
def test_neighbour_pairs_are_exactly_the_neighbours_within_window(small, window, expected):
    pairs = neighbour_pairs(small, window)
    assert_pair_frame(pairs)
    assert id_pairs(pairs) == expected
    assert pairs["text_a"].tolist() == [T[a] for a, _ in expected]
    assert pairs["text_b"].tolist() == [T[b] for _, b in expected]
    assert pairs["doc_id"].tolist() == ["a" if a < 4 else "c" for a, _ in expected]


def test_neighbours_without_multi_sentence_documents_is_empty_but_typed():
    pairs = neighbour_pairs(sentence_table({"x": ["only one"], "y": ["just this"]}), 3)
    assert pairs.empty
    assert_pair_frame(pairs)


def test_neighbours_match_brute_force_on_generated_documents(large):
    docs, positions = large["doc_id"].tolist(), large["position"].tolist()
    expected = [(a, b) for a in range(len(large)) for b in range(a + 1, len(large))
                if docs[a] == docs[b] and positions[b] - positions[a] <= 3]
    assert id_pairs(neighbour_pairs(large, 3)) == expected


# ---------------------------------------------------------------- ict
def test_ict_with_removal_always_is_exactly_the_neighbours(small):
    pairs = ict_pairs(small, context_sentences=1, remove_probability=1.0, seed=0)
    assert_pair_frame(pairs)
    assert pairs["sentence_a"].tolist() == [0, 1, 2, 3, 5, 6, 7]
    assert (pairs["sentence_b"] == -1).all()
    assert pairs["text_b"].tolist() == [
        T[1], f"{T[0]} {T[2]}", f"{T[1]} {T[3]}", T[2],
        T[6], f"{T[5]} {T[7]}", T[6],
    ]


def test_ict_without_removal_keeps_the_sentence_in_place(small):
    pairs = ict_pairs(small, context_sentences=2, remove_probability=0.0, seed=0)
    assert pairs["text_b"].tolist() == [
        " ".join(T[0:3]), " ".join(T[0:4]), " ".join(T[0:4]), " ".join(T[1:4]),
        " ".join(T[5:8]), " ".join(T[5:8]), " ".join(T[5:8]),
    ]
    assert (pairs["text_a"] == small["text"][pairs["sentence_a"]].to_numpy()).all()


def test_ict_never_leaves_an_empty_context(small):
    """With no neighbours to show, the sentence stays as its own context rather than vanish."""
    pairs = ict_pairs(small, context_sentences=0, remove_probability=1.0, seed=0)
    assert (pairs["text_b"] == pairs["text_a"]).all()


def test_ict_removes_the_sentence_at_the_given_rate(large):
    pairs = ict_pairs(large, context_sentences=1, remove_probability=0.9, seed=3)
    text = large["text"].tolist()
    start = large["sentence_id"] - large["position"]
    removed = []
    for a, context in zip(pairs["sentence_a"], pairs["text_b"]):
        end = start[a] + (large["doc_id"] == large["doc_id"][a]).sum()
        before, after = text[max(start[a], a - 1):a], text[a + 1:min(end, a + 2)]
        assert context in (" ".join(before + after), " ".join(before + [text[a]] + after))
        removed.append(context == " ".join(before + after))
    assert len(pairs) > 700
    assert abs(np.mean(removed) - 0.9) < 0.03


# ---------------------------------------------------------------- simcse
def test_simcse_pairs_every_sentence_with_itself(small):
    pairs = simcse_pairs(small)
    assert_pair_frame(pairs)
    assert id_pairs(pairs) == [(i, i) for i in range(8)]
    assert pairs["text_a"].tolist() == T
    assert pairs["text_b"].tolist() == T
    assert pairs["doc_id"].tolist() == ["a"] * 4 + ["b"] + ["c"] * 3


# ---------------------------------------------------------------- mirror (Mirror-BERT's erase_and_mask)
@pytest.mark.parametrize("span", [1, 5, 12])
def test_mirror_replaces_one_character_span_with_one_mask(large, span):
    """Every sentence of at least 30 characters: the text with `span` characters cut out at one
    place and a single spaced mask token put there; shorter sentences are left whole."""
    pairs = mirror_pairs(large, span_chars=span, mask_token="[MASK]", seed=1)
    assert_pair_frame(pairs)
    assert id_pairs(pairs) == [(i, i) for i in range(len(large))]
    long_enough = 0
    for original, masked in zip(pairs["text_a"], pairs["text_b"]):
        if len(original) < MIRROR_MIN_CHARS:
            assert masked == original
            continue
        long_enough += 1
        assert masked.count("[MASK]") == 1
        left, right = masked.split(" [MASK] ")
        assert original.startswith(left) and original.endswith(right)
        assert len(left) + len(right) == len(original) - span
    assert long_enough > 0.5 * len(pairs)


def test_mirror_leaves_short_sentences_whole_and_masks_a_sentence_of_30_characters(small):
    """Hand-worked: "a0 one two three four five" (26 characters) stays whole (the old word-span
    version masked it); a 30-character sentence gets one mask over 5 of its characters."""
    table = sentence_table({"x": ["a0 one two three four five", "abcdefghij" * 3], "y": ["short"]})
    pairs = mirror_pairs(table, span_chars=5, mask_token="[MASK]", seed=0)
    assert pairs["text_b"].tolist()[0] == "a0 one two three four five"
    assert pairs["text_b"].tolist()[2] == "short"
    masked = pairs["text_b"].tolist()[1]
    left, right = masked.split(" [MASK] ")
    assert len(left) + len(right) == 25 and ("abcdefghij" * 3).startswith(left) and ("abcdefghij" * 3).endswith(right)


def test_mirror_span_start_is_uniform_over_valid_starts():
    table = sentence_table({f"d{i}": ["abcdefghijklmnopqrstuvwxyz0123"] for i in range(1000)})
    masked = mirror_pairs(table, span_chars=25, mask_token="<m>", seed=0)["text_b"]
    starts = Counter(len(text.split(" <m> ")[0]) for text in masked)
    assert sorted(starts) == [0, 1, 2, 3, 4]
    assert all(150 < count < 250 for count in starts.values())


def test_ict_trains_at_a_length_that_holds_its_contexts():
    assert training_length("ict", OPTIONS, 64) == 256
    assert training_length("simcse", OPTIONS, 64) == 64
    assert training_length("ict", OPTIONS, 512) == 512


# ---------------------------------------------------------------- text shuffle + cutoff (ConSERT-style)
def test_text_shuffle_cutoff_without_cutoff_only_shuffles(large):
    pairs = text_shuffle_cutoff_pairs(large, cutoff=0.0, seed=2)
    assert_pair_frame(pairs)
    originals, augmented = pairs["text_a"].str.split(), pairs["text_b"].str.split()
    assert all(sorted(o) == sorted(a) for o, a in zip(originals, augmented))
    assert sum(o != a for o, a in zip(originals, augmented)) > 0.5 * len(pairs)


@pytest.mark.parametrize("cutoff", [0.3, 1.0])
def test_text_cutoff_keeps_a_non_empty_sub_multiset(large, cutoff):
    pairs = text_shuffle_cutoff_pairs(large, cutoff=cutoff, seed=2)
    originals, augmented = pairs["text_a"].str.split(), pairs["text_b"].str.split()
    assert all(a and not Counter(a) - Counter(o) for o, a in zip(originals, augmented))
    if cutoff == 1.0:
        assert all(len(a) == 1 for a in augmented)
    else:
        kept = sum(map(len, augmented)) / sum(map(len, originals))
        assert abs(kept - (1 - cutoff)) < 0.05


# ---------------------------------------------------------------- every annotator
@pytest.mark.parametrize("method", BASELINES)
def test_annotate_dispatches_and_is_deterministic(large, method):
    direct = {
        "simcse": lambda: simcse_pairs(large),
        "mirror": lambda: mirror_pairs(large, 3, "[MASK]", 5),
        "text_shuffle_cutoff": lambda: text_shuffle_cutoff_pairs(large, 0.2, 5),
        "ict": lambda: ict_pairs(large, 1, 0.9, 5),
        "neighbours": lambda: neighbour_pairs(large, 2),
    }[method]()
    pairs = annotate(method, large, OPTIONS, seed=5)
    assert_pair_frame(pairs)
    pd.testing.assert_frame_equal(pairs, direct)
    pd.testing.assert_frame_equal(pairs, annotate(method, large, OPTIONS, seed=5))


@pytest.mark.parametrize("method", ["mirror", "text_shuffle_cutoff", "ict"])
def test_another_seed_changes_the_augmentation(large, method):
    first, second = annotate(method, large, OPTIONS, seed=0), annotate(method, large, OPTIONS, seed=1)
    assert id_pairs(first) == id_pairs(second)
    assert (first["text_b"] != second["text_b"]).sum() > 0.05 * len(first)


def test_annotate_passes_the_mask_token(large):
    pairs = annotate("mirror", large, OPTIONS, seed=0, mask_token="<mask>")
    assert (pairs["text_b"].str.count("<mask>") == (pairs["text_a"].str.len() >= MIRROR_MIN_CHARS)).all()


def test_annotate_reads_only_its_own_options(small):
    """Changing the other annotators' options changes nothing; changing its own does."""
    others = BaselineOptions(mirror_span_chars=1, text_cutoff_rate=0.9, ict_context_sentences=5,
                              ict_remove_probability=0.0, ict_max_seq_length=512, neighbour_window=OPTIONS.neighbour_window)
    pd.testing.assert_frame_equal(annotate("neighbours", small, others, seed=0),
                                  annotate("neighbours", small, OPTIONS, seed=0))
    assert len(annotate("neighbours", small, OPTIONS.model_copy(update=dict(neighbour_window=1)), seed=0)) == 5
    pd.testing.assert_frame_equal(annotate("simcse", small, others, seed=0), annotate("simcse", small, OPTIONS, seed=0))


def test_unknown_baseline_is_a_stage_error(small):
    with pytest.raises(StageError, match="unknown baseline 'bert'"):
        annotate("bert", small, OPTIONS, seed=0)


def test_baseline_pairs_are_capped_by_the_shared_budget(small):
    """Neighbour pairs at window 2 mine 5 pairs in doc a and 3 in doc c; two per document keeps 2 + 2, a
    subset of the candidates, with statistics of the kept pairs and the count mined."""
    candidates = annotate("neighbours", small, OPTIONS, seed=0)
    pairs, stats = baseline_pairs("neighbours", small, OPTIONS, Budget(max_pairs_per_document=2, max_pairs=None), seed=0)
    assert_pair_frame(pairs)
    assert pairs["doc_id"].tolist() == ["a", "a", "c", "c"]
    assert set(id_pairs(pairs)) <= set(id_pairs(candidates))
    assert stats["method"] == "neighbours" and stats["pairs_mined"] == 8 and stats["pairs"] == 4
    assert stats["documents_in_pairs"] == 2
    capped, _ = baseline_pairs("neighbours", small, OPTIONS, Budget(max_pairs_per_document=None, max_pairs=3), seed=0)
    assert len(capped) == 3 and set(id_pairs(capped)) <= set(id_pairs(candidates))
    no_cap = Budget(max_pairs_per_document=None, max_pairs=None)
    uncapped, _ = baseline_pairs("neighbours", small, OPTIONS, no_cap, seed=0)
    pd.testing.assert_frame_equal(uncapped, candidates)


@pytest.mark.parametrize("method", ["ict", "neighbours"])
def test_tables_out_of_document_order_are_rejected(small, method):
    shuffled = small.iloc[[0, 4, 1, 2, 3, 5, 6, 7]].reset_index(drop=True)
    with pytest.raises(StageError, match="grouped by document"):
        annotate(method, shuffled, OPTIONS, seed=0)
    gapped = small.assign(position=small["position"] * 2)
    with pytest.raises(StageError, match="positions must run"):
        annotate(method, gapped, OPTIONS, seed=0)

"""The classic self-supervised baselines InfoCSE is compared against (their positive pairs),
also usable as initialisation rounds. Each turns the sentence table into a pair table
(infocse.pairs, `cluster` = -1):

- simcse:              (s, s); dropout alone makes the two views differ (SimCSE).
- mirror:              (s, s with one random span of 5 characters replaced by one mask token,
                       sentences under 30 characters left whole) (Mirror-BERT's `erase_and_mask`).
- text_shuffle_cutoff: (s, s with its words shuffled, then some dropped): ConSERT-style views
                       made on the text, not ConSERT itself, whose augmentations act inside the
                       encoder (docs/method.md).
- ict:                 (s, its surrounding sentences, s itself usually removed) (Inverse Cloze Task).
- neighbours:          (s, t) for sentences of one document at most `window` apart: neighbour
                       pairs, CONPONO-style (not CONPONO's per-offset prediction objective).

Pure functions of the table and a seed: all randomness comes from numpy.random.default_rng(seed).
"""

from __future__ import annotations


import numpy as np
import pandas as pd

from infocse.config import BaselineOptions, Budget
from infocse.errors import StageError
from infocse.methods import BASELINES
from infocse.pairs import cap_pairs, checked_document_codes, document_codes, document_offsets, pair_table, \
    pair_table_statistics
from infocse.seeds import child_seed

MIRROR_MIN_CHARS = 30  # Mirror-BERT leaves a sentence shorter than this whole (its `erase_and_mask`)


# ---------------------------------------------------------------- shared helpers
def document_bounds(sentences: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Each row's document as a row range [start, end)."""
    offsets = document_offsets(checked_document_codes(sentences))
    sizes = np.diff(offsets)
    return np.repeat(offsets[:-1], sizes), np.repeat(offsets[1:], sizes)


def training_length(method: str, options: BaselineOptions, max_seq_length: int) -> int:
    """The training length for `method`'s pairs: ICT's contexts need `ict_max_seq_length` tokens
    (up to 7 sentences), the other baselines' sentences fit the trainer's `max_seq_length`."""
    return max(max_seq_length, options.ict_max_seq_length) if method == "ict" else max_seq_length


def split_words(sentences: pd.DataFrame) -> tuple[list[list[str]], np.ndarray]:
    """Whitespace-separated words of each sentence, and their counts."""
    words = [text.split() for text in sentences["text"]]
    return words, np.array([len(w) for w in words], dtype=np.int64)


# ---------------------------------------------------------------- baselines
def simcse_pairs(sentences: pd.DataFrame) -> pd.DataFrame:
    """SimCSE: every sentence paired with itself; training dropout makes the two views differ."""
    rows = np.arange(len(sentences))
    return pair_table(sentences, rows, sentences["sentence_id"].to_numpy(), sentences["text"].to_numpy())


def mirror_pairs(sentences: pd.DataFrame, span_chars: int, mask_token: str, seed: int) -> pd.DataFrame:
    """Mirror-BERT: each sentence against a copy in which one random span of `span_chars`
    characters (start uniform) is replaced by a single mask token, spaced off from both sides;
    a sentence shorter than MIRROR_MIN_CHARS (or than the span) stays whole, dropout alone
    making its two views differ."""
    rng = np.random.default_rng(seed)
    texts = sentences["text"].tolist()
    lengths = np.array([len(text) for text in texts], dtype=np.int64)
    maskable = (lengths >= MIRROR_MIN_CHARS) & (lengths > span_chars)
    starts = rng.integers(0, np.maximum(lengths - span_chars, 1))
    masked = [f"{text[:start]} {mask_token} {text[start + span_chars:]}" if can else text
              for text, start, can in zip(texts, starts.tolist(), maskable.tolist())]
    return pair_table(sentences, np.arange(len(sentences)), sentences["sentence_id"].to_numpy(), masked)


def text_shuffle_cutoff_pairs(sentences: pd.DataFrame, cutoff: float, seed: int) -> pd.DataFrame:
    """ConSERT-style views on the text: each sentence against its words shuffled, then each
    dropped with probability `cutoff` (the first shuffled word is kept if all would go)."""
    rng = np.random.default_rng(seed)
    words, lengths = split_words(sentences)
    owner = np.repeat(np.arange(len(words)), lengths)
    shuffled = np.lexsort((rng.random(len(owner)), owner))  # each sentence's words, in random order
    kept = rng.random(len(owner)) >= cutoff  # indexed by shuffled position
    starts = np.cumsum(lengths) - lengths
    emptied = (np.bincount(owner, weights=kept, minlength=len(words)) == 0) & (lengths > 0)
    kept[starts[emptied]] = True
    flat = np.array([w for ws in words for w in ws], dtype=object)[shuffled]
    augmented = [" ".join(flat[start:start + length][kept[start:start + length]])
                 for start, length in zip(starts.tolist(), lengths.tolist())]
    return pair_table(sentences, np.arange(len(sentences)), sentences["sentence_id"].to_numpy(), augmented)


def ict_pairs(sentences: pd.DataFrame, context_sentences: int, remove_probability: float, seed: int) -> pd.DataFrame:
    """Inverse Cloze Task: each sentence of a multi-sentence document against its context, the
    sentences up to `context_sentences` either side joined in order, the sentence itself removed
    with probability `remove_probability` (never when it is the whole context)."""
    rng = np.random.default_rng(seed)
    start, end = document_bounds(sentences)
    rows = np.flatnonzero(end - start >= 2)
    low = np.maximum(start[rows], rows - context_sentences)
    high = np.minimum(end[rows], rows + context_sentences + 1)
    removed = (rng.random(len(rows)) < remove_probability) & (high - low > 1)
    text = sentences["text"].to_list()
    contexts = [" ".join(text[lo:row] + text[row + drop:hi])
                for row, lo, hi, drop in zip(rows.tolist(), low.tolist(), high.tolist(), removed.astype(int).tolist())]
    return pair_table(sentences, rows, np.full(len(rows), -1), contexts)


def neighbour_pairs(sentences: pd.DataFrame, window: int) -> pd.DataFrame:
    """Neighbour pairs (CONPONO-style): every pair of sentences of one document 1..`window`
    apart, once each, earlier sentence first."""
    codes = checked_document_codes(sentences)
    firsts, seconds = [], []
    for gap in range(1, min(window, len(codes) - 1) + 1):
        first = np.flatnonzero(codes[:-gap] == codes[gap:])
        firsts.append(first)
        seconds.append(first + gap)
    first = np.concatenate(firsts) if firsts else np.empty(0, np.int64)
    second = np.concatenate(seconds) if seconds else np.empty(0, np.int64)
    return pair_table(sentences, first, sentences["sentence_id"].to_numpy()[second], sentences["text"].to_numpy()[second])


# ---------------------------------------------------------------- dispatch
def annotate(method: str, sentences: pd.DataFrame, options: BaselineOptions, seed: int,
             mask_token: str = "[MASK]") -> pd.DataFrame:
    """Every candidate pair of annotator `method` (before the budget)."""
    if method == "simcse":
        return simcse_pairs(sentences)
    if method == "mirror":
        return mirror_pairs(sentences, options.mirror_span_chars, mask_token, seed)
    if method == "text_shuffle_cutoff":
        return text_shuffle_cutoff_pairs(sentences, options.text_cutoff_rate, seed)
    if method == "ict":
        return ict_pairs(sentences, options.ict_context_sentences, options.ict_remove_probability, seed)
    if method == "neighbours":
        return neighbour_pairs(sentences, options.neighbour_window)
    raise StageError(f"unknown baseline {method!r}: expected one of {', '.join(BASELINES)}")


def baseline_pairs(method: str, sentences: pd.DataFrame, options: BaselineOptions, budget: Budget, seed: int,
                    mask_token: str = "[MASK]") -> tuple[pd.DataFrame, dict]:
    """One annotator's pairs, cut to the shared budget exactly as IDC's are, and their statistics;
    the augmentation draws from a child of `seed`, the budget from `seed` itself (as IDC's)."""
    candidates = annotate(method, sentences, options, child_seed(seed), mask_token)
    kept = cap_pairs(document_codes(candidates["doc_id"]), budget, seed)
    pairs = candidates.iloc[kept].reset_index(drop=True)
    return pairs, {"method": method, "pairs_mined": int(len(candidates)), **pair_table_statistics(pairs)}

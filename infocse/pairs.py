"""The pair table every annotator writes and the trainer reads: schema, budget caps, statistics.

Columns: doc_id, sentence_a, sentence_b (-1 when the positive is not a sentence of the table, as
in ICT), cluster (-1 for the baselines), text_a, text_b; rows sorted by (sentence_a, sentence_b).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from infocse.config import Budget
from infocse.errors import StageError

PAIR_DTYPES = {"doc_id": "str", "sentence_a": "int64", "sentence_b": "int64", "cluster": "int64",
               "text_a": "str", "text_b": "str"}
PAIR_COLUMNS = list(PAIR_DTYPES)
TOKEN = re.compile(r"\w+")


def document_offsets(doc_codes: np.ndarray) -> np.ndarray:
    """Start offsets of each document's rows (rows must be grouped by document), plus the end."""
    if len(doc_codes) and np.any(np.diff(doc_codes) < 0):
        raise StageError("sentences must be grouped by document, in document order")
    starts = np.flatnonzero(np.r_[True, doc_codes[1:] != doc_codes[:-1]]) if len(doc_codes) else np.array([], int)
    return np.r_[starts, len(doc_codes)].astype(np.int64)


def document_codes(doc_ids: pd.Series | np.ndarray) -> np.ndarray:
    """Each row's document as a code 0, 1, ... in order of first appearance."""
    return pd.factorize(np.asarray(doc_ids), sort=False)[0].astype(np.int64)


def checked_document_codes(sentences: pd.DataFrame) -> np.ndarray:
    """Document codes of the sentence table, checking its layout: rows grouped by document and
    positions running 0..n-1 in row order (so rows, not positions, can be counted on)."""
    codes = document_codes(sentences["doc_id"])
    offsets = document_offsets(codes)
    sizes = np.diff(offsets)
    expected = np.arange(len(codes)) - np.repeat(offsets[:-1], sizes)
    if not np.array_equal(sentences["position"].to_numpy(), expected):
        raise StageError("sentence positions must run 0..n-1 inside each document, in row order")
    return codes


def pair_table(sentences: pd.DataFrame, rows: np.ndarray, sentence_b: np.ndarray, text_b,
               cluster: np.ndarray | None = None) -> pd.DataFrame:
    """The pair table for anchor rows `rows` of the sentence table, sorted by (sentence_a, sentence_b)."""
    frame = pd.DataFrame({
        "doc_id": sentences["doc_id"].to_numpy()[rows],
        "sentence_a": sentences["sentence_id"].to_numpy()[rows],
        "sentence_b": np.asarray(sentence_b),
        "cluster": np.full(len(rows), -1) if cluster is None else np.asarray(cluster),
        "text_a": sentences["text"].to_numpy()[rows],
        "text_b": np.asarray(text_b, dtype=object),
    }, columns=PAIR_COLUMNS).astype(PAIR_DTYPES)
    return frame.sort_values(["sentence_a", "sentence_b"], kind="stable").reset_index(drop=True)


def empty_pair_table() -> pd.DataFrame:
    return pd.DataFrame({column: pd.Series(dtype=dtype) for column, dtype in PAIR_DTYPES.items()})


def kept_pair_numbers(doc_pairs: np.ndarray, budget: Budget, seed: int) -> np.ndarray | None:
    """Numbers of the pairs the budget keeps (None: all), given each document's pair count, a
    document's pairs being one consecutive run of numbers: at most `max_pairs_per_document` of each
    document, drawn uniformly without replacement, then at most `max_pairs` of those in all, drawn
    uniformly (pair counts grow with the square of cluster size). Only the kept numbers are ever
    built, so a document of a million pairs costs its cap, not a million."""
    rng = np.random.default_rng(seed)
    doc_pairs = np.asarray(doc_pairs, dtype=np.int64)
    total = int(doc_pairs.sum())
    cap = budget.max_pairs_per_document
    kept = None
    if cap is not None and (doc_pairs > cap).any():
        starts = np.cumsum(doc_pairs) - doc_pairs
        whole = doc_pairs <= cap
        sizes = doc_pairs[whole]  # documents within the cap keep every pair: their runs, concatenated
        parts = [np.repeat(starts[whole] - (np.cumsum(sizes) - sizes), sizes) + np.arange(int(sizes.sum()))]
        parts += [start + rng.choice(count, cap, replace=False)
                  for start, count in zip(starts[~whole].tolist(), doc_pairs[~whole].tolist())]
        kept = np.sort(np.concatenate(parts))
    available = total if kept is None else len(kept)
    if budget.max_pairs is not None and available > budget.max_pairs:
        chosen = np.sort(rng.choice(available, size=budget.max_pairs, replace=False))
        kept = chosen if kept is None else kept[chosen]
    return kept


def cap_pairs(doc_codes: np.ndarray, budget: Budget, seed: int) -> np.ndarray:
    """Indices of the pairs kept, given each pair's document (pairs grouped by document): the
    numbers of `kept_pair_numbers`."""
    doc_codes = np.asarray(doc_codes, dtype=np.int64)
    kept = kept_pair_numbers(np.diff(document_offsets(doc_codes)), budget, seed)
    return np.arange(len(doc_codes)) if kept is None else kept


def token_jaccard(text_a: str, text_b: str) -> float:
    """Lexical overlap of a pair: the paper's 'trivial positives' made measurable."""
    a, b = set(TOKEN.findall(text_a.lower())), set(TOKEN.findall(text_b.lower()))
    return len(a & b) / len(a | b) if a | b else 0.0


def pair_table_statistics(pairs: pd.DataFrame) -> dict:
    """What any annotator's kept pairs look like: how many, from how many documents, how lexically alike."""
    overlap = [token_jaccard(a, b) for a, b in zip(pairs["text_a"], pairs["text_b"])]
    return {"pairs": int(len(pairs)), "documents_in_pairs": int(pairs["doc_id"].nunique()),
            "mean_token_jaccard": float(np.mean(overlap)) if overlap else 0.0}


def cluster_statistics(labels: np.ndarray, doc_codes: np.ndarray) -> dict:
    """IDC's clusters and mined pairs (before the budget): sizes and how concentrated the pairs are,
    from the cluster sizes alone (a cluster of m sentences, inside one document, has m(m-1)/2 pairs)."""
    sizes = np.bincount(labels)
    clustered = sizes[sizes >= 2]
    cluster_pairs = sizes * (sizes - 1) // 2
    cluster_document = np.zeros(len(sizes), np.int64)
    cluster_document[labels] = doc_codes
    documents = int(doc_codes.max()) + 1 if len(doc_codes) else 0
    per_doc = np.bincount(cluster_document, weights=cluster_pairs, minlength=documents)
    per_doc = np.sort(per_doc.astype(np.int64))[::-1]
    mined = int(cluster_pairs.sum())
    top_tenth = per_doc[: max(1, int(np.ceil(len(per_doc) * 0.1)))].sum() if len(per_doc) else 0
    return {
        "sentences": int(len(labels)),
        "clusters": int(len(clustered)),
        "singletons": int((sizes == 1).sum()),
        "mean_cluster_size": float(clustered.mean()) if len(clustered) else 0.0,
        "max_cluster_size": int(clustered.max()) if len(clustered) else 0,
        "pairs_mined": mined,
        "share_of_pairs_from_top_10pct_documents": float(top_tenth / mined) if mined else 0.0,
    }

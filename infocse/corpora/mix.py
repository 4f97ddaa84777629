"""Mixed-topic corpora: training documents made of several source documents, and the precision of
mined pairs against those sources.

Both built-in corpora are single-topic documents, where every pair inside a document is plausibly
related. The InfoCSE argument is about documents that mix topics (a multi-section document, a
browsing session): a mixed document of known sources makes a false positive measurable, since a
pair whose sentences come from two sources is wrong. Evaluation never sees the mix: it keeps the
source documents (documents.parquet).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from infocse.config import MIX_ORDERS
from infocse.errors import StageError

MIXED_COLUMNS = ["sentence_id", "doc_id", "position", "text", "source_id", "source_category"]


def group_sources(categories: pd.Series, sources: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Groups of `sources` (>= 1) source indices (0..n-1, one per entry of `categories`), each index in
    exactly one group, members in random order.

    With at least `sources` categories (a missing category counts as one category of its own),
    groups are dealt greedily: each category's documents are shuffled, and each group takes one
    document from each of the `sources` categories with the most documents left (ties in a seeded
    random order). Taking from the largest first makes as many groups of distinct categories as
    the counts allow. The documents left over, in fewer than `sources` categories, are shuffled and
    cut into groups of `sources` anyway (their categories repeat), so that every source is used
    and the mixed documents keep one size; the last group may be smaller. With fewer categories
    than `sources`, all documents are shuffled and cut into groups the same way. `sources` 1 keeps
    each document alone, in its original order.
    """
    n = len(categories)
    if sources == 1:
        return [np.array([i]) for i in range(n)]
    codes = pd.factorize(categories.astype(object).where(categories.notna(), None), use_na_sentinel=False)[0]
    decks = [rng.permutation(np.flatnonzero(codes == c)) for c in range(codes.max() + 1 if n else 0)]
    left = np.array([len(deck) for deck in decks], dtype=np.int64)
    tie = rng.permutation(len(decks))
    groups = []
    while len(decks) >= sources and np.count_nonzero(left) >= sources:
        pick = np.lexsort((tie, -left))[:sources]
        left[pick] -= 1
        groups.append(rng.permutation([decks[c][left[c]] for c in pick]))
    rest = rng.permutation(np.concatenate([deck[:count] for deck, count in zip(decks, left)] + [np.array([], int)]))
    groups.extend(rest[start:start + sources] for start in range(0, len(rest), sources))
    return groups


def mix_sentences(sentences: pd.DataFrame, documents: pd.DataFrame, sources: int, order: str,
                  seed: int) -> pd.DataFrame:
    """The sentence table regrouped into mixed documents of `sources` source documents each
    (see group_sources), with each sentence's `source_id` and `source_category`.

    "concatenated": the sources one after another (a multi-section document). "interleaved": the
    sources' sentences merged in random order, each source keeping its own order (a browsing
    session): a random permutation of the group's sentences, whose slots are then refilled source
    by source in order, i.e. a uniform draw of the sequence of source labels. Mixed documents are
    "mix-00000", ... in group order; positions run 0..n-1 inside each; sentence ids 0..N-1 in row
    order. Every source document with a sentence is in exactly one mixed document.
    """
    if isinstance(sources, bool) or not isinstance(sources, (int, np.integer)) or sources < 1:
        raise StageError(f"mix `sources` must be an integer >= 1 (1 keeps each document alone), got {sources!r}")
    if order not in MIX_ORDERS:
        raise StageError(f"mix `order` must be one of {list(MIX_ORDERS)}, got {order!r}")
    source_codes, source_ids = pd.factorize(sentences["doc_id"].to_numpy(dtype=object), sort=False)
    if len(source_codes) and np.any(np.diff(source_codes) < 0):
        raise StageError("sentences must be grouped by document, in document order")
    unknown = source_ids[~pd.Index(source_ids).isin(documents["doc_id"])]
    if len(unknown):
        raise StageError(f"{len(unknown)} sentence document(s) are not in the documents table, e.g. {unknown[0]!r}")
    category = documents.drop_duplicates("doc_id").set_index("doc_id")["category"].reindex(source_ids)

    rng = np.random.default_rng(seed)
    groups = group_sources(category.reset_index(drop=True), sources, rng)
    group_of = np.empty(len(source_ids), np.int64)
    member_of = np.empty(len(source_ids), np.int64)
    for number, members in enumerate(groups):
        group_of[members] = number
        member_of[members] = np.arange(len(members))

    row_group = group_of[source_codes]
    source_start = np.searchsorted(source_codes, np.arange(len(source_ids)))
    if order == "concatenated":
        rows = np.lexsort((np.arange(len(source_codes)), member_of[source_codes], row_group))
    else:
        slots = np.lexsort((rng.random(len(source_codes)), row_group))  # random slots inside each group
        slot_source = source_codes[slots]
        rank = pd.Series(slot_source).groupby(slot_source).cumcount().to_numpy()
        rows = source_start[slot_source] + rank  # each source's sentences fill its slots in order

    mixed_group = row_group[rows]
    width = max(5, len(str(max(len(groups) - 1, 0))))
    names = np.array([f"mix-{number:0{width}d}" for number in range(len(groups))], dtype=object)
    starts = np.searchsorted(mixed_group, mixed_group)  # rows are sorted by group
    categories = category.to_numpy(dtype=object)
    mixed = pd.DataFrame({
        "sentence_id": np.arange(len(rows), dtype=np.int64),
        "doc_id": names[mixed_group],
        "position": (np.arange(len(rows)) - starts).astype(np.int32),
        "text": sentences["text"].to_numpy(dtype=object)[rows],
        "source_id": source_ids[source_codes[rows]],
        "source_category": pd.Series(categories[source_codes[rows]], dtype=object),
    }, columns=MIXED_COLUMNS)
    mixed["source_category"] = mixed["source_category"].where(mixed["source_category"].notna(), None)
    return mixed


def pair_precision(pairs: pd.DataFrame, sentences: pd.DataFrame) -> dict:
    """How many mined pairs are right by the mix's ground truth: the share whose two sentences come
    from one source document, and the share from one (known) category. Pairs whose positive is not
    a sentence of the table (sentence_b -1, as in ICT) have no second source and are left out of
    every count. A share is None when there is nothing to divide by (no such pairs; no category)."""
    real = pairs.loc[pairs["sentence_b"].to_numpy() >= 0, ["sentence_a", "sentence_b"]]
    index = pd.Index(sentences["sentence_id"])
    a, b = index.get_indexer(real["sentence_a"]), index.get_indexer(real["sentence_b"])
    if np.any(a < 0) or np.any(b < 0):
        missing = real["sentence_a"].to_numpy()[a < 0].tolist() + real["sentence_b"].to_numpy()[b < 0].tolist()
        raise StageError(f"pair sentence id {missing[0]} is not in the sentence table")
    source = sentences["source_id"].to_numpy(dtype=object)
    category = sentences["source_category"].to_numpy(dtype=object)
    known = pd.notna(category)
    same_category = known[a] & known[b] & (category[a] == category[b])
    count = len(real)
    return {"pair_source_precision": float(np.mean(source[a] == source[b])) if count else None,
            "pair_category_precision": float(np.mean(same_category)) if count and known.any() else None,
            "pairs_with_sources": int(count)}


def sources_pair_precision(pairs: pd.DataFrame, sentences_path) -> dict:
    """`pair_precision` of a pair table against the sentence table at `sentences_path`, or {} when
    its sentences carry no source (an unmixed corpus, where every pair's sentences share one)."""
    import pyarrow.parquet as pq

    if "source_id" not in pq.read_schema(sentences_path).names:
        return {}
    return pair_precision(pairs, pd.read_parquet(sentences_path, columns=["sentence_id", "source_id",
                                                                          "source_category"]))

"""Document-disjoint batches: in-batch negatives come from other documents only.

Two sentences of one document may be true positives of each other, so a batch never holds two
pairs of one document. Nor does it hold one text twice (as sentence-transformers'
no-duplicates sampler ensures): a sentence repeated across documents (a byline, "he said.")
would otherwise be its own negative. The batches are planned up front (pair row indices) and handed to the
trainer by `PrecomputedBatchSampler`. Two ways to fill them (params `train.sampler`):

- `greedy`: shuffle the pairs, fill each batch in that order, skipping a pair whose document or
  text is already in it. A batch is full whenever `batch_size` documents still hold pairs that
  repeat no text; once fewer do, the last batches shrink to the few (long) documents left, down
  to two pairs.
- `spread`: only full batches. Each takes one pair from each of the `batch_size` documents with
  the most pairs left, which spreads a long document's pairs over the epoch and forms as many
  full batches as the table allows; the pairs no full batch can take are left out.

On a skewed table no sampler can fill more batches than that bound: a document gives at most one
pair per batch. The choice is what to do with the rest: `greedy` trains on it in small batches
with few negatives, `spread` drops it.
"""

from __future__ import annotations

import functools
import heapq

import numpy as np


def conflicts(text_codes: np.ndarray | None, index: int, texts: set) -> bool:
    """Whether pair `index` has a text already among `texts` (a batch's texts)."""
    return text_codes is not None and not texts.isdisjoint(text_codes[index])


def greedy_document_disjoint_batches(doc_codes: np.ndarray, batch_size: int, seed: int, multiple_of: int = 1,
                              text_codes: np.ndarray | None = None) -> list[list[int]]:
    """Shuffle pairs with `seed` and fill batches greedily, skipping a pair whose document (or,
    given `text_codes`, (pairs, 2) codes of its two texts, one of whose texts) is already in the
    batch: it waits for the next one. Batches of fewer than two pairs, which have no negatives,
    are dropped.

    With `multiple_of` > 1 (the number of devices sharing each batch), a batch is cut to a multiple
    of it so that every device gets an equal slice; the pairs cut off wait for the next batch."""
    rng = np.random.default_rng(seed)
    waiting = rng.permutation(len(doc_codes)).tolist()
    codes = np.asarray(doc_codes).tolist()
    batches: list[list[int]] = []
    while waiting:
        batch, docs, texts, deferred = [], set(), set(), []
        filled_at = len(waiting)
        for position, index in enumerate(waiting):
            if len(batch) == batch_size:  # every later pair waits: stop scanning (linear, not quadratic)
                filled_at = position
                break
            if codes[index] in docs or conflicts(text_codes, index, texts):
                deferred.append(index)
            else:
                batch.append(index)
                docs.add(codes[index])
                if text_codes is not None:
                    texts.update(text_codes[index].tolist())
        deferred += waiting[filled_at:]
        if len(batch) == 1 and any(codes[index] != codes[waiting[0]] for index in waiting):
            waiting = waiting[1:]  # its first pair repeats a text of every other document's: it alone goes
            continue
        if multiple_of > 1 and len(batch) % multiple_of:
            batch = batch[: len(batch) - len(batch) % multiple_of]
            kept = set(batch)
            deferred = [index for index in waiting if index not in kept]
        if len(batch) < 2:
            break
        batches.append(batch)
        waiting = deferred
    return batches


def spread_batches(doc_codes: np.ndarray, batch_size: int, seed: int, multiple_of: int = 1,
                   text_codes: np.ndarray | None = None) -> list[list[int]]:
    """Full batches only: each takes one pair from each of the `batch_size` documents with the most
    pairs left (ties broken at random with `seed`; a document's pairs in an order shuffled with
    `seed`), while at least `batch_size` documents hold pairs. Taking from the largest documents
    first forms the most full batches any document-disjoint batching can. With `multiple_of` > 1
    the batch size is cut to a multiple of it (each device takes an equal slice). Given
    `text_codes`, a document gives its next pair that repeats no text of the batch, and sits the
    batch out if it has none; once the documents left cannot fill a batch that way, batching ends."""
    size = batch_size - batch_size % multiple_of
    codes = np.asarray(doc_codes, dtype=np.int64)
    rng = np.random.default_rng(seed)
    left: dict[int, list[int]] = {}  # document -> its pairs not yet in a batch, taken from the end
    for index in rng.permutation(len(codes)).tolist():
        left.setdefault(int(codes[index]), []).append(index)
    tie_breaks = iter(rng.random(len(codes) + len(left)).tolist())  # one per document entering the heap
    heap = [(-len(pairs), next(tie_breaks), doc) for doc, pairs in left.items()]
    heapq.heapify(heap)
    batches: list[list[int]] = []
    while size >= 2 and len(heap) >= size:
        batch, texts, taken, sat_out = [], set(), [], []
        while len(batch) < size and heap:
            entry = heapq.heappop(heap)
            pairs_left = left[entry[2]]
            usable = next((i for i in range(len(pairs_left) - 1, -1, -1)
                           if not conflicts(text_codes, pairs_left[i], texts)), None)
            if usable is None:  # every pair of this document repeats a text of the batch
                sat_out.append(entry)
                continue
            pairs_left[usable], pairs_left[-1] = pairs_left[-1], pairs_left[usable]
            index = pairs_left.pop()
            batch.append(index)
            taken.append(entry)
            if text_codes is not None:
                texts.update(text_codes[index].tolist())
        for entry in sat_out:
            heapq.heappush(heap, entry)
        if len(batch) < size:
            break
        for negative_left, _, doc in taken:
            if negative_left + 1 < 0:  # pairs left after this one: back in, with a fresh tie-break
                heapq.heappush(heap, (negative_left + 1, next(tie_breaks), doc))
        batches.append(batch)
    return batches


SAMPLER_FUNCTIONS = {"greedy": greedy_document_disjoint_batches, "spread": spread_batches}


def sampled_batches(sampler: str, doc_codes: np.ndarray, batch_size: int, seed: int, multiple_of: int = 1,
                    text_codes: np.ndarray | None = None) -> list[list[int]]:
    """One epoch's batches (pair row indices) by the sampler named in params `train.sampler`."""
    return SAMPLER_FUNCTIONS[sampler](doc_codes, batch_size, seed, multiple_of=multiple_of, text_codes=text_codes)


def batch_statistics(batches: list[list[int]], doc_codes: np.ndarray, batch_size: int) -> dict:
    """What the trainer was fed: how many batches, how large (a full batch has `batch_size` pairs,
    so `batch_size` - 1 in-batch negatives per direction), and how concentrated the pairs given to
    training are: the share of the batched pairs (pairs a sampler left out do not count) held by the top 10%
    of their documents (at least one), most pairs first."""
    sizes = np.array([len(batch) for batch in batches], dtype=np.int64)
    batched = np.asarray(doc_codes)[np.concatenate(batches).astype(np.int64)] if batches else np.array([], np.int64)
    per_document = np.sort(np.unique(batched, return_counts=True)[1])[::-1]
    top_tenth = per_document[: max(1, int(np.ceil(len(per_document) * 0.1)))].sum() if len(per_document) else 0
    return {
        "batches": int(len(sizes)),
        "mean_size": float(sizes.mean()) if len(sizes) else 0.0,
        "min_size": int(sizes.min()) if len(sizes) else 0,
        "share_full": float((sizes == batch_size).mean()) if len(sizes) else 0.0,
        "share_of_pairs_from_top_10pct_documents": float(top_tenth / len(batched)) if len(batched) else 0.0,
    }


def rank_slices(batch: list[int], shards: int) -> list[list[int]]:
    """A global batch cut into `shards` equal consecutive slices; slice r is rank r's share."""
    if len(batch) % shards:
        raise ValueError(f"a batch of {len(batch)} pairs cannot be cut into {shards} equal slices")
    size = len(batch) // shards
    return [batch[r * size:(r + 1) * size] for r in range(shards)]


@functools.cache
def precomputed_batch_sampler() -> type:
    """The trainer's batch sampler class (below). Made on first use: sentence-transformers takes seconds
    to import, and a stage that trains nothing (a stopped iteration) or refuses its params should not
    wait for it."""
    from sentence_transformers.base.sampler import DefaultBatchSampler

    class PrecomputedBatchSampler(DefaultBatchSampler):
        """The trainer's batch sampler: yields the given (document-disjoint) batches, in order.

        With `shards` = N > 1 processes it yields, for each global batch in turn, its N rank slices
        (slice 0, ..., slice N-1). Accelerate shards a batch sampler across processes by position
        (`BatchSamplerShard`, `split_batches=False`: process r takes items r, r + N, r + 2N, ...), so
        process r gets slice r of every global batch, and one optimizer step sees one global batch.
        Its `batch_size` is then None, which tells accelerate the slices vary in size (the last global
        batches can be short) and must not be regrouped or padded."""

        def __init__(self, dataset, batch_size, drop_last, valid_label_columns=None, generator=None, seed=0, *,
                     batches: list[list[int]], shards: int = 1):
            super().__init__(dataset, batch_size=batch_size, drop_last=drop_last,
                             valid_label_columns=valid_label_columns, generator=generator, seed=seed)
            self.batches = batches
            self.shards = shards
            if shards > 1:
                self.batch_size = None

        def __iter__(self):
            if self.shards == 1:
                return iter(self.batches)
            return (part for batch in self.batches for part in rank_slices(batch, self.shards))

        def __len__(self) -> int:
            return len(self.batches) * self.shards

    return PrecomputedBatchSampler

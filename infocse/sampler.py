"""Document-disjoint batches: in-batch negatives come from other documents only.

Two sentences of one document may be true positives of each other, so a batch never holds two
pairs of one document. The batches are planned up front (pair row indices) and handed to the
trainer by `PrecomputedBatchSampler`.
"""

from __future__ import annotations

import numpy as np
from sentence_transformers.base.sampler import DefaultBatchSampler


def document_disjoint_batches(doc_codes: np.ndarray, batch_size: int, seed: int,
                              multiple_of: int = 1) -> list[list[int]]:
    """Shuffle pairs with `seed` and fill batches greedily, skipping a pair whose document is
    already in the batch (it waits for the next one). Batches of fewer than two pairs, which
    have no negatives, are dropped.

    With `multiple_of` > 1 (the number of devices sharing each batch), a batch is cut to a multiple
    of it so that every device gets an equal slice; the pairs cut off wait for the next batch."""
    rng = np.random.default_rng(seed)
    waiting = rng.permutation(len(doc_codes)).tolist()
    codes = np.asarray(doc_codes).tolist()
    batches: list[list[int]] = []
    while waiting:
        batch, docs, deferred = [], set(), []
        filled_at = len(waiting)
        for position, index in enumerate(waiting):
            if len(batch) == batch_size:  # every later pair waits: stop scanning (linear, not quadratic)
                filled_at = position
                break
            if codes[index] in docs:
                deferred.append(index)
            else:
                batch.append(index)
                docs.add(codes[index])
        deferred += waiting[filled_at:]
        if multiple_of > 1 and len(batch) % multiple_of:
            batch = batch[: len(batch) - len(batch) % multiple_of]
            kept = set(batch)
            deferred = [index for index in waiting if index not in kept]
        if len(batch) < 2:
            break
        batches.append(batch)
        waiting = deferred
    return batches


def rank_slices(batch: list[int], shards: int) -> list[list[int]]:
    """A global batch cut into `shards` equal consecutive slices; slice r is rank r's share."""
    if len(batch) % shards:
        raise ValueError(f"a batch of {len(batch)} pairs cannot be cut into {shards} equal slices")
    size = len(batch) // shards
    return [batch[r * size:(r + 1) * size] for r in range(shards)]


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

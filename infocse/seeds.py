"""One random stream per use: each round, iteration and purpose draws its own seed from params `seed`.

Reusing `seed` unchanged would give every iteration the same pair sample and batch order (and
InfoCSE++ rounds the same again), so their draws would be correlated by construction.
"""

from __future__ import annotations

import numpy as np

PURPOSES = ("pairs", "train", "finetune", "mix")


def derived_seed(seed: int, purpose: str, iteration: int = 0, round_number: int = 1) -> int:
    """A 32-bit seed for `purpose` at (`round_number`, `iteration`), from numpy's SeedSequence."""
    if purpose not in PURPOSES:
        raise ValueError(f"unknown seed purpose {purpose!r}: expected one of {PURPOSES}")
    entropy = [int(seed), PURPOSES.index(purpose), int(round_number), int(iteration)]
    return int(np.random.SeedSequence(entropy).generate_state(1)[0])


def child_seed(seed: int) -> int:
    """A 32-bit seed independent of `seed`'s own stream: for a second draw of one step (IDC's
    K-means beside its budget sample; an annotator's augmentations beside its budget sample)."""
    return int(np.random.SeedSequence(seed).spawn(1)[0].generate_state(1)[0])

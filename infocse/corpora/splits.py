"""The label split: documents -> fewshot / val / test, by document, stratified by category.

Titles of val and test documents are the evaluation queries; val only stops and selects, test
is only reported.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from infocse.config import SPLITS


def assign_splits(documents: pd.DataFrame, fractions: dict[str, float], seed: int) -> pd.Series:
    """Each document's split, drawn per category with `seed` (fractions checked by the config)."""
    rng = np.random.default_rng(seed)
    split = pd.Series("", index=documents.index, dtype=object)
    for _, group in documents.groupby("category", sort=True):
        order = group.index.to_numpy()[rng.permutation(len(group))]
        bounds = np.round(np.cumsum([float(fractions[name]) for name in SPLITS]) * len(group)).astype(int)
        for name, chunk in zip(SPLITS, np.split(order, bounds[:-1])):
            split[chunk] = name
    return split

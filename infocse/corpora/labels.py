"""Labelled (query, positive) pairs for few-shot fine-tuning.

Default: (title, body) of the few-shot pool documents -- never a val or test document, whose
titles are the evaluation queries. Or a user's own pairs (Parquet or JSONL with `query` and
`positive`). The label budget is sampled with `seed`, nested: a larger budget contains a smaller one.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from infocse.config import Config
from infocse.corpora.readers import read_table, require_columns
from infocse.errors import StageError

LABEL_COLUMNS = ["pair_id", "query", "positive"]


def fewshot_pairs(documents: pd.DataFrame) -> pd.DataFrame:
    """(title, body) of the few-shot pool documents that have a title."""
    pool = documents[(documents["split"] == "fewshot") & documents["title"].notna()]
    return pd.DataFrame({"pair_id": pool["doc_id"].astype(str).to_numpy(), "query": pool["title"].to_numpy(),
                         "positive": pool["body"].to_numpy()}, columns=LABEL_COLUMNS)


def read_labelled_pairs(path: Path) -> pd.DataFrame:
    """A user's labelled pairs: Parquet or JSONL with `query` and `positive` (optional `id`)."""
    if not path.is_file():
        raise StageError(f"labelled pairs {str(path)!r}: no such file (params `finetune.path`)")
    frame = read_table(path, jsonl=path.suffix in (".jsonl", ".json"))
    require_columns(frame, path, ("query", "positive"), "labelled pairs need `query` and `positive`")
    frame = frame.dropna(subset=["query", "positive"])
    ids = frame["id"].astype(str) if "id" in frame else pd.Series(np.arange(len(frame)).astype(str), index=frame.index)
    return pd.DataFrame({"pair_id": ids.to_numpy(), "query": frame["query"].astype(str).to_numpy(),
                         "positive": frame["positive"].astype(str).to_numpy()}, columns=LABEL_COLUMNS)


def sample_labels(pairs: pd.DataFrame, budget: int | None, seed: int) -> pd.DataFrame:
    """`budget` pairs drawn without replacement with `seed` (all when None), in their original order.
    A larger budget with the same seed contains the smaller one's pairs (a nested learning curve)."""
    order = np.random.default_rng(seed).permutation(len(pairs))
    chosen = np.sort(order[:budget] if budget is not None else order)
    return pairs.iloc[chosen].reset_index(drop=True)


def labelled_pairs(config: Config, documents: pd.DataFrame) -> pd.DataFrame:
    """The label budget's pairs; an empty frame when the corpus has no labels at all (no titles),
    an error when some exist but fewer than the budget or than two."""
    finetune = config.finetune
    pairs = fewshot_pairs(documents) if finetune.source == "fewshot" else read_labelled_pairs(Path(finetune.path))
    if finetune.source == "fewshot" and documents["title"].notna().sum() == 0:
        return pairs  # a corpus without titles: nothing to fine-tune on, said by the stage
    if len(pairs) < 2:
        where = ("the few-shot split has that many documents with a title: raise params `split.fewshot`, or set "
                 "`finetune.source: file`" if finetune.source == "fewshot" else f"in {finetune.path}")
        raise StageError(f"{len(pairs)} labelled pair(s) available ({where}): fine-tuning needs at least 2 "
                         "(in-batch negatives)")
    if finetune.labels is not None and finetune.labels > len(pairs):
        raise StageError(f"params `finetune.labels` is {finetune.labels}, but only {len(pairs)} labelled pairs exist")
    return sample_labels(pairs, finetune.labels, config.seed)

"""labels: the labelled (query, positive) pairs that few-shot fine-tuning may use.

Default: (title, body) of the documents in the few-shot pool split -- never a val or test
document, whose titles are the evaluation queries. Or a user's own pairs (`finetune.source:
file`, Parquet or JSONL with `query` and `positive` columns). `finetune.labels` is the label
budget, sampled with `seed`; the sample is the same whatever else changes, so a budget change
reruns only the fine-tuning that reads it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from stages.common import DOCUMENTS, StageError, load_params, positive_int, run_stage, write_json, write_parquet
from stages.prepare import read_table, require_columns

LABELS = Path("data/labels/pairs.parquet")
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


def labelled_pairs(params: dict, documents: pd.DataFrame) -> pd.DataFrame:
    finetune = params["finetune"]
    source = finetune.get("source", "fewshot")
    if source == "fewshot":
        pairs = fewshot_pairs(documents)
    elif source == "file":
        pairs = read_labelled_pairs(Path(str(finetune.get("path") or "")))
    else:
        raise StageError(f"params `finetune.source` must be fewshot or file, got {source!r}")
    if len(pairs) < 2:
        raise StageError(f"{len(pairs)} labelled pair(s) available: fine-tuning needs at least 2 (in-batch negatives)")
    budget = positive_int(params, "finetune.labels", allow_all=True)
    if budget is not None and budget > len(pairs):
        raise StageError(f"params `finetune.labels` is {budget}, but only {len(pairs)} labelled pairs exist")
    return sample_labels(pairs, budget, int(params["seed"]))


def main() -> None:
    params = load_params()
    pairs = labelled_pairs(params, pd.read_parquet(DOCUMENTS))
    write_parquet(pairs, LABELS)
    write_json("metrics/labels.json", {"labels": len(pairs), "source": params["finetune"].get("source", "fewshot")})
    print(f"{len(pairs)} labelled pairs for fine-tuning")


if __name__ == "__main__":
    run_stage(main)

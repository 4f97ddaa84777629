"""labels: the labelled (query, positive) pairs few-shot fine-tuning may use -> data/labels/pairs.parquet.

Default: (title, body) of the few-shot pool documents; or a user's file (`finetune.source: file`).
The budget sample is the same whatever else changes, so a budget change reruns only fine-tuning.
"""

from __future__ import annotations

import pandas as pd

from infocse.config import load_config
from infocse.corpora.labels import labelled_pairs
from infocse.errors import run_stage
from infocse.io import write_json, write_parquet
from infocse.paths import DOCUMENTS, LABELS, LABELS_METRICS


def main() -> None:
    config = load_config()
    pairs = labelled_pairs(config, pd.read_parquet(DOCUMENTS))
    write_parquet(pairs, LABELS)
    write_json(LABELS_METRICS, {"labels": len(pairs), "source": config.finetune.source})
    if pairs.empty:
        print("note: the corpus has no titles, so there are no labelled pairs: fine-tuning is skipped")
    else:
        print(f"{len(pairs)} labelled pairs for fine-tuning")


if __name__ == "__main__":
    run_stage(main)

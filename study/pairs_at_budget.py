"""How many training pairs a round would have under other per-document caps, from a finished run's
embeddings (what a budget costs before you train at it):

    python -m study.pairs_at_budget [--caps 10 20 40] [--k 1]

For each `data/iterations/iter-t/embeddings.npy` of the run in the working tree: the pairs IDC mines
(K from params.yaml unless --k) and how many remain with at most N pairs per document and no
overall cap (`budget.max_pairs=all`). Training steps are pairs / `train.batch_size` or more.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from infocse.config import load_config
from infocse.idc import ClusterPairs, partition_idc
from infocse.paths import SENTENCES
from infocse.pairs import checked_document_codes, document_offsets


def pairs_per_document(labels: np.ndarray, doc_codes: np.ndarray) -> np.ndarray:
    """IDC's own count (the run of pair numbers each document has before the budget)."""
    return ClusterPairs(labels).per_document(document_offsets(doc_codes))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--caps", type=int, nargs="+", default=[10, 20, 40])
    parser.add_argument("--k", type=int, default=None)
    args = parser.parse_args()
    config = load_config("params.yaml")
    k = args.k or config.idc.k
    doc_codes = checked_document_codes(pd.read_parquet(SENTENCES))
    for path in sorted(Path("data/iterations").glob("iter-*/embeddings.npy")):
        labels = partition_idc(np.load(path), doc_codes, k, config.idc.block_rows)
        pairs = pairs_per_document(labels, doc_codes)
        caps = ", ".join(f"{cap} per document: {int(np.minimum(pairs, cap).sum()):,}" for cap in args.caps)
        print(f"{path.parent.name} (K={k}): {int(pairs.sum()):,} pairs mined; {caps}; "
              f"batch size {config.train.batch_size}")


if __name__ == "__main__":
    main()

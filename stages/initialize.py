"""init: f_0, the model the InfoCSE loop starts from, saved as iteration 0.

`init.method: none` keeps the seed model as it is. Otherwise the seed model first gets one round
of a classic self-supervised method (the paper's default is CONPONO; SimCSE and ICT also
converge): that annotator's pairs, under the same pair budget, batches and trainer as an IDC
round. With `loop.max_iterations: 0` this one round is the whole run, which is how the
baselines are run and compared.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd

from stages.annotators import ANNOTATORS, annotate
from stages.cluster import budget_caps, cap_pairs, empty_pair_table, pair_table_statistics
from stages.common import (
    SENTENCES,
    IterationPaths,
    StageError,
    load_model,
    load_params,
    resolve_device,
    resolve_model_source,
    run_stage,
    save_model,
    write_json,
    write_parquet,
)
from stages.train import train_at_length

INIT_METHODS = ("none", *ANNOTATORS)


def annotator_pairs(params: dict, sentences: pd.DataFrame, method: str, mask_token: str) -> tuple[pd.DataFrame, dict]:
    """One annotator's candidate pairs, cut to the shared budget exactly as IDC's are."""
    seed = int(params["seed"])
    candidates = annotate(method, sentences, params["annotators"], seed, mask_token)
    doc_codes = pd.factorize(candidates["doc_id"])[0]
    rows = np.arange(len(candidates))
    kept = cap_pairs(rows, rows, doc_codes, *budget_caps(params), seed)
    pairs = candidates.iloc[kept].reset_index(drop=True)
    return pairs, {"method": method, "pairs_mined": int(len(candidates)), **pair_table_statistics(pairs)}


def mask_token_of(model) -> str:
    """The tokenizer's mask token (Mirror-BERT masks spans with it); BERT's when there is none."""
    return getattr(getattr(model, "tokenizer", None), "mask_token", None) or "[MASK]"


def main() -> None:
    params = load_params()
    method = str((params.get("init") or {}).get("method", "none"))
    if method not in INIT_METHODS:
        raise StageError(f"params `init.method` must be one of {list(INIT_METHODS)}, got {method!r}")
    paths = IterationPaths(0)
    started = time.perf_counter()
    source = resolve_model_source(str(params.get("seed_model") or ""))
    if method == "none":
        model = load_model(source, device="cpu")
        pairs, pair_stats, train_stats = empty_pair_table(), {"method": method}, {"skipped": True}
    else:
        device = resolve_device(params.get("device"))
        model = load_model(source, device)
        pairs, pair_stats = annotator_pairs(params, pd.read_parquet(SENTENCES), method, mask_token_of(model))
        if pairs.empty:
            raise StageError(f"init method {method!r} found no pairs in the corpus")
        train_stats = {"skipped": False, "pairs": len(pairs), **train_at_length(model, pairs, params, device)}
    save_model(model, paths.model)
    write_parquet(pairs, paths.pairs)
    write_json(paths.metrics / "pairs.json", {"iteration": 0, **pair_stats})
    write_json(paths.metrics / "train.json", {"iteration": 0, "method": method, **train_stats,
                                              "seconds": time.perf_counter() - started})
    print(f"f_0 = seed model {params['seed_model']!r}" + ("" if method == "none" else f" + one round of {method} "
                                                          f"({len(pairs)} pairs)"))


if __name__ == "__main__":
    run_stage(main)

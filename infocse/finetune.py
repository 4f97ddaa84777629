"""Few-shot fine-tuning on labelled (query, positive) pairs, then val/test retrieval scores.

The same contrastive objective and trainer as the self-supervised rounds (symmetric in-batch
negatives; here query -> positive), with its own settings in params `finetune`.
"""

from __future__ import annotations

import pandas as pd

from infocse.config import Config
from infocse.models import sequence_length
from infocse.retrieval import scored
from infocse.seeds import derived_seed
from infocse.training import train_on_pairs


def finetune(model, labels: pd.DataFrame, config: Config, device: str, round_number: int = 1, live=None) -> dict:
    """Train `model` in place on the labelled pairs at `finetune.max_seq_length`; InfoCSE++'s
    round `round_number` draws its own batch order; `live` logs it as phase `finetune`."""
    pairs = pd.DataFrame({"doc_id": labels["pair_id"], "text_a": labels["query"], "text_b": labels["positive"]})
    training = config.finetune
    with sequence_length(model, training.max_seq_length):
        stats = train_on_pairs(model, pairs, training, derived_seed(config.seed, "finetune", 0, round_number), device,
                               label=f"fine-tuning (round {round_number})", live=live, phase="finetune")
    return {key: stats[key] for key in ("steps", "train_loss", "pairs_used", "precision")}


def finetune_and_score(model, labels: pd.DataFrame, config: Config, device: str, documents: pd.DataFrame,
                       round_number: int = 1, live=None) -> dict:
    """Fine-tune on `labels`, then score on val and test (at the evaluation length); `precision`
    records what the fine-tuning and the scoring ran in (params `precision`, for all of them)."""
    train = finetune(model, labels, config, device, round_number, live)
    return {**scored(model, documents, config), "labels": len(labels), "train": train, "device": str(device),
            "precision": config.precision}

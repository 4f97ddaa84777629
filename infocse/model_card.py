"""The model card (README.md) of a delivered model folder: how it was made and how it scores.

sentence-transformers' own card carries a timestamp, which would change every output hash, so the
pipeline writes this one instead: deterministic, in the library's convention (YAML front matter,
then Markdown), so a model shared with `push_to_hub` says what it is. `SentenceTransformer(path)`
loads the folder as before.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from infocse.config import Config, TrainingConfig
from infocse.models import PACKAGED_MODELS, SPLIT_ZIP_MODELS

METRIC_NAMES = {"recall@1": "R@1", "recall@5": "R@5", "recall@10": "R@10", "mrr@10": "MRR@10", "ndcg@10": "nDCG@10"}


def hub_id(name: str) -> str | None:
    """The hub id of a seed model named by a packaged name or a hub id; None for a local folder."""
    if name in PACKAGED_MODELS or name in SPLIT_ZIP_MODELS:
        return name if "/" in name else f"sentence-transformers/{name}"
    return name if name.count("/") == 1 and not Path(name).exists() else None


def metric_rows(rows: dict[str, dict]) -> list[str]:
    """A Markdown table: one row per named set of metrics."""
    lines = ["| | " + " | ".join(METRIC_NAMES.values()) + " |", "|---|" + "---|" * len(METRIC_NAMES)]
    for name, values in rows.items():
        if values:
            sign = "+" if "−" in name else ""  # a difference: signed
            lines.append(f"| {name} | " + " | ".join(f"{values.get(m, float('nan')):{sign}.3f}" for m in METRIC_NAMES) + " |")
    return lines


def model_card(config: Config, training: TrainingConfig, title: str, how: str, corpus: dict, rounds: list[dict],
               scores: dict[str, dict], candidates: int) -> str:
    """`how`: one paragraph on what this model is; `rounds`: the training rounds behind it (pairs,
    steps, loss), trained with `training`; `scores`: named val/test metrics (e.g. val, test, test
    minus the seed model)."""
    front = {"library_name": "sentence-transformers", "pipeline_tag": "sentence-similarity",
             "tags": ["sentence-transformers", "sentence-similarity", "infocse"]}
    if hub_id(config.seed_model):
        front["base_model"] = hub_id(config.seed_model)
    train = training
    params = {"seed_model": config.seed_model, "corpus": config.corpus.source, "seed": config.seed,
              "precision": config.precision, "init.method": config.init.method, "idc.method": config.idc.method,
              "idc.k": config.idc.k, "budget.max_pairs": config.budget.max_pairs or "all",
              "budget.max_pairs_per_document": config.budget.max_pairs_per_document or "all"}
    lines = ["---", yaml.safe_dump(front, sort_keys=False).strip(), "---", "", f"# {title}", "", how, "",
             "## Data", "",
             f"Corpus `{config.corpus.source}`: {corpus.get('documents', 0):,} documents, "
             f"{corpus.get('sentences', 0):,} sentences (bodies only: titles are never training text). Label split "
             f"by document (seed {config.seed}): {corpus.get('fewshot_documents', 0):,} few-shot, "
             f"{corpus.get('val_documents', 0):,} val, {corpus.get('test_documents', 0):,} test.", "",
             "## Training", ""]
    if rounds:
        lines += ["| round | pairs | steps | mean loss |", "|---|---|---|---|"]
        lines += [f"| {r['round']} | {r.get('pairs', 0):,} | {r.get('steps', 0)} | {r.get('train_loss', float('nan')):.4f} |"
                  for r in rounds]
        lines += ["", f"Loss: symmetric InfoNCE (sentence-transformers' MultipleNegativesRankingLoss in both "
                      f"directions), temperature {train.temperature:g}, batches of {train.batch_size} pairs from "
                      f"{train.batch_size} different documents, learning rate {train.learning_rate:g}, warmup "
                      f"{train.warmup_ratio:g}, {train.epochs} epoch(s) per round, max length {train.max_seq_length}, "
                      f"precision {config.precision}."]
    else:
        lines.append("None: this is the seed model as it is (no training round beat it on validation).")
    lines += ["", "## Evaluation", "", f"Title -> body retrieval, each title against all {candidates:,} bodies.", "",
              *metric_rows(scores), "", "## Use", "", "```python", "from sentence_transformers import SentenceTransformer",
              "", 'model = SentenceTransformer("path/to/this/folder")', "```", "", "## Made with", "",
              "`dvc repro` of the InfoCSE pipeline, with these params (the rest at their defaults or as in "
              "`params.yaml`):", "", "```yaml", yaml.safe_dump(params, sort_keys=False).strip(), "```", ""]
    return "\n".join(lines)

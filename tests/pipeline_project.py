"""What the tiny end-to-end pipeline tests share: the stage names, the params for a tiny model and
twelve documents (the `built_project` and `project` fixtures in conftest.py run them), and reading
report tables."""

from __future__ import annotations

from pathlib import Path

ITERATION_STAGES = ["embed@{t}", "cluster@{t}", "train@{t}", "evaluate@{t}"]
MAIN_STAGES = ["prepare", "init", "evaluate_init", "first_round_model", *[s.format(t=1) for s in ITERATION_STAGES], "select"]
FEWSHOT_STAGES = ["labels", "finetune@f0", "finetune@best", "plusplus@2", "plusplus@3", "select_plusplus"]
REPORT_STAGE = "report"  # after fine-tuning: the run report shows the fine-tuned models too
RECORD_STAGES = ["record", "record_fewshot"]  # last (DVC's order): the run records hold every param
# A learning rate this small moves no weight that is not zero (and a zero one by ~1e-30): the model
# cannot improve on val, so every stop rule must fire. Params refuse a rate of 0.
FROZEN = 1.0e-30


def report_rows(report: str) -> list[list[str]]:
    """The cells of every row of the Markdown tables in a report."""
    return [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in report.splitlines() if line.startswith("|")]


def tiny_overrides(model_dir: Path, corpus: Path, labels: Path) -> dict:
    return {
        "seed_model": str(model_dir),
        "device": "cpu",
        "precision": "fp32",  # the default, stated: the tests compare runs exactly
        "corpus": {"source": "jsonl", "path": str(corpus)},
        "split": {"fewshot": 0.0, "val": 0.5, "test": 0.5},  # two documents per category: one val, one test
        "embed": {"batch_size": 16, "max_seq_length": 64},
        "idc": {"k": 1},
        "budget": {"max_pairs_per_document": "all", "max_pairs": "all"},
        "train": {"batch_size": 4, "learning_rate": 1.0e-3, "epochs": 1},
        "evaluate": {"batch_size": 16, "max_seq_length": 64},
        "report": {"bootstrap_samples": 200},
        "loop": {"patience": 5},
        "iterations": {"1": {"prev": 0}},
        # the tiny split has no few-shot pool: fine-tune on a file of labelled pairs instead
        "finetune": {"labels": "all", "source": "file", "path": str(labels), "batch_size": 4, "learning_rate": 1.0e-3,
                     "max_seq_length": 64, "epochs": 1},
        "plusplus": {"max_rounds": 1},
    }

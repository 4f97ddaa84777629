"""Every output path of the pipeline, named once (dvc.yaml spells the same paths for DVC)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DOCUMENTS = Path("data/corpus/documents.parquet")
SENTENCES = Path("data/corpus/sentences.parquet")
CORPUS_METRICS = Path("metrics/corpus.json")
FIRST_ROUND_MODEL = Path("models/first_round_model")  # the model that mines round 1 (idc.first_round_model)
BEST_MODEL = Path("models/best")
BEST_METRICS = Path("metrics/best.json")
LABELS = Path("data/labels/pairs.parquet")
LABELS_METRICS = Path("metrics/labels.json")
PLUSPLUS_MODEL = Path("models/plusplus/best")
PLUSPLUS_METRICS = Path("metrics/plusplus.json")
REPORT = Path("reports/report.md")
CONVERGENCE_PLOT = Path("reports/run_convergence.png")
CONVERGENCE_CSV = Path("reports/run_convergence.csv")


@dataclass(frozen=True)
class IterationPaths:
    """Where iteration t's outputs live (t = 0 is f_0, the model the loop starts from)."""

    t: int

    @property
    def model(self) -> Path:
        return Path(f"models/iterations/iter-{self.t}")

    @property
    def embeddings(self) -> Path:
        return Path(f"data/iterations/iter-{self.t}/embeddings.npy")

    @property
    def pairs(self) -> Path:
        return Path(f"data/iterations/iter-{self.t}/pairs.parquet")

    @property
    def ranks(self) -> Path:
        return Path(f"data/ranks/iter-{self.t}.parquet")

    @property
    def metrics(self) -> Path:
        return Path(f"metrics/iterations/iter-{self.t}")

    @property
    def live(self) -> Path:
        """The training curves written while init/train@t trains (infocse/live.py)."""
        return self.metrics / "live"

    @property
    def retrieval(self) -> Path:
        """Val/test retrieval metrics and the loop state after t (best iteration, since_best)."""
        return self.metrics / "retrieval.json"

    @property
    def continue_flag(self) -> Path:
        """Whether iteration t+1 does any work: all that embed/cluster/train@t+1 need to know,
        kept apart from the metrics so a change in scores alone does not rerun them."""
        return Path(f"data/state/after-iter-{self.t}.json")


def finetuned_model(name: str) -> Path:
    """A fine-tuned model: `f0`, `best` (InfoCSE++ round 1) or `round-r`."""
    return Path(f"models/finetuned/{name}")


def finetuned_metrics(name: str) -> Path:
    """Scores and the InfoCSE++ state after fine-tuned model `name` (no timings: later rounds read it)."""
    return Path(f"metrics/finetuned/{name}.json")


def finetuned_live(name: str) -> Path:
    """The training curves written while fine-tuned model `name` trains (infocse/live.py)."""
    return Path(f"metrics/finetuned/live/{name}")


def finetuned_timing(name: str) -> Path:
    return Path(f"metrics/finetuned/timings/{name}.json")

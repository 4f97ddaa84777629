"""params.yaml -> typed, validated settings: every param is checked here, once, before any work, and
every bad value is reported at once, one line each (infocse/param_types.py), so a stage never loads a
model before finding a typo. The schema is shaped like params.yaml; a new param is a field below."""

import copy
from pathlib import Path
from typing import Annotated

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from infocse.errors import StageError
from infocse.methods import METHODS
from infocse.param_types import (OrAuto, Device, Flag, Fraction, Integer, OrAll, Positive, Text, chain, check,
                                  choice, integer, number, old_params, refusal, rule, text)

PARAMS_FILE = Path("params.yaml")

CORPUS_SOURCES = ("bbc", "manpages", "jsonl", "parquet", "txt")
MIX_ORDERS = ("interleaved", "concatenated")
METRICS = ("recall@1", "recall@5", "recall@10", "mrr@10", "ndcg@10")
# What the unsupervised loop validates on (params `loop.validate_on`): the titles of these splits.
# Never test; fine-tuning and InfoCSE++ validate on val alone, as they train on the few-shot pool.
VALIDATION_SETS = {"val": ("val",), "fewshot+val": ("fewshot", "val")}
VALIDATION_QUERIES = {"val": "val queries", "fewshot+val": "few-shot pool + val queries"}
SPLITS = ("fewshot", "val", "test")
PRECISIONS = ("fp32", "bf16", "fp16")
PRECISION_SECTIONS = ("embed", "train", "evaluate", "finetune")  # they get the top-level `precision`


Precision = choice(PRECISIONS)


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Mix(Section):
    sources: Integer = 1  # source documents per training document; 1: no mixing
    order: choice(MIX_ORDERS) = "interleaved"  # infocse/corpora/mix.py


class CorpusConfig(Section):
    source: choice(CORPUS_SOURCES)
    path: Text = "corpus"
    title_first_line: Flag = True
    manpages_root: Text = "auto"
    max_documents: OrAll = None  # None: all
    mix: Mix = Mix()


class Split(Section):
    fewshot: Fraction
    val: Fraction
    test: Fraction


class InitConfig(Section):
    method: choice(tuple(METHODS)) = "none"


class BaselineOptions(Section):
    mirror_span_chars: Integer
    text_cutoff_rate: Fraction
    ict_context_sentences: Integer
    ict_remove_probability: Fraction
    ict_max_seq_length: Integer
    neighbour_window: Integer


class Budget(Section):  # training pairs per round, shared by IDC and every baseline (None: no cap)
    max_pairs_per_document: OrAll
    max_pairs: OrAll


class EngineConfig(Section):
    name: choice(("local", "ray")) = "local"
    address: Annotated[str | None, text(null=True)] = None
    partition_sentences: Integer = 50000
    actors: OrAuto = None  # None: one per GPU, or 1 without GPUs


class EmbedConfig(Section):
    batch_size: OrAuto
    max_seq_length: Integer
    precision: Precision = "fp32"  # params `precision`


class IdcConfig(Section):
    method: choice(("partition", "kmeans")) = "partition"
    k: Integer
    kmeans_clusters: Integer
    first_round_model: Text = "current"  # "current" or a model name / folder
    block_rows: Integer = 4096  # rows of one similarity block: bounds IDC's memory, not its result


class TrainingConfig(Section):  # one contrastive training run: the rounds and few-shot fine-tuning share it
    batch_size: Annotated[int, integer(2)]
    learning_rate: Positive
    warmup_ratio: Annotated[float, number(0.0, 1.0, high_open=True)]
    temperature: Positive
    max_seq_length: Integer
    epochs: Integer
    devices: Integer = 1
    sampler: choice(("greedy", "spread")) = "greedy"  # how document-disjoint batches are filled
    precision: Precision = "fp32"  # params `precision` (checked against the device by the stage)


class TrainConfig(TrainingConfig):
    launcher: Text = "python"  # the train stage's command: python, or torchrun for `devices` > 1


class EvaluateConfig(Section):
    metric: choice(METRICS)
    batch_size: OrAuto
    max_seq_length: Integer
    precision: Precision = "fp32"  # params `precision`


class FinetuneConfig(TrainingConfig):
    devices: Annotated[int, rule("1 (fine-tuning runs in one process)", lambda value: check(value == 1, value))] = 1
    labels: OrAll  # None: all
    source: choice(("fewshot", "file")) = "fewshot"
    path: Text = "corpus"


class LoopConfig(Section):
    patience: Integer
    max_iterations: Annotated[int | None, integer(0, or_word="all")]  # None: all
    validate_on: choice(tuple(VALIDATION_SETS)) = "val"


class PlusPlusConfig(Section):  # rounds: round -> the fine-tuned model it starts from
    patience: Integer
    max_rounds: Integer
    rounds: Annotated[dict[int, str], chain(2, lambda r: "best" if r == 2 else f"round-{r - 1}", True, False)] = {}


class ReportConfig(Section):
    bootstrap_samples: Integer


class Config(Section):
    seed_model: Text
    device: Device = "auto"
    precision: Precision = "fp32"  # what every stage encodes and trains in (infocse.models.check_precision)
    seed: Annotated[int, integer(0)]
    corpus: CorpusConfig
    split: Split
    init: InitConfig = InitConfig()
    baselines: BaselineOptions
    budget: Budget
    engine: EngineConfig = EngineConfig()
    embed: EmbedConfig
    idc: IdcConfig
    train: TrainConfig
    evaluate: EvaluateConfig
    finetune: FinetuneConfig
    plusplus: PlusPlusConfig
    report: ReportConfig
    loop: LoopConfig
    iterations: Annotated[list[int], chain(1, lambda t: t - 1, False, True)]  # 1..T


def parse_config(raw: dict) -> Config:
    """Check every param; raise one StageError listing each bad value on its own line."""
    if not isinstance(raw, dict):
        raise StageError(f"params must be a mapping, got {type(raw).__name__}")
    raw = copy.deepcopy(raw)
    problems = old_params(raw, PRECISION_SECTIONS)
    precision = raw.get("precision", "fp32")
    for section in PRECISION_SECTIONS:
        if isinstance(raw.get(section), dict):
            raw[section]["precision"] = precision if precision in PRECISIONS else "fp32"
    try:
        config = Config.model_validate(raw)
    except ValidationError as error:
        raise StageError("\n".join(problems + [refusal(item) for item in error.errors()])) from None
    if abs(sum(config.split.model_dump().values()) - 1.0) > 1e-6:
        problems.append(f"params `split` fractions must sum to 1, got {config.split.model_dump()}")
    if config.train.batch_size % config.train.devices:  # (fine-tuning runs on one device)
        problems.append(f"params `train.batch_size` ({config.train.batch_size}) must be a multiple of `train.devices` "
                        f"({config.train.devices}): it is the global batch, and each device takes an equal share of it")
    if problems:
        raise StageError("\n".join(problems))
    return config


def load_config(path: Path | str = PARAMS_FILE) -> Config:
    path = Path(path)
    if not path.exists():
        raise StageError(f"{path} not found: run stages from the repository root")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as error:
        raise StageError(f"{path} is not valid YAML: {' '.join(str(error).split())}") from error
    return parse_config(raw)

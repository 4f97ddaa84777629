"""params.yaml -> typed, validated settings. Every param is checked here, once, before any work.

`load_config` reads the file and `parse_config` checks the whole mapping: each bad value is one
line (its dotted name, what it must be, what it is), and all of them are reported together, so a
stage never loads a model before finding a typo. A new param is added to a dataclass below and
read in `parse_config`; nothing else in the package reads the raw mapping.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from infocse.errors import StageError
from infocse.methods import METHODS

PARAMS_FILE = Path("params.yaml")

CORPUS_SOURCES = ("bbc", "manpages", "jsonl", "parquet", "txt")
MIX_ORDERS = ("interleaved", "concatenated")
IDC_METHODS = ("partition", "kmeans")
ENGINES = ("local", "ray")
METRICS = ("recall@1", "recall@5", "recall@10", "mrr@10", "ndcg@10")
FINETUNE_SOURCES = ("fewshot", "file")
# What the unsupervised loop validates on (params `loop.validate_on`): the titles of these splits.
# Never test; fine-tuning and InfoCSE++ validate on val alone, as they train on the few-shot pool.
VALIDATION_SETS = {"val": ("val",), "fewshot+val": ("fewshot", "val")}
VALIDATION_QUERIES = {"val": "val queries", "fewshot+val": "few-shot pool + val queries"}
SPLITS = ("fewshot", "val", "test")
PRECISIONS = ("fp32", "bf16", "fp16")
SECTION_PRECISIONS = ("embed", "train", "evaluate", "finetune")  # where older params.yaml files set it
RENAMED_PARAMS = {"annotators": "baselines", "idc.first_round_annotator": "idc.first_round_model"}  # old: new
DEVICE_PATTERN = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")
SAMPLERS = ("greedy", "spread")


@dataclass(frozen=True)
class CorpusConfig:
    source: str
    path: str
    title_first_line: bool
    manpages_root: str
    max_documents: int | None  # None: all
    mix_sources: int  # source documents per training document; 1: no mixing
    mix_order: str  # interleaved | concatenated (infocse/corpora/mix.py)


@dataclass(frozen=True)
class BaselineOptions:
    mirror_span_chars: int
    text_cutoff_rate: float
    ict_context_sentences: int
    ict_remove_probability: float
    ict_max_seq_length: int
    neighbour_window: int


@dataclass(frozen=True)
class Budget:
    """Training pairs per round, shared by IDC and every baseline (None: no cap)."""

    max_pairs_per_document: int | None
    max_pairs: int | None


@dataclass(frozen=True)
class EngineConfig:
    name: str
    address: str | None
    partition_sentences: int
    actors: int | None  # None: one per GPU, or 1 without GPUs


@dataclass(frozen=True)
class EmbedConfig:
    batch_size: int | None  # None: auto (by device: infocse.models.encode_batch_size)
    max_seq_length: int
    precision: str  # params `precision`


@dataclass(frozen=True)
class IdcConfig:
    method: str
    k: int
    kmeans_clusters: int
    first_round_model: str  # "current" or a model name / folder
    block_rows: int  # rows of one similarity block: bounds IDC's memory, not its result


@dataclass(frozen=True)
class TrainingConfig:
    """One contrastive training run: the self-supervised rounds and few-shot fine-tuning share it."""

    batch_size: int
    learning_rate: float
    warmup_ratio: float
    temperature: float
    max_seq_length: int
    epochs: int
    devices: int
    sampler: str  # greedy | spread: how document-disjoint batches are filled
    precision: str  # params `precision`: fp32 | bf16 | fp16 (checked against the device by the stage)
    launcher: str  # the command dvc.yaml runs the train stage with: python, or torchrun for `devices` > 1


@dataclass(frozen=True)
class EvaluateConfig:
    metric: str
    batch_size: int | None  # None: auto, as embed.batch_size
    max_seq_length: int
    precision: str  # params `precision`


@dataclass(frozen=True)
class FinetuneConfig:
    labels: int | None  # None: all
    source: str
    path: str
    training: TrainingConfig


@dataclass(frozen=True)
class LoopConfig:
    patience: int
    max_iterations: int | None  # None: all
    validate_on: str = "val"  # a key of VALIDATION_SETS: the titled splits whose queries stop and select the loop


@dataclass(frozen=True)
class PlusPlusConfig:
    patience: int
    max_rounds: int
    rounds: dict[int, str]  # round -> the fine-tuned model it starts from


@dataclass(frozen=True)
class Config:
    seed_model: str
    device: str
    precision: str  # fp32 | bf16 | fp16: what every stage encodes and trains in (infocse.models.check_precision)
    seed: int
    corpus: CorpusConfig
    split: dict[str, float]
    init_method: str
    baselines: BaselineOptions
    budget: Budget
    engine: EngineConfig
    embed: EmbedConfig
    idc: IdcConfig
    train: TrainingConfig
    evaluate: EvaluateConfig
    finetune: FinetuneConfig
    plusplus: PlusPlusConfig
    bootstrap_samples: int
    loop: LoopConfig
    iterations: list[int]  # 1..T


_MISSING = object()  # no default: the param is required
_ABSENT = object()  # a required param that is not there (already reported)


class _Reader:
    """Reads dotted params and collects one line per bad value."""

    def __init__(self, raw: dict):
        self.raw = raw
        self.problems: list[str] = []
        self.asked: set[str] = set()  # every dotted name read: what is left over is unknown
        self.whole: set[str] = set()  # mappings read as a whole (the numbered chains)

    def value(self, dotted: str, default=_MISSING):
        self.asked.add(dotted)
        node = self.raw
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                if default is _MISSING:
                    self.problems.append(f"params `{dotted}` is missing")
                    return _ABSENT
                return default
            node = node[part]
        return node

    def bad(self, dotted: str, wanted: str, value) -> None:
        self.problems.append(f"params `{dotted}` must be {wanted}, got {value!r} ({type(value).__name__})")

    def integer(self, dotted: str, minimum: int = 1, allow_all: bool = False, default=_MISSING) -> int | None:
        value = self.value(dotted, default)
        if allow_all and value in ("all", None):
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            if value is not _ABSENT:
                self.bad(dotted, f'an integer >= {minimum}' + (' or "all"' if allow_all else ""), value)
            return minimum
        return value

    def number(self, dotted: str, low: float, high: float, low_open: bool = False, high_open: bool = False,
               default=_MISSING) -> float:
        """A float in a range; a numeric string is accepted (YAML reads `5e-5` as one)."""
        value = self.value(dotted, default)
        number = None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
        elif isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                number = None
        ok = number is not None and math.isfinite(number) and \
            (number > low if low_open else number >= low) and (number < high if high_open else number <= high)
        if not ok:
            if value is not _ABSENT:
                wanted = f"a number in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
                self.bad(dotted, wanted.replace("inf]", "inf)"), value)
            return max(low, 0.0) + (1.0 if low_open else 0.0)
        return number

    def choice(self, dotted: str, choices: tuple[str, ...], default=_MISSING) -> str:
        value = self.value(dotted, default)
        if value not in choices:
            if value is not _ABSENT:
                self.bad(dotted, f"one of {list(choices)}", value)
            return choices[0]
        return value

    def text(self, dotted: str, default=_MISSING, allow_null: bool = False) -> str | None:
        value = self.value(dotted, default)
        if value is None and allow_null:
            return None
        if not isinstance(value, str) or not value:
            if value is not _ABSENT:
                self.bad(dotted, "a non-empty string" + (" or null" if allow_null else ""), value)
            return ""
        return value

    def unknown(self) -> list[str]:
        """Dotted names in params that no reader asked for: a typo or a param this code does not
        know would otherwise be ignored without a word."""
        asked_sections = {name.rsplit(".", i)[0] for name in self.asked for i in range(1, name.count(".") + 1)}

        def walk(node: dict, prefix: str) -> list[str]:
            found = []
            for key, value in node.items():
                dotted = f"{prefix}{key}"
                if dotted in self.whole:
                    continue
                if isinstance(value, dict) and value and dotted in asked_sections:
                    found.extend(walk(value, f"{dotted}."))
                elif dotted not in self.asked and dotted not in asked_sections:
                    found.append(dotted)
            return found

        return walk(self.raw, "")

    def flag(self, dotted: str, default=_MISSING) -> bool:
        value = self.value(dotted, default)
        if not isinstance(value, bool):
            self.bad(dotted, "true or false", value)
            return bool(default) if default is not _MISSING else False
        return value

    def chain(self, dotted: str, first: int, expected_prev, allow_empty: bool) -> dict[int, str | int]:
        """A mapping {n: {prev: ...}} numbered first..N whose each `prev` is `expected_prev(n)`:
        DVC templates have no arithmetic, so each item names its predecessor."""
        raw = self.value(dotted, {} if allow_empty else _MISSING)
        self.whole.add(dotted)
        if raw is None or raw is _ABSENT:
            return {}
        if not isinstance(raw, dict):
            self.bad(dotted, "a mapping of numbered items", raw)
            return {}
        try:
            numbers = sorted(int(key) for key in raw)
        except (TypeError, ValueError):
            self.bad(dotted, "numbered items", sorted(map(str, raw)))
            return {}
        if not numbers and not allow_empty:
            self.problems.append(f"params `{dotted}` is empty: InfoCSE needs at least one iteration")
        if numbers != list(range(first, first + len(numbers))):
            self.problems.append(f"params `{dotted}` must be numbered {first}..N, got {numbers}")
            return {}
        chain = {}
        for number in numbers:
            item = raw.get(str(number), raw.get(number)) or {}
            prev = item.get("prev") if isinstance(item, dict) else None
            if prev != expected_prev(number):
                self.problems.append(f"params `{dotted}.{number}.prev` must be {expected_prev(number)!r}, got {prev!r}")
            chain[number] = prev
        return chain


def _encode_batch_size(read: _Reader, dotted: str) -> int | None:
    """An encoding batch size: a number, or "auto" (None), which picks one by device at run time."""
    value = read.value(dotted)
    if value is _ABSENT or value == "auto":
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        read.bad(dotted, 'an integer >= 1 or "auto"', value)
        return None
    return value


def _training(read: _Reader, section: str, precision: str) -> TrainingConfig:
    batch_size = read.integer(f"{section}.batch_size", minimum=2)
    devices = read.integer(f"{section}.devices", default=1)
    if batch_size % devices:
        read.problems.append(f"params `{section}.batch_size` ({batch_size}) must be a multiple of `{section}.devices` "
                             f"({devices}): it is the global batch, and each device takes an equal share of it")
    return TrainingConfig(
        batch_size=batch_size,
        learning_rate=read.number(f"{section}.learning_rate", 0.0, math.inf, low_open=True),
        warmup_ratio=read.number(f"{section}.warmup_ratio", 0.0, 1.0, high_open=True),
        temperature=read.number(f"{section}.temperature", 0.0, math.inf, low_open=True),
        max_seq_length=read.integer(f"{section}.max_seq_length"),
        epochs=read.integer(f"{section}.epochs"),
        devices=devices,
        sampler=read.choice(f"{section}.sampler", SAMPLERS, default="greedy"),
        precision=precision,
        launcher=read.text(f"{section}.launcher", default="python"),
    )


def parse_config(raw: dict) -> Config:
    """Check every param; raise one StageError listing each bad value on its own line."""
    if not isinstance(raw, dict):
        raise StageError(f"params must be a mapping, got {type(raw).__name__}")
    read = _Reader(raw)
    seed_model = read.text("seed_model")
    device = read.value("device", "auto")
    if not isinstance(device, str) or not DEVICE_PATTERN.match(device):
        read.bad("device", "auto, cpu, cuda or cuda:N", device)
        device = "cpu"
    precision = read.choice("precision", PRECISIONS, default="fp32")
    for section in SECTION_PRECISIONS:  # one value for every stage now, and no `auto` that differs by machine
        old = read.value(f"{section}.precision", None)
        if old is not None:
            read.problems.append(f"params `{section}.precision` ({old!r}) is now the one top-level `precision` that "
                                 "every stage reads: fp32 (default), bf16 or fp16")
    seed = read.integer("seed", minimum=0)
    for old_name, new_name in RENAMED_PARAMS.items():  # one line each, not one per key the new name lacks
        old = read.value(old_name, None)
        if old is not None:
            read.problems.append(f"params `{old_name}` is now `{new_name}`: rename it (docs/parameters.md)")
            *parents, last = new_name.split(".")
            node = read.raw
            for part in parents:
                node = node.setdefault(part, {})
            node.setdefault(last, old)

    corpus = CorpusConfig(
        source=read.choice("corpus.source", CORPUS_SOURCES),
        path=read.text("corpus.path", default="corpus"),
        title_first_line=read.flag("corpus.title_first_line", default=True),
        manpages_root=read.text("corpus.manpages_root", default="auto"),
        max_documents=read.integer("corpus.max_documents", allow_all=True, default="all"),
        mix_sources=read.integer("corpus.mix.sources", default=1),
        mix_order=read.choice("corpus.mix.order", MIX_ORDERS, default="interleaved"),
    )
    split = {name: read.number(f"split.{name}", 0.0, 1.0) for name in SPLITS}
    if not read.problems and abs(sum(split.values()) - 1.0) > 1e-6:
        read.problems.append(f"params `split` fractions must sum to 1, got {split}")

    init_method = read.choice("init.method", tuple(METHODS), default="none")
    baselines = BaselineOptions(
        mirror_span_chars=read.integer("baselines.mirror_span_chars"),
        text_cutoff_rate=read.number("baselines.text_cutoff_rate", 0.0, 1.0),
        ict_context_sentences=read.integer("baselines.ict_context_sentences"),
        ict_remove_probability=read.number("baselines.ict_remove_probability", 0.0, 1.0),
        ict_max_seq_length=read.integer("baselines.ict_max_seq_length"),
        neighbour_window=read.integer("baselines.neighbour_window"),
    )
    budget = Budget(read.integer("budget.max_pairs_per_document", allow_all=True),
                    read.integer("budget.max_pairs", allow_all=True))

    if not isinstance(read.value("engine", {}), dict):
        read.bad("engine", "a mapping", read.value("engine"))
        engine = EngineConfig("local", None, 50000, None)
    else:
        actors = read.value("engine.actors", "auto")
        if actors != "auto" and (isinstance(actors, bool) or not isinstance(actors, int) or actors < 1):
            read.bad("engine.actors", '"auto" or an integer >= 1', actors)
            actors = "auto"
        engine = EngineConfig(
            name=read.choice("engine.name", ENGINES, default="local"),
            address=read.text("engine.address", default=None, allow_null=True),
            partition_sentences=read.integer("engine.partition_sentences", default=50000),
            actors=None if actors == "auto" else actors,
        )
    embed = EmbedConfig(_encode_batch_size(read, "embed.batch_size"), read.integer("embed.max_seq_length"), precision)
    idc = IdcConfig(
        method=read.choice("idc.method", IDC_METHODS, default="partition"),
        k=read.integer("idc.k"),
        kmeans_clusters=read.integer("idc.kmeans_clusters"),
        first_round_model=read.text("idc.first_round_model", default="current"),
        block_rows=read.integer("idc.block_rows", default=4096),
    )
    train = _training(read, "train", precision)
    evaluate = EvaluateConfig(read.choice("evaluate.metric", METRICS), _encode_batch_size(read, "evaluate.batch_size"),
                              read.integer("evaluate.max_seq_length"), precision)
    finetune = FinetuneConfig(
        labels=read.integer("finetune.labels", allow_all=True),
        source=read.choice("finetune.source", FINETUNE_SOURCES, default="fewshot"),
        path=read.text("finetune.path", default="corpus"),
        training=_training(read, "finetune", precision),
    )
    plusplus = PlusPlusConfig(
        patience=read.integer("plusplus.patience"),
        max_rounds=read.integer("plusplus.max_rounds"),
        rounds=read.chain("plusplus.rounds", 2, lambda r: "best" if r == 2 else f"round-{r - 1}", allow_empty=True),
    )
    bootstrap_samples = read.integer("report.bootstrap_samples")
    loop = LoopConfig(read.integer("loop.patience"), read.integer("loop.max_iterations", minimum=0, allow_all=True),
                      read.choice("loop.validate_on", tuple(VALIDATION_SETS), default="val"))
    iterations = sorted(read.chain("iterations", 1, lambda t: t - 1, allow_empty=False))
    read.problems.extend(f"params `{name}` is not a known param (a typo? see params.yaml for the names)"
                         for name in read.unknown())
    if read.problems:
        raise StageError("\n".join(read.problems))
    return Config(seed_model=seed_model, device=device, precision=precision, seed=seed, corpus=corpus, split=split,
                  init_method=init_method, baselines=baselines, budget=budget, engine=engine, embed=embed, idc=idc, train=train,
                  evaluate=evaluate, finetune=finetune, plusplus=plusplus, bootstrap_samples=bootstrap_samples,
                  loop=loop, iterations=iterations)


def load_config(path: Path | str = PARAMS_FILE) -> Config:
    path = Path(path)
    if not path.exists():
        raise StageError(f"{path} not found: run stages from the repository root")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as error:
        raise StageError(f"{path} is not valid YAML: {' '.join(str(error).split())}") from error
    return parse_config(raw)

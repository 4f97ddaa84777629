"""Shared fixtures: a tiny sentence-transformers model built from scratch, and a handful of documents."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
import yaml
from pipeline_helpers import deep_merge

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]

# Six topics, two documents each; sentences of one document share a topic, titles name it.
TOPICS = {
    "football": ["The striker scored a late goal.", "The keeper saved a penalty kick.", "Fans cheered the winning team.",
                 "The coach praised the defence.", "The league table changed after the match."],
    "cooking": ["The chef chopped fresh onions.", "Garlic was fried in olive oil.", "The soup simmered for an hour.",
                "Bread was baked in a hot oven.", "The recipe needs fresh herbs."],
    "weather": ["Heavy rain fell across the valley.", "Strong winds knocked down trees.", "The storm moved east overnight.",
                "Snow is expected on the hills.", "Forecasters warned of floods."],
    "markets": ["Shares fell sharply on Monday.", "The bank raised interest rates.", "Investors sold government bonds.",
                "The currency lost value against the dollar.", "Profits at the firm doubled."],
    "space": ["The rocket launched from the coast.", "Astronauts docked with the station.", "The probe sent images of Mars.",
              "A telescope spotted a distant galaxy.", "The satellite entered orbit."],
    "music": ["The band released a new album.", "The singer toured across Europe.", "Fans queued for concert tickets.",
              "The orchestra played a symphony.", "The guitarist wrote a ballad."],
}


def repo_params() -> dict:
    """A fresh copy of the repository's params.yaml, as a raw mapping."""
    return yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))


# The files that run the pipeline for real hold most of the suite's time in few tests. pytest-xdist
# hands files out in collection order (scripts/test.sh turns off its reordering by test count, which
# put them last): longest first, none of them is left as one worker's tail while the other idles.
SLOWEST_FIRST = ("test_pipeline.py", "test_bad_inputs.py", "test_pipeline_reruns.py", "test_ci_pipeline.py",
                 "test_real_smoke.py", "test_ray_engine.py", "test_study_plan.py", "test_distributed_train.py")


def pytest_collection_modifyitems(items: list) -> None:
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file keeps its order


def config_with(overrides: dict):
    """A validated Config: params.yaml deep-merged with `overrides` (numbered chains replaced whole)."""
    from infocse.config import parse_config

    return parse_config(deep_merge(repo_params(), overrides))


def tiny_documents() -> list[dict]:
    """Twelve small documents (id, title, text, category) with topical sentences."""
    documents = []
    for topic, sentences in TOPICS.items():
        for part in range(2):
            order = sentences[part:] + sentences[:part]
            documents.append({"id": f"{topic}-{part}", "title": f"News about {topic} number {part}",
                              "text": " ".join(order[: 4 + part]), "category": topic})
    return documents


def build_tiny_model(path: Path, seed: int = 0) -> Path:
    """A 2-layer BERT (hidden 32) with a word-level vocabulary of the tiny corpus, mean pooling."""
    import torch
    from sentence_transformers import SentenceTransformer, models
    from transformers import BertConfig, BertModel, BertTokenizerFast

    words = sorted({w for d in tiny_documents() for w in re.findall(r"\w+|[^\w\s]", (d["title"] + " " + d["text"]).lower())})
    hf_dir = path / "hf"
    hf_dir.mkdir(parents=True)
    (hf_dir / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
    BertTokenizerFast(vocab=str(hf_dir / "vocab.txt"), do_lower_case=True).save_pretrained(hf_dir)
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(words) + 5, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128)
    BertModel(config).save_pretrained(hf_dir)
    transformer = models.Transformer(str(hf_dir), max_seq_length=64)
    pooling = models.Pooling(transformer.get_word_embedding_dimension(), pooling_mode="mean")
    model = SentenceTransformer(modules=[transformer, pooling], device="cpu")
    model_dir = path / "model"
    model.save(str(model_dir), create_model_card=False)
    return model_dir


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture()
def one_torch_thread():
    """Tiny models on a small shared CPU: torch's intra-op threads would spin and a step take seconds."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture()
def tiny_corpus_jsonl(tmp_path) -> Path:
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in tiny_documents()), encoding="utf-8")
    return path


# ---------------------------------------------------------------- the tiny end-to-end project
def build_project(root: Path, model_dir: Path) -> tuple[Path, list[str]]:
    """The tiny project after one full `dvc repro`, with its corpus and labels beside it in `root`."""
    from pipeline_helpers import make_project, repro
    from pipeline_project import tiny_overrides

    corpus = root / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in tiny_documents()))
    labels = root / "labels.jsonl"
    labels.write_text("".join(json.dumps({"query": f"about {d['category']}", "positive": d["text"]}) + "\n"
                              for d in tiny_documents()[::2]))
    project = make_project(root / "project", tiny_overrides(model_dir, corpus, labels))
    ran, _ = repro(project)
    return project, ran


@pytest.fixture(scope="session")
def built_project(tmp_path_factory, worker_id) -> tuple[Path, list[str]]:
    """One full tiny run per test session, shared by the pytest-xdist workers (the first to need it
    builds it under a lock; the others wait for it), and a copy of it per worker: tests read that,
    or copy it (`project`) and change one thing; never change it in place."""
    if worker_id == "master":  # no workers: build it here
        root = tmp_path_factory.mktemp("pipeline")
        return build_project(root, build_tiny_model(root / "model"))
    from filelock import FileLock

    shared = tmp_path_factory.getbasetemp().parent / "built-pipeline"  # the workers' common folder, this session's
    with FileLock(f"{shared}.lock"):
        if not (shared / "ran.json").exists():
            shutil.rmtree(shared, ignore_errors=True)  # a build that failed in another worker: fail here too, on its error
            shared.mkdir()
            _, ran = build_project(shared, build_tiny_model(shared / "model"))
            (shared / "ran.json").write_text(json.dumps(ran))
    copy = tmp_path_factory.mktemp("pipeline") / "project"
    shutil.copytree(shared / "project", copy, symlinks=True)
    return copy, json.loads((shared / "ran.json").read_text())


@pytest.fixture()
def project(built_project, tmp_path) -> Path:
    copy = tmp_path / "project"
    shutil.copytree(built_project[0], copy, symlinks=True)
    return copy

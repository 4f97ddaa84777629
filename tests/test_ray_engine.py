"""The `ray` engine (infocse/engines/ray.py, ray_embed.py, ray_cluster.py): the same embeddings and
the same pair table as the local engine, partitions of whole documents, Ray's retries of a killed
task, and clear errors.
Its params (`engine.*`) are checked with all other params (tests/test_config.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import REPO, config_with, repo_params, tiny_documents
from pipeline_helpers import deep_merge

from infocse.config import Config
from infocse.corpora.sentences import build_sentence_table
from infocse.embedding import embed_sentences
from infocse.engines.ray import import_ray, plan_partitions, read_rows, sentence_document_codes, take_rows
from infocse.engines.ray_cluster import cluster_with_ray, mine_partition
from infocse.engines.ray_embed import SentenceEncoder
from infocse.errors import StageError
from infocse.idc import cluster_sentences
from infocse.io import save_numpy
from infocse.models import load_model

CAPPED = {"max_pairs_per_document": 3, "max_pairs": 15}
UNCAPPED = {"max_pairs_per_document": "all", "max_pairs": "all"}


def stage_overrides(k: int = 1, method: str = "partition", budget: dict = CAPPED, partition_sentences: int = 10,
                    actors: int | str = 1) -> dict:
    return {"seed": 0, "device": "cpu", "embed": {"batch_size": 8, "max_seq_length": 64},
            "idc": {"method": method, "k": k, "kmeans_clusters": 3}, "budget": budget,
            "engine": {"name": "ray", "address": None, "partition_sentences": partition_sentences, "actors": actors}}


def stage_config(**overrides) -> Config:
    return config_with(stage_overrides(**overrides))


@pytest.fixture(scope="module")
def ray_cluster():
    """One local Ray of 2 CPUs for the module; this module's classes travel to workers by value."""
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, tiny_model_dir) -> dict[str, Path]:
    """The tiny documents' sentence table (small row groups, so partitions span them) and the local
    engine's embeddings of it."""
    folder = tmp_path_factory.mktemp("ray-corpus")
    documents = pd.DataFrame(tiny_documents()).rename(columns={"id": "doc_id", "text": "body"})
    sentences, _ = build_sentence_table(documents)
    sentences.to_parquet(folder / "sentences.parquet", index=False, row_group_size=7)
    model = load_model(tiny_model_dir, "cpu", 64)
    embeddings = embed_sentences(model, sentences["text"].tolist(), 8, show_progress_bar=False)
    save_numpy(embeddings, folder / "embeddings.npy")
    return {"sentences": folder / "sentences.parquet", "embeddings": folder / "embeddings.npy"}


def local_pairs(config: Config, corpus: dict[str, Path]) -> tuple[pd.DataFrame, dict]:
    return cluster_sentences(config.idc, config.budget, config.seed, pd.read_parquet(corpus["sentences"]),
                             np.load(corpus["embeddings"]))


def assert_same_as_local(config: Config, corpus: dict[str, Path], ray_result: tuple[pd.DataFrame, dict]) -> None:
    expected_pairs, expected_stats = local_pairs(config, corpus)
    pairs, stats = ray_result
    assert len(expected_pairs) > 0
    pd.testing.assert_frame_equal(pairs, expected_pairs)
    def without_timing(values: dict) -> dict:
        return {k: v for k, v in values.items() if k not in ("idc_seconds", "partitions")}

    assert without_timing(stats) == without_timing(expected_stats)


# ---------------------------------------------------------------- errors (no Ray needed)
def test_missing_ray_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # makes `import ray` fail
    with pytest.raises(StageError, match=r'engine `ray` needs `pip install "ray\[data\]==2\.60\.0"`'):
        import_ray()


def test_local_engine_never_imports_ray():
    """The local stages import neither Ray nor the engine module (`import ray` would fail here)."""
    code = ("import sys; sys.modules['ray'] = None\n"
            "import stages.embed, stages.cluster\n"
            "from infocse.config import load_config\n"
            "assert load_config().engine.name == 'local'\n"
            "assert not [name for name in sys.modules if name.startswith('infocse.engines.ray')]")
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=120)


def test_kmeans_is_refused_on_ray(corpus):
    with pytest.raises(StageError, match="`idc.method: kmeans`.*local engine only"):
        cluster_with_ray(stage_config(method="kmeans"), corpus["embeddings"], corpus["sentences"])


# ---------------------------------------------------------------- partitions
def test_partitions_are_whole_documents(corpus):
    doc_codes = sentence_document_codes(corpus["sentences"])
    for size in (1, 4, 10, 1000):
        bounds = plan_partitions(doc_codes, size)
        assert bounds[0] == 0 and bounds[-1] == len(doc_codes) and np.all(np.diff(bounds) > 0)
        cuts = bounds[1:-1]
        assert np.all(doc_codes[cuts - 1] != doc_codes[cuts])  # no document spans a cut
        for start, stop in zip(bounds[:-1], bounds[1:]):  # bigger than `size` only when one document is
            assert stop - start <= size or len(np.unique(doc_codes[start:stop])) == 1
    assert len(plan_partitions(doc_codes, 10)) - 1 >= 5


def test_read_rows_and_take_rows_match_pandas(corpus):
    table = pd.read_parquet(corpus["sentences"])
    for start, stop in ((0, 3), (5, 19), (13, 14), (0, len(table))):
        assert read_rows(corpus["sentences"], start, stop, ["text"]).column("text").to_pylist() == \
            table["text"].iloc[start:stop].tolist()
    rows = np.array([0, 6, 7, 20, len(table) - 1])
    pd.testing.assert_frame_equal(take_rows(corpus["sentences"], rows, ["sentence_id", "text"]),
                                  table[["sentence_id", "text"]].iloc[rows].reset_index(drop=True))


# ---------------------------------------------------------------- the engine against the local one
def test_embed_and_cluster_stages_on_ray_match_local(ray_cluster, corpus, tiny_model_dir, tmp_path, monkeypatch):
    """The stages' main() dispatch on `engine.name`: embeddings within 1e-5 of the local engine's
    (a pool of two actors, results in any order), then the same pairs.parquet from both engines."""
    import yaml

    from stages import cluster, embed

    (tmp_path / "data/corpus").mkdir(parents=True)
    (tmp_path / "data/corpus/sentences.parquet").write_bytes(corpus["sentences"].read_bytes())
    (tmp_path / "data/state").mkdir(parents=True)
    (tmp_path / "data/state/after-iter-0.json").write_text('{"continue": true}')
    (tmp_path / "models/iterations").mkdir(parents=True)
    (tmp_path / "models/iterations/iter-0").symlink_to(tiny_model_dir)
    params = deep_merge(repo_params(), {**stage_overrides(actors=2), "iterations": {"1": {"prev": 0}}})
    params["precision"] = "fp32"  # exact comparison: the default, stated
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["stage", "--iteration", "1"])

    embed.main()
    embeddings, expected = np.load("data/iterations/iter-1/embeddings.npy"), np.load(corpus["embeddings"])
    assert embeddings.dtype == np.float32 and embeddings.shape == expected.shape
    np.testing.assert_allclose(embeddings, expected, atol=1e-5, rtol=0)
    assert not list(Path("data/iterations/iter-1").glob(".*"))  # the atomic write left nothing behind
    assert json.loads(Path("metrics/iterations/iter-1/embed.json").read_text())["precision"] == "fp32"
    cluster.main()
    on_ray = pd.read_parquet("data/iterations/iter-1/pairs.parquet")
    assert json.loads(Path("metrics/iterations/iter-1/pairs.json").read_text())["partitions"] >= 5

    params["engine"]["name"] = "local"  # the same embeddings file, clustered locally
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    cluster.main()
    pd.testing.assert_frame_equal(on_ray, pd.read_parquet("data/iterations/iter-1/pairs.parquet"))
    assert len(on_ray) > 0


def test_each_actor_reports_the_precision_it_encoded_in(corpus, tiny_model_dir, monkeypatch):
    """The embed stage records what the actors ran in: their device can differ from the driver's.
    bf16 on any CPU here (emulated where it has no bf16 units: the tiny model does not mind), so the
    test does not depend on the machine's CPU."""
    import torch

    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True)
    encoder = SentenceEncoder(str(tiny_model_dir), "cpu", 64, 8, str(corpus["sentences"]), precision="bf16")
    batch = encoder({"start": np.array([0, 5]), "stop": np.array([3, 7])})
    assert batch["row"].tolist() == [0, 1, 2, 5, 6]
    assert batch["precision"].tolist() == ["bf16"] * 5


@pytest.mark.parametrize("k, budget", [(1, CAPPED), (2, UNCAPPED)])
def test_ray_cluster_matches_local(ray_cluster, corpus, k, budget):
    config = stage_config(k=k, budget=budget)
    assert_same_as_local(config, corpus, cluster_with_ray(config, corpus["embeddings"], corpus["sentences"]))


def test_ray_cluster_labels_match_local_on_many_documents(ray_cluster, tmp_path):
    """Random documents of 1 to 12 sentences: component numbers, offset per partition, equal the
    numbers of one connected-components call over the whole corpus."""
    rng = np.random.default_rng(0)
    sizes = rng.integers(1, 13, 150)
    doc_ids = np.repeat([f"doc-{i:03d}" for i in range(len(sizes))], sizes)
    sentences = pd.DataFrame({"sentence_id": np.arange(len(doc_ids), dtype=np.int64), "doc_id": doc_ids,
                              "position": np.concatenate([np.arange(s) for s in sizes]).astype(np.int32),
                              "text": [f"sentence {i}" for i in range(len(doc_ids))]})
    vectors = rng.normal(size=(len(doc_ids), 8)).astype(np.float32)
    corpus = {"sentences": tmp_path / "sentences.parquet", "embeddings": tmp_path / "embeddings.npy"}
    sentences.to_parquet(corpus["sentences"], index=False)
    save_numpy(vectors / np.linalg.norm(vectors, axis=1, keepdims=True), corpus["embeddings"])
    config = stage_config(k=2, budget=UNCAPPED, partition_sentences=40)
    assert_same_as_local(config, corpus, cluster_with_ray(config, corpus["embeddings"], corpus["sentences"]))


class FailFirstAttempt:
    """The per-partition miner, except that its very first call dies (the worker process exits, or
    it raises); a marker file remembers that across worker processes."""

    def __init__(self, marker: Path, how: str):
        self.marker, self.how = str(marker), how

    def __call__(self, batch, **kwargs):
        if not os.path.exists(self.marker):
            Path(self.marker).write_text("failed once\n")
            if self.how == "exit":
                os._exit(1)
            raise OSError("injected failure")
        return mine_partition(batch, **kwargs)


@pytest.mark.parametrize("how", ["exit", "raise"])
def test_a_failed_task_is_retried_without_lost_or_duplicated_pairs(ray_cluster, corpus, tmp_path, how):
    marker = tmp_path / "failed"
    config = stage_config(budget=UNCAPPED)
    result = cluster_with_ray(config, corpus["embeddings"], corpus["sentences"], miner=FailFirstAttempt(marker, how))
    assert marker.exists()  # the failure did happen
    assert_same_as_local(config, corpus, result)
    assert not result[0].duplicated(["sentence_a", "sentence_b"]).any()

"""Tiny end-to-end `dvc repro` (tiny model built in the test, twelve documents): the chain runs,
metrics land, caching reruns only what changed, outputs are byte-identical, bad params fail clearly."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from pipeline_helpers import locked_outputs, make_project, read_params, repro, run, update_params

ITERATION_STAGES = ["embed@{t}", "cluster@{t}", "train@{t}", "evaluate@{t}"]
MAIN_STAGES = ["prepare", "init", "annotator_model", "evaluate_init", *[s.format(t=1) for s in ITERATION_STAGES], "select", "report"]
FEWSHOT_STAGES = ["labels", "finetune@f0", "finetune@best", "plusplus@2", "plusplus@3", "select_plusplus"]
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


@pytest.fixture(scope="module")
def built_project(tmp_path_factory, tiny_model_dir) -> tuple[Path, list[str]]:
    """One full tiny run; tests copy it and change one thing."""
    from conftest import tiny_documents

    root = tmp_path_factory.mktemp("pipeline")
    corpus = root / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in tiny_documents()))
    labels = root / "labels.jsonl"
    labels.write_text("".join(json.dumps({"query": f"about {d['category']}", "positive": d["text"]}) + "\n"
                              for d in tiny_documents()[::2]))
    project = make_project(root / "project", tiny_overrides(tiny_model_dir, corpus, labels))
    ran, _ = repro(project)
    return project, ran


@pytest.fixture()
def project(built_project, tmp_path) -> Path:
    copy = tmp_path / "project"
    shutil.copytree(built_project[0], copy, symlinks=True)
    return copy


def test_chain_runs_and_writes_metrics(built_project):
    project, ran = built_project
    assert ran == MAIN_STAGES + FEWSHOT_STAGES, ran
    state = json.loads((project / "metrics/iterations/iter-1/retrieval.json").read_text())
    assert state["val_queries"] > 0 and state["test_queries"] > 0
    assert 0.0 <= state["test"]["recall@1"] <= 1.0
    pairs = json.loads((project / "metrics/iterations/iter-1/pairs.json").read_text())
    assert pairs["pairs"] > 0 and pairs["mean_cluster_size"] >= 2
    assert json.loads((project / "metrics/best.json").read_text())["iteration"] in (0, 1)
    rows = report_rows((project / "reports/report.md").read_text())
    assert ["0", "seed"] in [row[:2] for row in rows] and ["1", "trained"] in [row[:2] for row in rows], rows
    assert (project / "reports/run_convergence.png").read_bytes()[:4] == b"\x89PNG"


def test_best_model_loads_without_project_code(built_project):
    """models/best is a plain sentence-transformers folder."""
    project, _ = built_project
    code = ("from sentence_transformers import SentenceTransformer; "
            "print(SentenceTransformer('models/best', device='cpu').encode(['a goal']).shape)")
    result = subprocess.run([sys.executable, "-c", code], cwd=project, capture_output=True, text=True,
                            env={"HF_HUB_OFFLINE": "1", "PATH": ""}, check=True)
    assert result.stdout.strip() == "(1, 32)"


def test_dvc_metrics_and_plots_commands_work(built_project):
    project, _ = built_project
    metrics = json.loads(run([sys.executable, "-m", "dvc", "metrics", "show", "--json"], project).stdout)
    flat = json.dumps(metrics)
    assert "metrics/best.json" in flat and "recall@1" in flat
    plots = json.loads(run([sys.executable, "-m", "dvc", "plots", "show", "--json"], project).stdout)
    assert {"reports/run_convergence.csv", "reports/run_convergence.png"} <= set(plots["data"])


def test_noop_repro_runs_nothing(project):
    ran, _ = repro(project)
    assert ran == []


def test_changing_k_reruns_clustering_onward_but_not_first_embed(project):
    update_params(project, {"idc": {"k": 2}})
    ran, _ = repro(project)
    assert ran[:5] == ["cluster@1", "train@1", "evaluate@1", "select", "report"], ran
    # the InfoCSE++ rounds (which use K) follow, and fine-tuning if the selected model changed; nothing else
    assert {"plusplus@2", "plusplus@3", "select_plusplus"} <= set(ran[5:]) <= set(FEWSHOT_STAGES) - {"labels", "finetune@f0"}, ran


def test_changing_seed_resplits_but_keeps_the_first_embedding(project):
    """A new seed means a new label split and new training, not new sentences: embed@1 stays cached."""
    update_params(project, {"seed": 7})
    ran, _ = repro(project)
    assert "embed@1" not in ran and ran[0] == "prepare", ran
    assert set(ran) >= {"cluster@1", "train@1", "evaluate@1", "select", "report"}, ran


def test_adding_an_iteration_runs_only_its_stages(project):
    params = read_params(project)
    params["iterations"]["2"] = {"prev": 1}
    update_params(project, {"iterations": params["iterations"]})
    ran, _ = repro(project)
    assert ran[:6] == [*[s.format(t=2) for s in ITERATION_STAGES], "select", "report"], ran
    assert set(ran[6:]) <= {"finetune@best", "plusplus@2", "plusplus@3", "select_plusplus"}, ran


def test_rerun_gives_byte_identical_outputs(project):
    before = locked_outputs(project)
    repro(project, "--force", "--single-item", "prepare", "init", "embed@1", "cluster@1", "train@1", "evaluate@1")
    after = locked_outputs(project)
    for path in ["data/corpus/documents.parquet", "data/corpus/sentences.parquet", "models/iterations/iter-0",
                 "data/iterations/iter-1/embeddings.npy", "data/iterations/iter-1/pairs.parquet",
                 "models/iterations/iter-1", "data/ranks/iter-1.parquet", "metrics/iterations/iter-1/retrieval.json"]:
        assert after[path] == before[path], path


def test_no_gain_stops_early_and_later_iterations_do_no_work(project):
    """With a frozen learning rate the model cannot improve on val: iteration 2 must be skipped."""
    update_params(project, {"train": {"learning_rate": FROZEN}, "loop": {"patience": 1},
                            "iterations": {"1": {"prev": 0}, "2": {"prev": 1}}})
    repro(project)
    train2 = json.loads((project / "metrics/iterations/iter-2/train.json").read_text())
    assert train2["skipped"] is True
    assert [p.name for p in (project / "models/iterations/iter-2").iterdir()] == ["SKIPPED"]
    assert json.loads((project / "metrics/iterations/iter-2/retrieval.json").read_text())["stopped"] is True
    assert json.loads((project / "metrics/best.json").read_text())["iteration"] == 0


@pytest.mark.parametrize("overrides, messages, stage_output", [
    ({"idc": {"k": 0}}, ["`idc.k` must be an integer >= 1"], "data/iterations/iter-1/pairs.parquet"),
    ({"seed_model": "./no/such/model"}, ["no such folder"], "models/iterations/iter-0"),
    ({"iterations": {"1": {"prev": 0}, "2": {"prev": 0}}}, ["`iterations.2.prev` must be 1"],
     "data/iterations/iter-2/embeddings.npy"),
    # init (the first stage to rerun) would load the model: both problems come first, one line each
    ({"idc": {"k": 0}, "train": {"learning_rate": "fast"}},
     ["`idc.k` must be an integer >= 1", "`train.learning_rate` must be a number"], "models/iterations/iter-0"),
])
def test_bad_params_fail_with_one_clear_error(project, overrides, messages, stage_output):
    """One `error:` line per bad value; DVC removes a stage's outputs before running it, and a
    failing stage must not leave new ones."""
    update_params(project, overrides)
    _, result = repro(project, check=False)
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == len(messages), result.stderr
    assert all(message in error for message, error in zip(messages, errors)), result.stderr
    assert not (project / stage_output).exists()


def test_zero_iterations_is_refused(project):
    update_params(project, {"iterations": {}})
    _, result = repro(project, check=False)
    assert result.returncode != 0
    assert "error: params `iterations` is empty" in result.stderr


def test_editing_the_corpus_file_reruns_prepare(project):
    """The corpus file itself is a dependency, not only its path in params."""
    corpus = read_params(project)["corpus"]["path"]
    local = project / "corpus" / "docs.jsonl"
    shutil.copy(corpus, local)
    update_params(project, {"corpus": {"path": "corpus/docs.jsonl"}})
    ran, _ = repro(project, "prepare")
    assert ran == ["prepare"]
    assert "prepare" not in run([sys.executable, "-m", "dvc", "status", "prepare"], project).stdout
    with open(local, "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"id": "extra", "title": "Extra", "text": "One more. Two more.", "category": "music"}) + "\n")
    assert "modified:           corpus/docs.jsonl" in run([sys.executable, "-m", "dvc", "status", "prepare"], project).stdout


def test_baseline_run_is_one_init_round_and_no_idc_iteration(project):
    """`init.method: conpono` + `loop.max_iterations: 0`: f_0 is the seed trained on CONPONO pairs,
    and the loop does no work after it -- how every baseline is run."""
    from infocse.pairs import PAIR_COLUMNS

    seed_weights = (project / "models/iterations/iter-0/model.safetensors").read_bytes()
    update_params(project, {"init": {"method": "conpono"}, "loop": {"max_iterations": 0}})
    ran, _ = repro(project)
    assert ran[:2] == ["init", "evaluate_init"] and "train@1" in ran
    assert (project / "models/iterations/iter-0/model.safetensors").read_bytes() != seed_weights
    pairs = pd.read_parquet(project / "data/iterations/iter-0/pairs.parquet")
    assert list(pairs.columns) == PAIR_COLUMNS and len(pairs) > 0
    assert json.loads((project / "metrics/iterations/iter-1/train.json").read_text())["skipped"] is True
    assert json.loads((project / "metrics/best.json").read_text())["iteration"] == 0
    assert ["0", "seed + conpono"] in [row[:2] for row in report_rows((project / "reports/report.md").read_text())]


def test_first_round_annotator_mines_round_one_while_f0_is_trained(project, tmp_path):
    """With another model as round-1 annotator, embed@1 holds that model's embeddings, and
    train@1 still starts from f_0 (the first embedding is not f_0's)."""
    from conftest import build_tiny_model
    from sentence_transformers import SentenceTransformer

    annotator = build_tiny_model(tmp_path / "annotator", seed=1)
    update_params(project, {"idc": {"first_round_annotator": str(annotator)}})
    ran, _ = repro(project)
    assert ran[:2] == ["annotator_model", "embed@1"], ran
    texts = pd.read_parquet(project / "data/corpus/sentences.parquet")["text"].tolist()
    embeddings = np.load(project / "data/iterations/iter-1/embeddings.npy")
    expected = SentenceTransformer(str(annotator), device="cpu").encode(texts, normalize_embeddings=True)
    f0 = SentenceTransformer(str(project / "models/iterations/iter-0"), device="cpu").encode(texts, normalize_embeddings=True)
    np.testing.assert_allclose(embeddings, expected, atol=1e-5)
    assert not np.allclose(embeddings, f0, atol=1e-3)


def test_changing_the_label_budget_reruns_only_fine_tuning(project):
    """Labels feed fine-tuning and the InfoCSE++ rounds, never the unlabelled main loop."""
    update_params(project, {"finetune": {"labels": 3}})
    ran, _ = repro(project)
    assert set(ran) == set(FEWSHOT_STAGES), ran
    assert json.loads((project / "metrics/finetuned/best.json").read_text())["labels"] == 3


def test_plusplus_stops_when_the_fine_tuned_validation_score_stops_improving(project):
    """Frozen learning rates: fine-tuned val cannot improve, so round 2 runs (patience 1) and round 3 does no work."""
    update_params(project, {"train": {"learning_rate": FROZEN}, "finetune": {"learning_rate": FROZEN},
                            "plusplus": {"max_rounds": 3}})
    repro(project)
    round2 = json.loads((project / "metrics/finetuned/round-2.json").read_text())
    round3 = json.loads((project / "metrics/finetuned/round-3.json").read_text())
    assert round2["stopped"] is False and round2["since_best"] == 1 and round2["continue"] is False
    assert round3["stopped"] is True
    assert [p.name for p in (project / "models/finetuned/round-3").iterdir()] == ["SKIPPED"]
    summary = json.loads((project / "metrics/plusplus.json").read_text())
    assert summary["best_round"] == 1 and summary["rounds_run"] == 2

"""Tiny end-to-end `dvc repro` (tiny model built in the test, twelve documents): the chain runs,
metrics land, caching reruns only what changed, bad params fail clearly. More in
test_pipeline_reruns.py (same project, built again there so that two test workers share the work)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pandas as pd
import pytest
import yaml
from pipeline_helpers import read_params, repro, run, update_params
from pipeline_project import FEWSHOT_STAGES, ITERATION_STAGES, MAIN_STAGES, RECORD_STAGES, REPORT_STAGE, report_rows


def test_chain_runs_and_writes_metrics(built_project):
    project, ran = built_project
    assert ran == MAIN_STAGES + FEWSHOT_STAGES + [REPORT_STAGE] + RECORD_STAGES, ran
    state = json.loads((project / "metrics/iterations/iter-1/retrieval.json").read_text())
    assert state["val_queries"] > 0 and state["test_queries"] > 0
    assert 0.0 <= state["test"]["recall@1"] <= 1.0
    pairs = json.loads((project / "metrics/iterations/iter-1/pairs.json").read_text())
    assert pairs["pairs"] > 0 and pairs["mean_cluster_size"] >= 2
    assert json.loads((project / "metrics/best.json").read_text())["iteration"] in (0, 1)
    # what ran is recorded (study/compare_experiments.py reads it): the tiny project sets fp32
    ran = {name: json.loads((project / f"metrics/iterations/iter-1/{name}.json").read_text())["precision"]
           for name in ("embed", "evaluate", "train")}
    assert ran == dict.fromkeys(ran, "fp32"), ran
    finetuned = {path.stem: json.loads(path.read_text()) for path in (project / "metrics/finetuned").glob("*.json")}
    ran = {name: result["precision"] for name, result in finetuned.items() if not result.get("stopped")}
    assert {"f0", "best"} <= set(ran) and ran == dict.fromkeys(ran, "fp32"), ran
    rows = report_rows((project / "reports/report.md").read_text())
    assert ["0", "seed"] in [row[:2] for row in rows] and ["1", "trained"] in [row[:2] for row in rows], rows
    assert (project / "reports/run_convergence.png").read_bytes()[:4] == b"\x89PNG"


def test_the_run_records_hold_every_param_and_the_metrics_of_their_stages(built_project):
    """record/loop.json (the loop) and record/fewshot.json (with fine-tuning) are what
    the study exports: the whole params.yaml, and each metrics file of their inputs as written."""
    project, _ = built_project
    params = yaml.safe_load((project / "params.yaml").read_text())
    loop, fewshot = (json.loads((project / f"record/{name}.json").read_text()) for name in ("loop", "fewshot"))
    assert loop["params"] == fewshot["params"] == params
    written = {path.relative_to(project).as_posix(): json.loads(path.read_text())
               for path in (project / "metrics").rglob("*.json")}
    loop_files = {path for path in written if path.startswith("metrics/iterations/")} | {
        "metrics/best.json", "metrics/corpus.json"}
    assert loop["metrics"] == {path: written[path] for path in loop_files}
    fewshot_files = loop_files | {path for path in written if path.startswith("metrics/finetuned/")} | {
        "metrics/labels.json", "metrics/plusplus.json"}
    assert fewshot["metrics"] == {path: written[path] for path in fewshot_files}


COMPUTING_STAGES = ("init", "evaluate_init", "embed@1", "train@1", "evaluate@1", "finetune@f0", "finetune@best",
                    "plusplus@2", "plusplus@3")


def test_dvc_lock_names_the_precision_every_computing_stage_ran_in(built_project):
    """What dvc.lock says is what ran: each stage that encodes or trains has params `precision` in
    its lock entry, with the value its own metrics record."""
    project, _ = built_project
    lock = yaml.safe_load((project / "dvc.lock").read_text())["stages"]
    assert {stage: lock[stage]["params"]["params.yaml"].get("precision") for stage in COMPUTING_STAGES} == dict.fromkeys(
        COMPUTING_STAGES, "fp32")
    recorded = [json.loads((project / f"metrics/iterations/iter-1/{name}.json").read_text())["precision"]
                for name in ("embed", "train", "evaluate")]
    assert recorded == ["fp32"] * 3


def test_best_model_loads_without_project_code(built_project):
    """models/best is a plain sentence-transformers folder."""
    project, _ = built_project
    code = ("from sentence_transformers import SentenceTransformer; "
            "print(SentenceTransformer('models/best', device='cpu').encode(['a goal']).shape)")
    result = subprocess.run([sys.executable, "-c", code], cwd=project, capture_output=True, text=True,
                            env={"HF_HUB_OFFLINE": "1", "PATH": ""}, check=True)
    assert result.stdout.strip() == "(1, 32)"


def test_the_delivered_models_carry_a_model_card(built_project):
    """models/best and models/plusplus/best: a README.md in sentence-transformers' convention that
    says how the model was made and scores what the metrics say (rerun byte-identical:
    test_rerun_gives_byte_identical_outputs hashes every output)."""
    project, _ = built_project
    best = json.loads((project / "metrics/best.json").read_text())
    card = (project / "models/best/README.md").read_text()
    front = yaml.safe_load(card.split("---")[1])
    assert front["library_name"] == "sentence-transformers" and front["pipeline_tag"] == "sentence-similarity"
    assert "base_model" not in front  # the tiny seed model is a local folder, not a hub id
    assert f"| test | {best['test']['recall@1']:.3f} | {best['test']['recall@5']:.3f} |" in card
    assert f"| val | {best['val']['recall@1']:.3f} |" in card and f"chosen by {best['selected_by']}" in card
    assert "precision: fp32" in card and "documents" in card
    plusplus = json.loads((project / "metrics/plusplus.json").read_text())
    card = (project / "models/plusplus/best/README.md").read_text()
    assert f"fine-tuned on {plusplus['labels']:,} labelled" in card
    assert f"| test | {plusplus['test']['recall@1']:.3f} |" in card


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


def test_changing_seed_resplits_but_keeps_the_first_embedding(project):
    """A new seed means a new label split and new training, not new sentences: embed@1 stays cached."""
    update_params(project, {"seed": 7})
    ran, _ = repro(project, "select")  # the loop: the first embedding is the question
    assert "embed@1" not in ran and ran[0] == "prepare", ran
    assert set(ran) >= {"cluster@1", "train@1", "evaluate@1", "select"}, ran


def test_adding_an_iteration_runs_only_its_stages(project):
    params = read_params(project)
    params["iterations"]["2"] = {"prev": 1}
    update_params(project, {"iterations": params["iterations"]})
    ran, _ = repro(project)
    assert ran[:5] == [*[s.format(t=2) for s in ITERATION_STAGES], "select"] and ran[-3:] == ["report", *RECORD_STAGES]
    assert set(ran[5:-3]) <= {"finetune@best", "plusplus@2", "plusplus@3", "select_plusplus"}, ran


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
    """`init.method: neighbours` + `loop.max_iterations: 0`: f_0 is the seed trained on neighbour pairs,
    and the loop does no work after it -- how every baseline is run."""
    from infocse.pairs import PAIR_COLUMNS

    seed_weights = (project / "models/iterations/iter-0/model.safetensors").read_bytes()
    update_params(project, {"init": {"method": "neighbours"}, "loop": {"max_iterations": 0}})
    ran, _ = repro(project)
    assert ran[:2] == ["init", "evaluate_init"] and "train@1" in ran
    assert (project / "models/iterations/iter-0/model.safetensors").read_bytes() != seed_weights
    pairs = pd.read_parquet(project / "data/iterations/iter-0/pairs.parquet")
    assert list(pairs.columns) == PAIR_COLUMNS and len(pairs) > 0
    assert json.loads((project / "metrics/iterations/iter-1/train.json").read_text())["skipped"] is True
    assert json.loads((project / "metrics/best.json").read_text())["iteration"] == 0
    assert ["0", "seed + neighbours"] in [row[:2] for row in report_rows((project / "reports/report.md").read_text())]


def test_changing_the_label_budget_reruns_only_fine_tuning(project):
    """Labels feed fine-tuning and the InfoCSE++ rounds, never the unlabelled main loop."""
    update_params(project, {"finetune": {"labels": 3}})
    ran, _ = repro(project)
    # the report shows the fine-tuned models; the records hold every param
    assert set(ran) == set(FEWSHOT_STAGES) | {REPORT_STAGE, *RECORD_STAGES}, ran
    assert json.loads((project / "metrics/finetuned/best.json").read_text())["labels"] == 3


def test_in_process_loop_equals_the_staged_loop(built_project, monkeypatch):
    """InfoCSE++'s in-process loop (infocse/loop.py) and the stages embed -> cluster -> train ->
    evaluate, on the same tiny corpus and params: the same pair statistics and the same val and
    test metrics at every iteration (same seeds, lengths and steps in both)."""
    from infocse.config import load_config
    from infocse.io import read_json
    from infocse.loop import run_loop
    from infocse.models import load_model
    from infocse.paths import DOCUMENTS, SENTENCES

    project, _ = built_project
    monkeypatch.chdir(project)
    model = load_model("models/iterations/iter-0", "cpu")
    history = run_loop(model, load_config(), pd.read_parquet(SENTENCES), pd.read_parquet(DOCUMENTS), "cpu")
    assert [entry["iteration"] for entry in history] == [0, 1]
    for entry in history:
        staged = read_json(project / f"metrics/iterations/iter-{entry['iteration']}/retrieval.json")
        assert (entry["val"], entry["test"]) == (staged["val"], staged["test"]), entry["iteration"]
    staged_pairs = read_json(project / "metrics/iterations/iter-1/pairs.json")
    for key in ("iteration", "skipped", "seconds", "idc_seconds"):
        staged_pairs.pop(key)
    assert history[1]["pair_statistics"] == staged_pairs


def test_a_mixed_corpus_trains_on_mixed_documents_and_measures_its_pairs(project):
    """`corpus.mix.sources: 2`: training documents of two sources each (of two categories), the
    documents evaluation reads unchanged, and IDC's pair precision in the pair statistics, equal
    to a count over the written pair table."""
    documents_before = pd.read_parquet(project / "data/corpus/documents.parquet")
    update_params(project, {"corpus": {"mix": {"sources": 2, "order": "interleaved"}}})
    ran, _ = repro(project)
    assert "prepare" in ran and "cluster@1" in ran
    sentences = pd.read_parquet(project / "data/corpus/sentences.parquet")
    pd.testing.assert_frame_equal(pd.read_parquet(project / "data/corpus/documents.parquet"), documents_before)
    assert sentences["doc_id"].str.startswith("mix-").all()
    per_document = sentences.groupby("doc_id").agg(sources=("source_id", "nunique"), categories=("source_category", "nunique"))
    assert (per_document["sources"] == 2).all() and (per_document["categories"] == 2).all()
    pairs = pd.read_parquet(project / "data/iterations/iter-1/pairs.parquet")
    source_of = sentences.set_index("sentence_id")["source_id"]
    same_source = (source_of[pairs["sentence_a"]].to_numpy() == source_of[pairs["sentence_b"]].to_numpy()).mean()
    stats = json.loads((project / "metrics/iterations/iter-1/pairs.json").read_text())
    assert stats["pair_source_precision"] == pytest.approx(same_source) and stats["pairs_with_sources"] == len(pairs)
    pairs_table = (project / "reports/report.md").read_text().split("## Pairs and batches")[1].split("\n## ")[0]
    header = report_rows(pairs_table)[0]
    assert "from one source" in header and "from one category" in header

"""study/gpu_runs.py: the corpus a run gets on the GPU machine is what the prepare stage makes for its
seed, and imported results become run files that say which code differed from the plan's commit."""

from __future__ import annotations

import copy
import hashlib
import json
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import yaml

from infocse.config import parse_config
from infocse.corpora.build import prepare_corpus
from study import gpu_runs
from study.compare_experiments import run_rows
from study.plan import expand

REPO = Path(__file__).resolve().parents[1]


def bbc_params(seed: int) -> dict:
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["seed"] = seed
    params["corpus"] = {**params["corpus"], "source": "bbc", "max_documents": 60}
    return params


def test_a_runs_corpus_is_the_prepare_stages_for_its_seed(tmp_path):
    """The bundle keeps one documents table and each seed's split; the run folder of seed 1 gets the
    table prepare_corpus makes for seed 1 (an independent call), its sentences and its corpus.json."""
    bundle = tmp_path / "bundle"
    gpu_runs.prepare_corpora([bbc_params(0), bbc_params(1)], bundle / "corpora")
    entry = {"name": "bbc-x-gpu-s1", "params": bbc_params(1), "commands": []}
    model = tmp_path / "model"
    model.mkdir()
    work = tmp_path / "runs" / entry["name"]
    gpu_runs.setup_run(entry, bundle, work, model)

    documents, sentences, stats = prepare_corpus(parse_config(bbc_params(1)))
    got = pd.read_parquet(work / "data/corpus/documents.parquet")
    assert got.astype(str).equals(documents.reset_index(drop=True).astype(str))
    assert pd.read_parquet(work / "data/corpus/sentences.parquet").astype(str).equals(
        sentences.reset_index(drop=True).astype(str))
    assert (got["split"] != pd.read_parquet(bundle / "corpora/bbc/documents.parquet")["split"]).any()  # seed 0's
    assert json.loads((work / "metrics/corpus.json").read_text()) == json.loads(json.dumps(stats))
    assert yaml.safe_load((work / "params.yaml").read_text()) == entry["params"]


def committed_code(rev: str) -> dict[str, str]:
    """md5 of each pipeline code file (stages/*.py, infocse/**/*.py, dvc.yaml) at commit `rev`."""
    listing = subprocess.run(["git", "ls-tree", "-r", "--name-only", rev, "--", "stages", "infocse", "dvc.yaml"],
                             cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    paths = [p for p in listing if p == "dvc.yaml" or p.endswith(".py") and (p.startswith("infocse/")
                                                                           or p.count("/") == 1)]
    return {p: hashlib.md5(subprocess.run(["git", "show", f"{rev}:{p}"], cwd=REPO, capture_output=True,
                                          check=True).stdout).hexdigest() for p in paths}


def record(name: str, code: dict, **extra) -> dict:
    retrieval = {"val": {"mrr@10": 0.7}, "test": {"recall@1": 0.6, "mrr@10": 0.7}}
    params = copy.deepcopy(yaml.safe_load((REPO / "params.yaml").read_text()))
    params.update(seed_model=gpu_runs.SEED_MODEL_FOLDER, device="cuda")
    return {"name": name, "params": params, "code_md5": code, "versions": {"device": "NVIDIA H200"},
            "stage_seconds": {"init": 1.0}, "wall_seconds": 9.0, "finished_at": "2030-01-01T00:00:00+00:00",
            "metrics": {"metrics/iterations/iter-0/retrieval.json": retrieval, "metrics/best.json": {"iteration": 0}},
            **extra}


def test_import_writes_run_files_that_name_the_code_that_differed_and_skips_failed_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    code = committed_code(head)
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "plan.json").write_text(json.dumps({"commit": head, "code_md5": code, "runs": []}))
    changed = {**code, "infocse/idc.py": "0" * 32}
    deleted = {path: md5 for path, md5 in code.items() if path != "stages/train.py"}
    results = tmp_path / "runs.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in [
        record("deleted-code-s0", deleted), record("same-code-s0", code), record("changed-code-s0", changed),
        record("failed-s0", code, error="RuntimeError: python -m stages.train exited with 1")]))

    runs_dir = tmp_path / "results"
    assert gpu_runs.main(["import", str(results), "--bundle", str(bundle), "--runs-dir", str(runs_dir)]) == 0
    assert sorted(p.name for p in runs_dir.iterdir()) == ["changed-code-s0.json", "deleted-code-s0.json",
                                                          "same-code-s0.json"]
    assert json.loads((runs_dir / "deleted-code-s0.json").read_text())["uncommitted_code"] == ["stages/train.py"]
    same = json.loads((runs_dir / "same-code-s0.json").read_text())
    assert same["source"] == gpu_runs.SOURCE and same["commit"] == head and same["uncommitted_code"] == []
    assert same["params_changed"]["seed_model"] == gpu_runs.SEED_MODEL_FOLDER
    assert json.loads((runs_dir / "changed-code-s0.json").read_text())["uncommitted_code"] == ["infocse/idc.py"]
    (row,) = run_rows(same)  # the reports read it as any run file: its seed model row
    assert row["method"] == "seed model" and row["test"]["recall@1"] == 0.6
    # a second import of the same results changes nothing; other content is refused, as export_runs does
    assert gpu_runs.main(["import", str(results), "--bundle", str(bundle), "--runs-dir", str(runs_dir)]) == 0
    results.write_text(json.dumps(record("same-code-s0", changed)) + "\n")
    assert gpu_runs.main(["import", str(results), "--bundle", str(bundle), "--runs-dir", str(runs_dir)]) == 1


def test_import_takes_each_results_commit_from_its_record_not_the_bundles_current_plan(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    git = lambda *args: subprocess.run(["git", *args], capture_output=True, check=True).stdout  # noqa: E731
    head = git("rev-parse", "HEAD").decode().strip()
    last_change = git("log", "-n", "1", "--format=%H", "--", "infocse/idc.py").decode().strip()
    older = git("rev-parse", f"{last_change}~1").decode().strip()  # idc.py differs there from HEAD
    code = committed_code(older)
    assert code["infocse/idc.py"] != committed_code(head)["infocse/idc.py"]
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "plan.json").write_text(json.dumps({"commit": head, "code_md5": {}, "runs": []}))  # a later plan
    results = tmp_path / "runs.jsonl"
    results.write_text(json.dumps(record("older-plan-s0", code, commit=older)) + "\n")
    runs_dir = tmp_path / "results"
    assert gpu_runs.main(["import", str(results), "--bundle", str(bundle), "--runs-dir", str(runs_dir)]) == 0
    run = json.loads((runs_dir / "older-plan-s0.json").read_text())
    assert (run["commit"], run["uncommitted_code"]) == (older, [])


def test_the_gpu_plan_runs_the_study_plans_sets_to_their_targets(tmp_path, monkeypatch):
    """The GPU runner's runs are study/plan.yaml's, named `-gpu`, and each runs the stages `dvc repro
    --dry --force` lists for its set's targets: an unlabelled run ends at its run record, a few-shot run
    at the record with fine-tuning, after its fine-tuning."""
    monkeypatch.chdir(REPO)
    assert gpu_runs.gpu_name("bbc-fewshot-100-s2", "pp") == "bbc-fewshot-100-pp-gpu-s2"
    assert gpu_runs.gpu_name("man-k2-s0", "") == "man-k2-gpu-s0"
    subprocess.run(f"git archive HEAD | tar -x -C {tmp_path}", shell=True, check=True, cwd=REPO)
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    base = yaml.safe_load((REPO / "params.yaml").read_text())
    ends = {}
    for set_name, name in (("main", "man-simcse-s0"), ("fewshot", "man-fewshot-100-s0")):
        run = next(r for r in expand(set_name, ["manpages"], [0]) if r["name"] == name)
        params = copy.deepcopy(base)
        for key, value in run["overrides"].items():
            gpu_runs.set_dotted(params, key, value)
        commands = gpu_runs.stage_commands(tmp_path, params, *run["targets"])
        ends[set_name] = (commands[-1].split()[:4], any(c.startswith("python -m stages.finetune") for c in commands))
    assert ends == {"main": (["python", "-m", "stages.record", "record/loop.json"], False),
                    "fewshot": (["python", "-m", "stages.record", "record/fewshot.json"], True)}


def test_a_plan_of_runs_from_another_model_than_the_bundles_is_refused(tmp_path, monkeypatch):
    """`plan` makes the bundle's MiniLM every run's seed model: a run from all-mpnet-base-v2 (as its seed
    model, or mining round 1) would run MiniLM under its name. Such runs are refused, by name, before any
    work; the main set's runs are not."""
    monkeypatch.chdir(REPO)
    (tmp_path / "model").mkdir()
    monkeypatch.setattr(gpu_runs, "BUNDLE", tmp_path)
    with pytest.raises(SystemExit, match="need another one: man-mpnet-infocse-gpu-s0, man-mpnet-neighbours-gpu-s0;"):
        gpu_runs.main(["plan", "--set", "mpnet-seed", "--corpora", "manpages", "--seeds", "0"])
    with pytest.raises(SystemExit, match="need another one: man-sbert-round1-gpu-s0;"):
        gpu_runs.main(["plan", "--set", "ablations", "--corpora", "manpages", "--seeds", "0"])
    assert not any(gpu_runs.needs_other_model(run["overrides"]) for run in expand("main", ["manpages", "bbc"], [0]))
    assert [path.name for path in tmp_path.iterdir()] == ["model"]  # nothing written to the bundle


def test_seed_model_here_is_the_published_weights_rounded_to_fp16_in_fp32(tmp_path):
    """`seed-model` writes the folder GPU runs start from, so a CPU run can join their group: every weight
    is the published one rounded to fp16, stored as fp32 (oracle: torch's own rounding of the published model)."""
    import pytest
    import torch

    from infocse.models import load_model, resolve_model_source

    dest = tmp_path / gpu_runs.SEED_MODEL_FOLDER
    assert gpu_runs.main(["seed-model", str(dest)]) == 0
    written = load_model(dest, device="cpu").state_dict()
    published = load_model(resolve_model_source("all-MiniLM-L6-v2"), device="cpu").state_dict()
    assert written.keys() == published.keys()
    rounded = 0
    for name, tensor in published.items():
        assert written[name].dtype == tensor.dtype, name
        if tensor.is_floating_point():
            assert torch.equal(written[name], tensor.half().float()), name
            rounded += not torch.equal(written[name], tensor)
        else:
            assert torch.equal(written[name], tensor), name
    assert rounded > 0  # the rounding happened: not a copy of the published weights
    with pytest.raises(SystemExit, match="exists"):
        gpu_runs.main(["seed-model", str(dest)])

"""study/export_runs.py: a real `dvc exp run` in a scratch project, whose stages end in the pipeline's
own `record` stages (stages/record.py), becomes a run file holding that run's record: its params
and the metrics its record stage read, never the record its baseline left behind; lists are kept;
exports are byte-stable and never silently replaced."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from study import export_runs

REPO = Path(export_runs.__file__).parents[1]
STEP = """\
import json, os, sys, yaml
p = yaml.safe_load(open("params.yaml"))
os.makedirs("metrics/finetuned", exist_ok=True); os.makedirs("data", exist_ok=True)
if sys.argv[1] == "prepare":
    open("data/corpus.txt", "w").write(f"corpus {p['seed']}\\n")
    json.dump({"documents": 10 + p["seed"]}, open("metrics/corpus.json", "w"))
elif sys.argv[1] == "select":
    json.dump({"iteration": 1, "pairs": p["budget"]["max_pairs"], "curve": [1, 2]}, open("metrics/best.json", "w"))
else:
    json.dump({"test": {"recall@1": 0.5 + p["seed"]}}, open("metrics/finetuned/f0.json", "w"))
"""

DVC_YAML = """\
stages:
  prepare:
    cmd: python step.py prepare
    deps: [step.py]
    params: [seed]
    outs: [data/corpus.txt]
    metrics: [{metrics/corpus.json: {cache: false}}]
  select:
    cmd: python step.py select
    deps: [step.py, data/corpus.txt]
    params: [budget]
    metrics: [{metrics/best.json: {cache: false}}]
  record:
    cmd: python -m stages.record record/loop.json metrics/corpus.json metrics/best.json
    deps: [metrics/corpus.json, metrics/best.json]
    params: [{params.yaml: null}]
    outs: [{record/loop.json: {cache: false}}]
  finetune:
    cmd: python step.py finetune
    deps: [step.py, data/corpus.txt]
    params: [seed]
    metrics: [{metrics/finetuned/f0.json: {cache: false}}]
  record_fewshot:
    cmd: python -m stages.record record/fewshot.json --base record/loop.json metrics/finetuned
    deps: [record/loop.json, metrics/finetuned]
    params: [{params.yaml: null}]
    outs: [{record/fewshot.json: {cache: false}}]
"""
ENV = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "PYTHONPATH": str(REPO), "DVC_NO_ANALYTICS": "1",
       "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}


def sh(*args: str, cwd: Path) -> str:
    result = subprocess.run(list(args), cwd=cwd, capture_output=True, text=True, env={**ENV, "HOME": str(cwd)})
    assert result.returncode == 0, result.stderr
    return result.stdout


def baseline_project(root: Path) -> Path:
    """A scratch project with every stage run at seed 0, committed: the experiments' baseline."""
    root.mkdir(exist_ok=True)
    (root / "step.py").write_text(STEP)
    (root / "dvc.yaml").write_text(DVC_YAML)
    (root / "params.yaml").write_text("seed: 0\ncorpus:\n  source: bbc\nbudget:\n  max_pairs: 10\n")
    (root / ".gitignore").write_text("/data\n/results\n")
    sh("git", "init", "-q", cwd=root)
    sh(sys.executable, "-m", "dvc", "init", "-q", cwd=root)
    sh(sys.executable, "-m", "dvc", "repro", "-q", cwd=root)
    sh("git", "add", "-A", cwd=root)
    sh("git", "commit", "-qm", "baseline", cwd=root)
    return root


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """The baseline, and experiment `s1`: seed 1, only up to `record` (no fine-tuning)."""
    root = baseline_project(tmp_path_factory.mktemp("exp-project"))
    sh(sys.executable, "-m", "dvc", "exp", "run", "-q", "-n", "s1", "-S", "seed=1", "record", cwd=root)
    return root


def test_a_record_the_baseline_left_is_not_taken_even_with_the_same_params(tmp_path):
    """The baseline's params, but select's code changed (uncommitted, as `dvc exp run` takes it): the
    experiment stops at `record`, and the baseline's record with fine-tuning, whose params are the
    same, was not made from this run's record, so the run file is the loop's record alone."""
    root = baseline_project(tmp_path / "same")
    pairs = '"pairs": p["budget"]["max_pairs"]'
    (root / "step.py").write_text(STEP.replace(pairs, pairs + " + 5"))
    sh(sys.executable, "-m", "dvc", "exp", "run", "-q", "-n", "same", "record", cwd=root)
    result = export(root, "--match", "same")
    assert result.returncode == 0, result.stderr
    run = json.loads((root / "study/runs/same.json").read_text())
    assert run["metrics"]["metrics/best.json"]["pairs"] == 15 and run["uncommitted_code"] == ["step.py"]
    assert "metrics/finetuned/f0.json" not in run["metrics"]


def export(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "study.export_runs", *args], cwd=root, capture_output=True, text=True,
                          env={**ENV, "HOME": str(root)})


def test_an_experiment_becomes_a_run_file_with_its_own_metrics_only(project):
    result = export(project)
    assert result.returncode == 0, result.stderr
    run = json.loads((project / "study/runs/s1.json").read_text())
    baseline = sh("git", "rev-parse", "HEAD", cwd=project).strip()
    assert run["commit"] == baseline and run["source"] == "dvc exp" and run["uncommitted_code"] == []
    assert run["params_changed"] == {"seed": 1, "corpus.source": "bbc"}
    assert run["params"]["budget"] == {"max_pairs": 10}
    assert run["metrics"]["metrics/best.json"] == {"iteration": 1, "pairs": 10, "curve": [1, 2]}  # the list kept
    assert run["metrics"]["metrics/corpus.json"] == {"documents": 11}
    # finetune did not run in the experiment: its record is the baseline's (seed 0), and not this run's
    assert "metrics/finetuned/f0.json" not in run["metrics"] and "wrote study/runs/s1.json" in result.stdout


def test_exports_are_stable_and_never_silently_replaced(project):
    assert export(project).returncode == 0
    path = project / "study/runs/s1.json"
    first = path.read_bytes()
    again = export(project)
    assert again.returncode == 0 and "unchanged" in again.stdout and path.read_bytes() == first
    path.write_text(first.decode().replace('"documents": 11', '"documents": 99'))
    refused = export(project)
    assert refused.returncode == 1 and "REFUSED" in refused.stdout and b'"documents": 99' in path.read_bytes()
    assert export(project, "--force").returncode == 0 and path.read_bytes() == first


def test_the_workspace_run(project):
    """`dvc exp run` (not queued) leaves the experiment's results in the working tree: the same rule applies."""
    result = export(project, "--workspace", "ws", "--no-experiments")
    assert result.returncode == 0, result.stderr
    run = json.loads((project / "study/runs/ws.json").read_text())
    assert run["source"] == "workspace" and run["experiment"] is None and run["params"]["seed"] == 1
    assert set(run["metrics"]) == {"metrics/best.json", "metrics/corpus.json"}


def test_a_committed_run_gives_its_fullest_record(project):
    """The baseline ran every stage: its record with fine-tuning is the run file, as it was made."""
    result = export(project, "--commit", "HEAD", "base", "--no-experiments")
    assert result.returncode == 0, result.stderr
    run = json.loads((project / "study/runs/base.json").read_text())
    assert run["source"] == "commit" and run["params_changed"] == {"seed": 0, "corpus.source": "bbc"}
    assert run["metrics"]["metrics/finetuned/f0.json"] == {"test": {"recall@1": 0.5}}
    assert run["metrics"]["metrics/corpus.json"] == {"documents": 10}


def test_a_run_without_its_own_record_is_skipped(project, tmp_path):
    """params.yaml changed after the run: no record belongs to the working tree any more."""
    params = project / "params.yaml"
    before = params.read_text()
    try:
        params.write_text(before.replace("max_pairs: 10", "max_pairs: 11"))
        result = export(project, "--workspace", "changed", "--no-experiments")
    finally:
        params.write_text(before)
    assert result.returncode == 0 and "skipped changed: no run record made with its params" in result.stdout
    assert not (project / "study/runs/changed.json").exists()


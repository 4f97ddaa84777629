"""study/export_runs.py: a real `dvc exp run` in a scratch project becomes a run file holding the
run's own metrics only (the stage it did not run keeps its baseline's file, which is left out),
lists included; exports are byte-stable and never silently replaced. The freshness rule on a
hand-made dvc.lock."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from study import export_runs

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
  finetune:
    cmd: python step.py finetune
    deps: [step.py, data/corpus.txt]
    params: [seed]
    metrics: [{metrics/finetuned/f0.json: {cache: false}}]
"""


def sh(*args: str, cwd: Path) -> str:
    env_python = str(Path(sys.executable).parent)
    result = subprocess.run(list(args), cwd=cwd, capture_output=True, text=True,
                            env={"PATH": f"{env_python}:/usr/bin:/bin", "HOME": str(cwd), "DVC_NO_ANALYTICS": "1",
                                 "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                                 "GIT_COMMITTER_EMAIL": "t@t"})
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """Baseline: all three stages at seed 0. Experiment `s1`: seed 1, only `select` (and `prepare`) run."""
    root = tmp_path_factory.mktemp("exp-project")
    (root / "step.py").write_text(STEP)
    (root / "dvc.yaml").write_text(DVC_YAML)
    (root / "params.yaml").write_text("seed: 0\ncorpus:\n  source: bbc\nbudget:\n  max_pairs: 10\n")
    (root / ".gitignore").write_text("/data\n/results\n")
    sh("git", "init", "-q", cwd=root)
    sh(sys.executable, "-m", "dvc", "init", "-q", cwd=root)
    sh(sys.executable, "-m", "dvc", "repro", "-q", cwd=root)
    sh("git", "add", "-A", cwd=root)
    sh("git", "commit", "-qm", "baseline", cwd=root)
    sh(sys.executable, "-m", "dvc", "exp", "run", "-q", "-n", "s1", "-S", "seed=1", "select", cwd=root)
    return root


def export(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "study.export_runs", *args], cwd=root, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(export_runs.__file__).parents[1]),
                               "HOME": str(root)})


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
    # finetune did not run in the experiment: its committed file is the baseline's (seed 0)
    assert "metrics/finetuned/f0.json" not in run["metrics"]
    assert "left out, not made by this run: metrics/finetuned/f0.json" in result.stdout


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


def md5(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()


def lock_of(code_md5: str, upstream_out: str = "aaa", downstream_dep: str = "aaa", seed: int = 0) -> dict:
    return yaml.safe_load(f"""
stages:
  prepare:
    deps: [{{path: step.py, md5: {code_md5}}}]
    params: {{params.yaml: {{seed: {seed}}}}}
    outs: [{{path: data/corpus.txt, md5: {upstream_out}}}]
  select:
    deps: [{{path: data/corpus.txt, md5: {downstream_dep}}}, {{path: models, md5: x.dir}}]
    params: {{params.yaml: {{budget: {{max_pairs: 10}}}}}}
    outs: [{{path: metrics/best.json, md5: bbb}}]
""")


@pytest.mark.parametrize("lock, current", [
    (lock_of(md5("code")), {"prepare", "select"}),
    (lock_of(md5("code"), seed=1), set()),  # prepare ran with other params: select read stale data
    (lock_of(md5("old code")), set()),  # prepare's code changed since it ran
    (lock_of(md5("code"), downstream_dep="zzz"), {"prepare"}),  # select read another corpus.txt
])
def test_a_stage_is_current_when_params_code_and_inputs_match(lock, current):
    files = {"step.py": b"code"}
    params = {"seed": 0, "budget": {"max_pairs": 10}}
    assert export_runs.current_stages(lock, params, files.get) == current


def test_a_stale_entry_of_a_removed_stage_does_not_hide_the_current_producer():
    """dvc.lock can keep a stage dvc.yaml dropped that wrote the same path with an older md5."""
    lock = lock_of(md5("code"))
    lock["stages"]["old_prepare"] = {"deps": [{"path": "gone.py", "md5": "x"}],
                                     "outs": [{"path": "data/corpus.txt", "md5": "old"}]}
    current = export_runs.current_stages(lock, {"seed": 0, "budget": {"max_pairs": 10}}, {"step.py": b"code"}.get)
    assert current == {"prepare", "select", "old_prepare"}  # gone.py cannot be read: unchecked, as a directory


def test_params_compare_across_yaml_readers():
    assert export_runs.same_value({"lr": 5e-05, "n": [1, 2]}, {"lr": "5e-05", "n": [1, 2]})
    assert not export_runs.same_value({"lr": 5e-05}, {"lr": "1e-4"})
    assert not export_runs.same_value(True, 1) and not export_runs.same_value("all", 10)

"""The queue scripts refuse bad settings before they queue anything: a typo found when the queue
runs, hours later, costs every run queued with it. Each runs from a copy outside any DVC project,
so a check that lets a bad value through fails at `dvc exp run` with another exit code."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("queue")
    (root / "scripts").mkdir()
    for name in ("queue_comparison.sh", "queue_fewshot.sh", "queue_experiment.sh"):
        shutil.copy(REPO / "scripts" / name, root / "scripts" / name)
    shutil.copy(REPO / "params.yaml", root / "params.yaml")
    return root


PATH = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])  # this venv's dvc


def run_script(copy: Path, script: str, args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    """The timeout only stops a hang: queueing a dozen experiments, one `dvc exp run --queue` each, took over
    60 s on a loaded 2-core machine."""
    return subprocess.run(["bash", f"scripts/{script}", *args], cwd=copy, capture_output=True, text=True,
                          env={**os.environ, "PATH": PATH, **env}, timeout=600)


def dvc(project: Path, *args: str) -> str:
    return subprocess.run([sys.executable, "-m", "dvc", *args], cwd=project, check=True, capture_output=True,
                          text=True, env={**os.environ, "PATH": PATH}, timeout=300).stdout


def scratch_project(project: Path, scripts: tuple[str, ...], stages: dict, ignored: str = "") -> Path:
    """A committed git + DVC project holding the queue scripts, params.yaml and `stages` as dvc.yaml."""
    (project / "scripts").mkdir(parents=True)
    for name in scripts:
        shutil.copy(REPO / "scripts" / name, project / "scripts" / name)
    shutil.copy(REPO / "params.yaml", project / "params.yaml")
    (project / "dvc.yaml").write_text(yaml.safe_dump({"stages": stages}))
    (project / ".gitignore").write_text(ignored)
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@example.com"]
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    dvc(project, "init", "-q")
    for command in (["git", "add", "-A"], [*git, "commit", "-qm", "init"]):
        subprocess.run(command, cwd=project, check=True, capture_output=True)
    return project


def queued_params(project: Path) -> dict[str, dict]:
    """Each queued experiment's params.yaml, by experiment name."""
    return {experiment["name"]: experiment["revs"][0]["data"]["params"]["params.yaml"]["data"]
            for commit in json.loads(dvc(project, "exp", "show", "--json"))
            for experiment in commit.get("experiments") or []}


@pytest.mark.parametrize(("script", "args", "env", "message"), [
    ("queue_comparison.sh", ["nope"], {}, "unknown set 'nope'"),
    ("queue_comparison.sh", ["main"], {"SEEDS": "0 x"}, "SEEDS: 'x'"),
    ("queue_comparison.sh", ["sweep"], {"BUDGETS": "all15"}, "unknown budget 'all15'"),
    ("queue_comparison.sh", ["mixed"], {"MIX_SOURCES": "1"}, "MIX_SOURCES: '1'"),
    ("queue_comparison.sh", ["main"], {"PRECISION": "fp16"}, "PRECISION must be fp32 or bf16"),
    ("queue_fewshot.sh", ["conpono"], {}, "BASELINE must be one of"),
    ("queue_fewshot.sh", ["neighbours"], {"SEEDS": "-1"}, "SEEDS must be"),
    ("queue_fewshot.sh", ["neighbours"], {"ROUNDS": "0"}, "ROUNDS must be a positive integer"),
    ("queue_fewshot.sh", ["neighbours"], {"BUDGETS": "100 0"}, "BUDGETS must be"),
    ("queue_fewshot.sh", ["neighbours"], {"BUDGETS": "100 some"}, "BUDGETS must be"),
    ("queue_fewshot.sh", ["neighbours"], {"CONTROL": "yes"}, "CONTROL must be 0 or 1"),
    ("queue_fewshot.sh", ["neighbours"], {"ONLY_MISSING": "yes"}, "ONLY_MISSING must be 0 or 1"),
    ("queue_comparison.sh", ["main"], {"TAG": "a b"}, "TAG must be letters, digits or _"),
    ("queue_fewshot.sh", ["neighbours"], {"PRECISION": "half"}, "PRECISION must be fp32 or bf16"),
])
def test_a_bad_setting_exits_2_naming_it_before_anything_is_queued(copy, script, args, env, message):
    result = run_script(copy, script, args, env)
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert message in result.stderr, result.stderr


def test_the_few_shot_queue_knows_every_baseline_annotator():
    from infocse.annotators import ANNOTATORS

    line = next(line for line in (REPO / "scripts/queue_fewshot.sh").read_text().splitlines()
                if line.startswith("baselines="))
    assert tuple(line.split('"')[1].split()) == ANNOTATORS


def test_the_few_shot_queue_sets_every_precision_tags_every_name_and_reuses_unchanged_stages(tmp_path):
    """Queued for real in a scratch DVC project and run: PRECISION=bf16 reaches params `precision`,
    TAG every name, a stage whose params the runs share runs once (DVC's run cache; a forced
    experiment would rerun it in each), and a name queued again
    is skipped (ONLY_MISSING), refused (queued, or ran without a run file) or replaced (exported)."""
    count = tmp_path / "upstream-ran"
    project = scratch_project(tmp_path / "project", ("queue_fewshot.sh", "queue_experiment.sh"), {
        "upstream": {"cmd": f"echo ran >> {count} && echo up > up.txt", "outs": ["up.txt"],
                     "params": ["init", "loop", "seed", "precision", "embed", "evaluate", "train"]},
        "finetune": {"cmd": "cp up.txt down.txt", "deps": ["up.txt"], "outs": ["down.txt"], "params": ["finetune"]}},
        ignored="up.txt\ndown.txt\nresults\n")
    settings = {"PRECISION": "bf16", "SEEDS": "0", "BUDGETS": "100", "ROUNDS": "2", "TAG": "pp"}
    result = run_script(project, "queue_fewshot.sh", ["neighbours", "manpages"], settings)
    assert result.returncode == 0, result.stderr
    queued = queued_params(project)
    infocse, baseline, control = "man-fewshot-100-pp-s0", "man-fewshot-neighbours-100-pp-s0", "man-fewshot-100-e6-pp-s0"
    assert set(queued) == {infocse, baseline, control}
    assert {name: params["precision"] for name, params in queued.items()} == dict.fromkeys(queued, "bf16")

    (project / "results/runs").mkdir(parents=True)
    (project / f"results/runs/{infocse}.json").write_text("{}")  # as if exported
    again = run_script(project, "queue_fewshot.sh", ["neighbours", "manpages"], {**settings, "ONLY_MISSING": "1"})
    assert again.returncode == 1 and f"skip {infocse}" in again.stdout
    assert f"{baseline} is already queued" in again.stderr

    dvc(project, "exp", "run", "--run-all", "-j", "1")
    # InfoCSE and its control (finetune.epochs) share the upstream stage; the baseline (init.method) does not
    assert count.read_text().split() == ["ran", "ran"]

    again = run_script(project, "queue_fewshot.sh", ["neighbours", "manpages"], settings)
    assert again.returncode == 1 and f"{baseline} ran at this commit but has no run file" in again.stderr
    status = [line.split() for line in dvc(project, "queue", "status").splitlines()]
    assert [row[-1] for row in status if row[1:2] == [infocse]].count("Queued") == 1  # the exported one: replaced


def test_the_ablations_run_their_one_seed_studies_at_the_seeds_asked_for(tmp_path):
    """SEEDS reaches every study of the ablations set (it once queued K, the inits and SBERT at seed 0
    whatever SEEDS said), and the convergence study adds a third iteration with patience for all three."""
    project = scratch_project(tmp_path / "project", ("queue_comparison.sh", "queue_experiment.sh"), {
        "select": {"cmd": "echo select", "params": ["seed"]}, "report": {"cmd": "echo report", "params": ["seed"]}})
    result = run_script(project, "queue_comparison.sh", ["ablations", "manpages"], {"SEEDS": "1 4", "PRECISION": "bf16"})
    assert result.returncode == 0, result.stderr
    queued = queued_params(project)
    studies = ("kmeans", "k2", "k3", "infocse-init-neighbours", "infocse-init-simcse", "infocse-init-ict",
               "sbert-round1", "iter3")
    assert set(queued) == {f"man-{study}-s{seed}" for study in studies for seed in (1, 4)}
    assert {name: params["seed"] for name, params in queued.items()} == {name: int(name[-1]) for name in queued}
    iter3 = queued["man-iter3-s4"]
    assert iter3["iterations"] == {"1": {"prev": 0}, "2": {"prev": 1}, "3": {"prev": 2}}
    assert iter3["loop"]["patience"] == 3 and iter3["precision"] == "bf16"
    assert queued["man-k3-s1"]["idc"]["k"] == 3

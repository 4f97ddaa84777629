"""The study's one plan (study/plan.yaml, study/plan.py): the committed run files are the oracle for
what each named run sets, and queueing is checked for real in a scratch DVC project."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from study import plan

REPO = Path(__file__).resolve().parents[1]
PATH = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])  # this venv's dvc
# Run files the plan does not name as they ran: runs of the working tree (`*-default-*`), the old
# name of neighbour pairs, and few-shot runs made with one InfoCSE++ round before the plan asked for 3
# (the plan's runs of those names need a --tag).
HISTORICAL = re.compile(r"^(bbc-default|\w+-conpono)|^(bbc-fewshot-(100|300|all)-(gpu|cpu)|man-fewshot-(300|all))-s\d$")


def flat(params: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in params.items():
        out.update(flat(value, f"{prefix}{key}.") if isinstance(value, dict) else {f"{prefix}{key}": value})
    return out


def test_every_run_file_the_plan_names_ran_with_the_plans_params(monkeypatch):
    """Each committed run file is a run of some set (its name less a tag such as -gpu or -fixed), and
    every param the plan sets for that name is the value the run recorded."""
    monkeypatch.chdir(REPO)
    named = {run["name"]: run for set_name in plan.load_plan()
             for run in plan.expand(set_name, ["bbc", "manpages"], [0, 1, 2, 3, 4])}
    checked = 0
    for path in sorted((REPO / "study/runs").glob("*.json")):
        run = json.loads(path.read_text())
        if HISTORICAL.match(run["name"]):
            continue
        untagged = re.sub(r"-(fixed|gpu|bf16|pp|cpu)(?=-s\d+$)", "", run["name"])
        assert untagged in named, f"{run['name']}: no set of the plan names it"
        recorded = flat(run["params"])
        expected = {key.lstrip("+"): value for key, value in named[untagged]["overrides"].items()}
        assert {key: recorded.get(key) for key in expected} == expected, run["name"]
        checked += 1
    assert checked > 200


def test_a_runs_own_seeds_give_way_to_the_seeds_asked_for():
    """The ablations' one-seed studies run at seed 0 by default and at every seed asked for; the
    convergence study adds a third iteration with patience for all three; a tag goes before -s<seed>."""
    default = {run["name"] for run in plan.expand("ablations", ["manpages"])}
    assert {"man-k2-s0", "man-kmeans-s2"} <= default and "man-k2-s1" not in default
    asked = {run["name"]: run for run in plan.expand("ablations", ["manpages"], [1, 4], tag="fixed")}
    assert {"man-k2-fixed-s1", "man-k2-fixed-s4", "man-iter3-fixed-s4", "man-kmeans-fixed-s1"} <= set(asked)
    assert asked["man-iter3-fixed-s4"]["overrides"] == {"corpus.source": "manpages", "seed": 4, "loop.patience": 3,
                                                        "++iterations.3.prev": 2}
    assert {run["name"] for run in plan.expand("selection")} >= {"bbc400-validate-s2", "man-validate-s0"}
    assert "man400-validate-s0" not in {run["name"] for run in plan.expand("selection")}


def test_the_few_shot_control_matches_infocse_plus_plus_epochs():
    """The control fine-tunes once for as many epochs as InfoCSE++ has had after round r (r x
    finetune.epochs, r = 2 .. max_rounds), at the smallest and the largest label budget."""
    epochs = yaml.safe_load((REPO / "params.yaml").read_text())["finetune"]["epochs"]
    runs = {run["name"]: run["overrides"] for run in plan.expand("fewshot", ["manpages"], [0])}
    rounds = runs["man-fewshot-100-s0"]["plusplus.max_rounds"]
    controls = {name: o["finetune.epochs"] for name, o in runs.items() if "finetune.epochs" in o}
    assert controls == {f"man-fewshot-{labels}-e{r * epochs}-s0": r * epochs for labels in (100, "all")
                        for r in range(2, rounds + 1)}


def dvc(project: Path, *args: str) -> str:
    return subprocess.run([sys.executable, "-m", "dvc", *args], cwd=project, check=True, capture_output=True,
                          text=True, env={**os.environ, "PATH": PATH}, timeout=300).stdout


def queue(project: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "study.plan", "queue", *args], cwd=project, capture_output=True,
                          text=True, env={**os.environ, "PATH": PATH, "PYTHONPATH": str(REPO)}, timeout=600)


def queued_params(project: Path) -> dict[str, dict]:
    return {experiment["name"]: experiment["revs"][0]["data"]["params"]["params.yaml"]["data"]
            for commit in json.loads(dvc(project, "exp", "show", "--json"))
            for experiment in commit.get("experiments") or []}


def test_queueing_a_set_for_real(tmp_path):
    """In a scratch DVC project: -S reaches every run's params after the plan's, the tag every name;
    a stage the runs share runs once (DVC's run cache); a name queued again is skipped
    (--only-missing, a run file exists), refused (queued, or ran without a run file) or replaced
    (exported)."""
    project, count = tmp_path / "project", tmp_path / "upstream-ran"
    (project / "study").mkdir(parents=True)
    shutil.copy(REPO / "params.yaml", project / "params.yaml")
    (project / "study/plan.yaml").write_text(yaml.safe_dump({"t": {
        "corpora": ["manpages"], "seeds": [0], "targets": [],
        "runs": {"{short}-a": {"finetune.labels": 100}, "{short}-b": {"finetune.labels": 100, "finetune.epochs": 6},
                 "{short}-c": {"init.method": "neighbours", "seeds": [1]}}}}))
    (project / "dvc.yaml").write_text(yaml.safe_dump({"stages": {
        "upstream": {"cmd": f"echo ran >> {count} && echo up > up.txt", "outs": ["up.txt"],
                     "params": ["init", "seed", "precision"]},
        "finetune": {"cmd": "cp up.txt down.txt", "deps": ["up.txt"], "outs": ["down.txt"], "params": ["finetune"]}}}))
    (project / ".gitignore").write_text("up.txt\ndown.txt\nresults\n")
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    dvc(project, "init", "-q")
    subprocess.run("git add -A && git -c user.name=t -c user.email=t@e commit -qm init", shell=True, cwd=project,
                   check=True)

    result = queue(project, "t", "--tag", "pp", "-S", "precision=bf16")
    assert result.returncode == 0, result.stderr
    queued = queued_params(project)
    assert set(queued) == {"man-a-pp-s0", "man-b-pp-s0"}
    assert {name: (p["precision"], p["seed"], p["corpus"]["source"], p["finetune"]["labels"])
            for name, p in queued.items()} == dict.fromkeys(queued, ("bf16", 0, "manpages", 100))
    assert queued["man-b-pp-s0"]["finetune"]["epochs"] == 6

    (project / "study/runs").mkdir(parents=True)
    (project / "study/runs/man-a-pp-s0.json").write_text("{}")  # as if exported
    again = queue(project, "t", "--tag", "pp", "--only-missing")
    assert again.returncode == 1 and "skip man-a-pp-s0" in again.stdout
    assert "man-b-pp-s0 is already queued" in again.stderr

    dvc(project, "exp", "run", "--run-all", "-j", "1")
    assert count.read_text().split() == ["ran"]  # b differs from a only in finetune: upstream restored

    again = queue(project, "t", "--tag", "pp", "-S", "precision=bf16")
    assert again.returncode == 1 and "man-b-pp-s0 ran at this commit but has no run file" in again.stderr
    assert set(queued_params(project)) >= {"man-a-pp-s0"}  # the exported one: queued again, replacing it


def test_an_unknown_set_or_a_bad_tag_stops_before_anything_is_queued(tmp_path):
    result = subprocess.run([sys.executable, "-m", "study.plan", "queue", "nope"], cwd=REPO, capture_output=True,
                            text=True)
    assert result.returncode == 1 and "unknown set 'nope'" in result.stderr
    result = subprocess.run([sys.executable, "-m", "study.plan", "queue", "main", "--tag", "a b"], cwd=REPO,
                            capture_output=True, text=True)
    assert result.returncode == 2 and "--tag must be letters, digits or _" in result.stderr

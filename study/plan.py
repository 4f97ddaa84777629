"""The study's runs from study/plan.yaml: list a set, or queue it as DVC experiments (DVC's own queue).

    python -m study.plan list SET
    python -m study.plan queue SET [--corpora bbc ...] [--seeds 0 1 ...] [--tag T] [--match GLOB]
                                   [--only-missing] [-S precision=bf16 ...]

`--tag T` puts `-T` before `-s<seed>` in every name: runs of changed code or params need new names,
as export_runs never replaces a run file with other content. An experiment of the same name at this
commit is replaced once it has a run file, and refused otherwise (a run not exported would be lost).
Experiments run the committed code: commit first.
"""

from __future__ import annotations

import argparse
import fnmatch
import subprocess
import sys
from pathlib import Path

import yaml

PLAN = Path("study/plan.yaml")
RUNS_DIR = Path("study/runs")
# The GPU runner's runs start from this folder: all-MiniLM-L6-v2's weights rounded to fp16 (the
# published fp32 weights do not fit its bundle); the reports never pool them with the published ones.
GPU_SEED_MODEL = "all-MiniLM-L6-v2-fp16"


def load_plan(path: Path = PLAN) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def tagged(name: str, tag: str) -> str:
    head, _, seed = name.rpartition("-s")
    return f"{head}-{tag}-s{seed}" if tag else name


def expand(set_name: str, corpora: list[str] | None = None, seeds: list[int] | None = None, tag: str = "",
           match: str = "*", plan: dict | None = None) -> list[dict]:
    """The set's runs in plan order (corpus, then seed, then the set's runs): name, overrides
    (dotted param -> value, `corpus.source` and `seed` first) and targets."""
    plan = plan or load_plan()
    if set_name not in plan:
        raise SystemExit(f"unknown set '{set_name}' in {PLAN} (known: {' '.join(plan)})")
    spec = plan[set_name]
    runs = []
    for corpus in corpora or spec["corpora"]:
        for seed in seeds if seeds is not None else spec["seeds"]:
            for template, settings in spec["runs"].items():
                settings = dict(settings or {})
                run_seeds, run_corpora = settings.pop("seeds", None), settings.pop("corpora", None)
                if (seeds is None and run_seeds is not None and seed not in run_seeds) or \
                        (corpora is None and run_corpora is not None and corpus not in run_corpora):
                    continue
                name = tagged(template.format(short=corpus[:3]) + f"-s{seed}", tag)
                if fnmatch.fnmatchcase(name, match):
                    runs.append({"name": name, "overrides": {"corpus.source": corpus, "seed": seed, **settings},
                                 "targets": list(spec.get("targets") or [])})
    return runs


def exp_run_args(run: dict, extra: list[str]) -> list[str]:
    args = ["dvc", "exp", "run", "--queue", "-n", run["name"]]
    for key, value in run["overrides"].items():
        args += ["-S", f"{key}={'null' if value is None else value}"]
    for setting in extra:
        args += ["-S", setting]
    return args + run["targets"]


def waiting_names() -> set[str]:
    """Names queued or running in DVC's queue (DVC itself queues a name twice)."""
    from dvc.repo import Repo

    with Repo(".") as repo:
        queue = repo.experiments.celery_queue
        return {entry.name for entries in (queue.iter_queued(), queue.iter_active()) for entry in entries}


def queue(runs: list[dict], extra: list[str], only_missing: bool, runs_dir: Path = RUNS_DIR) -> int:
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    waiting, refused = waiting_names(), 0
    for run in runs:
        exported = (runs_dir / f"{run['name']}.json").exists()
        if only_missing and exported:
            print(f"skip {run['name']}: {runs_dir}/{run['name']}.json exists")
            continue
        if run["name"] in waiting:
            print(f"{run['name']} is already queued or running: remove it (dvc queue remove {run['name']}) "
                  "or use --tag", file=sys.stderr)
            refused += 1
            continue
        ref = f"refs/exps/{head[:2]}/{head[2:]}/{run['name']}"
        if subprocess.run(["git", "rev-parse", "-q", "--verify", ref], capture_output=True).returncode == 0:
            if not exported:
                print(f"{run['name']} ran at this commit but has no run file: export it first "
                      "(python -m study.export_runs)", file=sys.stderr)
                refused += 1
                continue
            subprocess.run(["dvc", "exp", "remove", ref], check=True, capture_output=True)
        refused += subprocess.run(exp_run_args(run, extra)).returncode != 0
    return 1 if refused else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("list", "queue"))
    parser.add_argument("set", help=f"a set of {PLAN}")
    parser.add_argument("--corpora", nargs="+", help="instead of the set's corpora")
    parser.add_argument("--seeds", nargs="+", type=int, help="instead of the set's seeds")
    parser.add_argument("--tag", default="", help="inserted before -s<seed> in every name")
    parser.add_argument("--match", default="*", help="only runs whose name (after --tag) matches this glob")
    parser.add_argument("--only-missing", action="store_true", help="skip names that have a run file")
    parser.add_argument("-S", dest="extra", action="append", default=[], metavar="KEY=VALUE",
                        help="a param for every run (e.g. precision=bf16), after the plan's")
    args = parser.parse_args(argv)
    if args.tag and not args.tag.replace("_", "").isalnum():
        parser.error(f"--tag must be letters, digits or _, got '{args.tag}'")
    runs = expand(args.set, args.corpora, args.seeds, args.tag, args.match)
    if args.command == "list":
        for run in runs:
            print(" ".join(exp_run_args(run, args.extra)[5:]))
        return 0
    status = queue(runs, args.extra, args.only_missing)
    print("next: dvc queue start -j 1 && python -m study.export_runs --wait && python -m study.make_reports")
    return status


if __name__ == "__main__":
    sys.exit(main())

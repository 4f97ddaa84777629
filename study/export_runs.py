"""Export finished runs to committed run files, `study/runs/<name>.json`: the data every report reads.

    python -m study.export_runs                        # every finished `dvc exp` experiment
    python -m study.export_runs --match 'man-*'        # only experiments whose name matches
    python -m study.export_runs --workspace NAME       # and the run in the working tree (`dvc repro`)
    python -m study.export_runs --commit REV NAME      # and a run committed at REV (dvc.lock + metrics/)
    python -m study.export_runs --wait                 # first wait until `dvc queue` has nothing left
    python -m study.export_runs --force                # replace run files whose content changed

A run file is the run's record -- its params and metrics as the pipeline's `record` stages write them
(`record/fewshot.json`, else `record/loop.json`), which DVC keeps true to the run -- plus
where and when it ran: the commit (an experiment's baseline), the time, the params that differ from
that commit's params.yaml (`corpus.source` and `seed` always) and the tracked files other than
outputs that differed from that commit (`uncommitted_code`: empty for a run of committed code). Every
study run ends at a record stage, and `record_fewshot` is made from `record`, so `record.json` with
the run's own params is the run's; `record_fewshot.json` counts only if it was made from that
`record.json` (an experiment that stopped at `record` keeps its baseline's). JSON with sorted keys,
so the same run gives the same bytes.
"""

from __future__ import annotations

import argparse
import datetime
import fnmatch
import json
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import yaml

RUNS_DIR = Path("study/runs")
RECORDS = ("record/fewshot.json", "record/loop.json")  # the fuller first
ALWAYS_RECORDED = ("corpus.source", "seed")
# What a run writes or sets: a run whose files differ from its commit only here ran that commit's code.
RUN_OUTPUTS = ("dvc.lock", "params.yaml", "metrics/", "record/", "reports/", "results/")


def git(*args: str) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout


def read_at(rev: str | None) -> Callable[[str], str | None]:
    """Read a file of commit `rev` (of the working tree for None); None when it is not there."""
    def read(path: str) -> str | None:
        if rev is None:
            return Path(path).read_text(encoding="utf-8") if Path(path).is_file() else None
        result = subprocess.run(["git", "show", f"{rev}:{path}"], capture_output=True, text=True)
        return result.stdout if result.returncode == 0 else None
    return read


def flatten(params: dict, prefix: str = "") -> dict:
    """{"budget.max_pairs": 2560, ...}: one dotted key per leaf value."""
    flat = {}
    for key, value in params.items():
        if isinstance(value, dict) and value:
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def changed_params(params: dict, defaults: dict) -> dict:
    """Dotted params whose value differs from `defaults` (a key absent there counts as changed)."""
    flat, base = flatten(params), flatten(defaults)
    changed = {key: value for key, value in flat.items() if key not in base or base[key] != value}
    changed.update({key: flat[key] for key in ALWAYS_RECORDED if key in flat})
    return changed


def run_record(read: Callable[[str], str | None]) -> tuple[str, dict] | None:
    """The run's record and its path, or None (the run did not finish). `record.json` counts when its
    params are the run's own (every study run ends at a record stage, so DVC made it for this run); the
    fuller `record_fewshot.json` when it was made from that record (not left by the baseline)."""
    params = json.loads(json.dumps(yaml.safe_load(read("params.yaml") or "") or {}))  # keys as JSON has them
    loop_text = read(RECORDS[1])
    loop = json.loads(loop_text) if loop_text else None
    if loop is None or loop["params"] != params:
        return None
    fewshot_text = read(RECORDS[0])
    fewshot = json.loads(fewshot_text) if fewshot_text else None
    if fewshot and fewshot["params"] == params and all(
            fewshot["metrics"].get(path) == value for path, value in loop["metrics"].items()):
        return RECORDS[0], fewshot
    return RECORDS[1], loop


def run_file(name: str, source: str, commit: str, experiment: str | None, ran_at: str, record: dict,
             uncommitted_code: list[str]) -> dict:
    """What every run file holds, however the run was made (study/gpu_runs.py imports the same)."""
    defaults = yaml.safe_load(read_at(commit)("params.yaml") or "") or {}
    return {"name": name, "source": source, "commit": commit, "experiment": experiment, "ran_at": ran_at,
            "params": record["params"], "params_changed": changed_params(record["params"], defaults),
            "metrics": record["metrics"], "uncommitted_code": uncommitted_code}


def code_changes(paths: list[str]) -> list[str]:
    """Changed files that are not a run's outputs or params: code the commit does not hold."""
    return sorted(p for p in paths if not p.startswith(RUN_OUTPUTS) and not p.endswith(".gitignore"))


def experiments(pattern: str = "*") -> list[dict]:
    """Finished experiments (DVC's list over every baseline): name, commit, baseline and commit time;
    when one name was run at several baselines, the newest."""
    from dvc.repo import Repo

    with Repo(".") as repo:
        listing = repo.experiments.ls(all_commits=True)
    found = {}
    for baseline, entries in listing.items():
        for name, experiment in entries:
            if experiment is None or not fnmatch.fnmatchcase(name, pattern):
                continue
            entry = {"name": name, "experiment": experiment, "commit": git("rev-parse", baseline).strip(),
                     "ran_at": git("show", "-s", "--format=%cI", experiment).strip()}
            previous = found.get(name)
            if previous:
                older = min(previous, entry, key=lambda e: (e["ran_at"], e["experiment"]))
                print(f"note: experiment {name} exists at two baselines; exporting the newer, "
                      f"not {older['experiment'][:7]} (at {older['commit'][:7]})")
                if older is entry:
                    continue
            found[name] = entry
    return [found[name] for name in sorted(found)]


def export_experiment(entry: dict) -> dict | None:
    found = run_record(read_at(entry["experiment"]))
    changed = git("diff", "--name-only", entry["commit"], entry["experiment"]).split()
    return found and run_file(entry["name"], "dvc exp", entry["commit"], entry["experiment"], entry["ran_at"],
                              found[1], code_changes(changed))  # `dvc exp run --queue` runs uncommitted changes too


def export_commit(rev: str, name: str) -> dict | None:
    """A run committed to the history (a `dvc repro` whose dvc.lock and metrics were committed)."""
    commit = git("rev-parse", f"{rev}^{{commit}}").strip()
    found = run_record(read_at(commit))
    return found and run_file(name, "commit", commit, None, git("show", "-s", "--format=%cI", commit).strip(),
                              found[1], [])


def export_workspace(name: str) -> dict | None:
    found = run_record(read_at(None))
    if found is None:
        return None
    path, record = found
    ran_at = datetime.datetime.fromtimestamp(int(Path(path).stat().st_mtime), datetime.timezone.utc).isoformat()
    return run_file(name, "workspace", git("rev-parse", "HEAD").strip(), None, ran_at, record,
                    code_changes(git("diff", "--name-only", "HEAD").split()))


def render(run: dict) -> str:
    return json.dumps(run, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def write_run(run: dict, folder: Path, force: bool) -> str:
    """Write the run file; never replace one whose content differs unless `force`."""
    path = folder / f"{re.sub(r'[^A-Za-z0-9._+-]', '_', run['name'])}.json"
    text = render(run)
    if path.exists():
        if path.read_text(encoding="utf-8") == text:
            return f"unchanged {path}"
        if not force:
            return f"REFUSED {path}: it exists with other content (--force replaces it)"
    folder.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return f"wrote {path}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workspace", metavar="NAME", help="also export the run in the working tree as NAME")
    parser.add_argument("--commit", nargs=2, action="append", default=[], metavar=("REV", "NAME"),
                        help="also export the run committed at REV (its dvc.lock and metrics) as NAME")
    parser.add_argument("--match", default="*", help="export only experiments whose name matches this glob")
    parser.add_argument("--no-experiments", action="store_true",
                        help="skip the dvc experiments (export only --workspace and --commit runs)")
    parser.add_argument("--wait", action="store_true", help="wait until the dvc queue has no queued or running run")
    parser.add_argument("--force", action="store_true", help="replace run files whose content changed")
    parser.add_argument("--runs-dir", type=Path, default=RUNS_DIR)
    args = parser.parse_args(argv)
    if args.wait:
        from study.plan import waiting_names
        while left := waiting_names():
            print(f"waiting: {len(left)} experiment(s) queued or running")
            time.sleep(60)
    exports = []
    if not args.no_experiments:
        exports += [(entry["name"], lambda entry=entry: export_experiment(entry)) for entry in experiments(args.match)]
    if args.workspace:
        exports.append((args.workspace, lambda: export_workspace(args.workspace)))
    exports += [(name, lambda rev=rev, name=name: export_commit(rev, name)) for rev, name in args.commit]
    refused = 0
    for name, export in exports:
        run = export()
        if run is None:
            print(f"skipped {name}: no run record made with its params ({RECORDS[1]}): the run did not finish, "
                  "or stopped before `record`")
            continue
        message = write_run(run, args.runs_dir, args.force)
        refused += message.startswith("REFUSED")
        print(message)
    if not exports:
        print("no finished experiments found and no --workspace run")
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())

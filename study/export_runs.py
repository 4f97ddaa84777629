"""Export finished runs to committed run files, `study/runs/<name>.json`: the data every report reads.

    python -m study.export_runs                          # every finished `dvc exp` experiment
    python -m study.export_runs --workspace NAME         # and the run in the working tree (`dvc repro`)
    python -m study.export_runs --commit REV NAME        # and a run committed at REV (dvc.lock + metrics/)
    python -m study.export_runs --wait                   # first wait until `dvc queue` has nothing left
    python -m study.export_runs --match 'man-*'          # only experiments whose name matches
    python -m study.export_runs --force                  # replace run files whose content changed

After a queue: `dvc queue start -j 1`, then `python -m study.export_runs --wait` and
`python -m study.make_reports`; commit `study/runs/` with the reports.

A run file holds the run's name, the commit it ran at (an experiment's baseline; for the
workspace, HEAD; for --commit, REV), the tracked files other than outputs that differed from that commit
(`uncommitted_code`: empty for a run of committed code), its full params (so a report
never depends on today's `params.yaml`), the params that differ from the `params.yaml` of that
commit (`corpus.source` and `seed` always), and every metrics file the run produced: retrieval
val/test, pair statistics, training (loss curve, batch diagnostics) and timings per iteration,
the chosen iteration, and the fine-tuning / InfoCSE++ metrics when those stages ran. JSON with
sorted keys, so the same run gives the same bytes.

Experiments are read from git, where `dvc exp run` commits a finished one
(`refs/exps/<baseline>/<name>`; `dvc exp pull` fetches them from a remote), not from
`dvc exp show`, which drops lists such as loss curves from metrics and shows queued experiments
with their parent's metrics. A metrics file counts only if the stage that wrote it ran for this
run: its `dvc.lock` entry must match the run's params, the file, its code deps and the outputs of
the stages it reads (themselves current). An experiment run with targets (`dvc exp run select
report`) keeps its baseline's fine-tuning metrics in its commit; they are left out. A run counts
as finished when `metrics/best.json` is current.
"""

from __future__ import annotations

import argparse
import datetime
import fnmatch
import hashlib
import json
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import yaml

RUNS_DIR = Path("study/runs")
EXPERIMENT_REF = re.compile(r"^refs/exps/([0-9a-f]{2})/([0-9a-f]{38})/(.+)$")
ALWAYS_RECORDED = ("corpus.source", "seed")
# What a run writes or sets: a run whose files differ from its commit only here ran that commit's code.
RUN_OUTPUTS = ("dvc.lock", "params.yaml", "metrics/", "reports/", "results/")

Reader = Callable[[str], "bytes | None"]


def git(*args: str) -> bytes:
    return subprocess.run(["git", *args], capture_output=True, check=True).stdout


def git_reader(rev: str) -> tuple[Reader, list[str]]:
    """Read files of commit `rev` (None for directories and absent files), and its file list."""
    listing = git("ls-tree", "-r", "-z", rev).decode().split("\0")
    blobs = {}
    for entry in filter(None, listing):
        meta, path = entry.split("\t", 1)
        if meta.split()[1] == "blob":
            blobs[path] = meta.split()[2]

    def read(path: str) -> bytes | None:
        blob = blobs.get(path.rstrip("/"))
        if blob and blob not in _BLOBS:
            _BLOBS[blob] = git("cat-file", "blob", blob)
        return _BLOBS.get(blob) if blob else None

    return read, sorted(blobs)


_BLOBS: dict[str, bytes] = {}  # git blob id -> content: code files are shared by every experiment


def workspace_reader() -> tuple[Reader, list[str]]:
    """Read files of the working tree (None for directories and absent files), and its metrics files."""
    def read(path: str) -> bytes | None:
        file = Path(path)
        return file.read_bytes() if file.is_file() else None

    return read, sorted(str(p) for p in Path("metrics").rglob("*.json"))


def flatten(params: dict, prefix: str = "") -> dict:
    """{"budget.max_pairs": 2560, ...}: one dotted key per leaf value."""
    flat = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


_ABSENT = object()


def lookup(params: dict, dotted: str):
    node = params
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return _ABSENT
        node = node[part]
    return node


def same_value(ours, recorded) -> bool:
    """Param equality across YAML readers: DVC can record 5.0e-5 as the string '5e-05'."""
    if isinstance(ours, dict) and isinstance(recorded, dict):
        return ours.keys() == recorded.keys() and all(same_value(ours[k], recorded[k]) for k in ours)
    if isinstance(ours, list) and isinstance(recorded, list):
        return len(ours) == len(recorded) and all(map(same_value, ours, recorded))
    if isinstance(ours, bool) or isinstance(recorded, bool):
        return ours is recorded
    if ours == recorded:
        return True
    try:
        return float(ours) == float(recorded)
    except (TypeError, ValueError):
        return False


def md5(content: bytes) -> str:
    return hashlib.md5(content).hexdigest()


def current_stages(lock: dict, params: dict, read: Reader) -> set[str]:
    """Stages of `dvc.lock` whose entry matches this run: params equal to the run's, file deps
    (code) with the recorded md5, and every dep another stage produces taken, with the md5 it
    recorded, from a stage that is itself current. What `dvc status` would call up to date, from
    committed data. (A lock can keep entries of stages dvc.yaml no longer has, so one path may
    have several producers: one current producer with the same md5 is enough.)"""
    stages = lock.get("stages") or {}
    producers: dict[str, list[tuple[str, str]]] = {}
    for name, stage in stages.items():
        for out in stage.get("outs") or []:
            producers.setdefault(out["path"], []).append((name, out.get("md5")))
    current = set()
    for name, stage in stages.items():
        recorded = (stage.get("params") or {}).get("params.yaml") or {}
        if not all(same_value(lookup(params, key), value) for key, value in recorded.items()):
            continue
        code = [dep for dep in stage.get("deps") or [] if dep["path"] not in producers]
        contents = [(dep, read(dep["path"])) for dep in code]  # None: a directory or data outside git
        if all(content is None or md5(content) == dep.get("md5") for dep, content in contents):
            current.add(name)
    changed = True
    while changed:  # a stage is current only if what it read came from current stages
        changed = False
        for name in sorted(current):
            for dep in stages[name].get("deps") or []:
                if dep["path"] in producers and not any(
                        producer in current and recorded == dep.get("md5") for producer, recorded in producers[dep["path"]]):
                    current.discard(name)
                    changed = True
                    break
    return current


def run_metrics(lock: dict, params: dict, read: Reader, files: list[str]) -> tuple[dict, list[str]]:
    """The metrics files this run produced ({path: data}) and those left out as not its own."""
    current = current_stages(lock, params, read)
    written_by = {out["path"]: (name, out.get("md5")) for name, stage in (lock.get("stages") or {}).items()
                  for out in stage.get("outs") or []}
    metrics, left_out = {}, []
    for path in files:
        if not (path.startswith("metrics/") and path.endswith(".json")):
            continue
        content = read(path)
        stage, recorded = written_by.get(path, (None, None))
        if content is not None and stage in current and md5(content) == recorded:
            metrics[path] = json.loads(content)
        else:
            left_out.append(path)
    return metrics, left_out


def changed_params(params: dict, defaults: dict) -> dict:
    """Dotted params whose value differs from `defaults` (a key absent there counts as changed)."""
    flat, base = flatten(params), flatten(defaults)
    changed = {key: value for key, value in flat.items() if base.get(key, _ABSENT) != value}
    changed.update({key: flat[key] for key in ALWAYS_RECORDED if key in flat})
    return changed


def build_run(name: str, source: str, commit: str, experiment: str | None, ran_at: str, read: Reader,
              files: list[str], defaults: dict) -> tuple[dict | None, list[str]]:
    """The run file's content, or None when the run did not finish (no current metrics/best.json)."""
    params = yaml.safe_load(read("params.yaml") or b"") or {}
    lock = yaml.safe_load(read("dvc.lock") or b"") or {}
    metrics, left_out = run_metrics(lock, params, read, files)
    if "metrics/best.json" not in metrics:
        return None, left_out
    return run_file(name, source, commit, experiment, ran_at, params, defaults, metrics), left_out


def run_file(name: str, source: str, commit: str, experiment: str | None, ran_at: str, params: dict,
             defaults: dict, metrics: dict) -> dict:
    """What every run file holds, however the run was made (study/gpu_runs.py adds to it)."""
    return {"name": name, "source": source, "commit": commit, "experiment": experiment, "ran_at": ran_at,
            "params": params, "params_changed": changed_params(params, defaults), "metrics": metrics}


def experiments(pattern: str = "*") -> list[dict]:
    """Finished experiments as git holds them: name, commit, baseline, commit time; when one name
    was run at several baselines, the newest."""
    found = {}
    refs = git("for-each-ref", "--format=%(objectname) %(committerdate:iso-strict) %(refname)", "refs/exps").decode()
    for line in refs.splitlines():
        commit, date, ref = line.split(" ", 2)
        match = EXPERIMENT_REF.match(ref)
        if not match or not fnmatch.fnmatchcase(match.group(3), pattern):
            continue
        entry = {"name": match.group(3), "experiment": commit, "commit": match.group(1) + match.group(2), "ran_at": date}
        previous = found.get(entry["name"])
        if previous:
            older = min(previous, entry, key=lambda e: (e["ran_at"], e["experiment"]))
            print(f"note: experiment {entry['name']} exists at two baselines; exporting the newer, "
                  f"not {older['experiment'][:7]} (at {older['commit'][:7]})")
            if older is entry:
                continue
        found[entry["name"]] = entry
    return [found[name] for name in sorted(found)]


def params_at(commit: str) -> dict:
    try:
        return yaml.safe_load(git("show", f"{commit}:params.yaml")) or {}
    except subprocess.CalledProcessError:
        return {}


def code_changes(paths: list[str]) -> list[str]:
    """Changed files that are not a run's outputs or params: code the commit does not hold."""
    return sorted(p for p in paths if not p.startswith(RUN_OUTPUTS) and not p.endswith(".gitignore"))


def export_experiment(entry: dict) -> tuple[dict | None, list[str]]:
    read, files = git_reader(entry["experiment"])
    run, left_out = build_run(entry["name"], "dvc exp", entry["commit"], entry["experiment"], entry["ran_at"], read,
                              files, params_at(entry["commit"]))
    if run is not None:  # `dvc exp run --queue` also runs uncommitted changes of the workspace
        changed = git("diff", "--name-only", entry["commit"], entry["experiment"]).decode().split()
        run["uncommitted_code"] = code_changes(changed)
    return run, left_out


def export_commit(rev: str, name: str) -> tuple[dict | None, list[str]]:
    """A run committed to the history (a `dvc repro` whose dvc.lock and metrics were committed)."""
    commit = git("rev-parse", f"{rev}^{{commit}}").decode().strip()
    read, files = git_reader(commit)
    ran_at = git("show", "-s", "--format=%cI", commit).decode().strip()
    run, left_out = build_run(name, "commit", commit, None, ran_at, read, files, params_at(commit))
    if run is not None:
        run["uncommitted_code"] = []
    return run, left_out


def export_workspace(name: str) -> tuple[dict | None, list[str]]:
    read, files = workspace_reader()
    head = git("rev-parse", "HEAD").decode().strip()
    best = Path("metrics/best.json")
    ran_at = (datetime.datetime.fromtimestamp(int(best.stat().st_mtime), datetime.timezone.utc).isoformat()
              if best.exists() else "")
    run, left_out = build_run(name, "workspace", head, None, ran_at, read, files, params_at(head))
    if run is not None:
        run["uncommitted_code"] = code_changes(git("diff", "--name-only", "HEAD").decode().split())
    return run, left_out


def render(run: dict) -> str:
    return json.dumps(run, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+-]", "_", name)


def write_run(run: dict, folder: Path, force: bool) -> str:
    """Write the run file; never replace one whose content differs unless `force`."""
    path = folder / f"{safe_name(run['name'])}.json"
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


def unfinished_in_queue() -> int:
    """Queued and running experiments (`dvc queue status`)."""
    result = subprocess.run([sys.executable, "-m", "dvc", "queue", "status"], capture_output=True, text=True, check=True)
    return sum(1 for line in result.stdout.splitlines() if line.split()[-1:] in (["Queued"], ["Running"]))


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
    while args.wait and (left := unfinished_in_queue()):
        print(f"waiting: {left} experiment(s) queued or running")
        time.sleep(60)
    exports = []
    if not args.no_experiments:
        exports += [(entry["name"], lambda entry=entry: export_experiment(entry)) for entry in experiments(args.match)]
    if args.workspace:
        exports.append((args.workspace, lambda: export_workspace(args.workspace)))
    exports += [(name, lambda rev=rev, name=name: export_commit(rev, name)) for rev, name in args.commit]
    refused = 0
    for name, export in exports:
        run, left_out = export()
        if run is None:
            print(f"skipped {name}: its metrics/best.json was not made with its params, code and inputs "
                  "(per dvc.lock): the run did not finish, or needs `dvc repro`")
            continue
        message = write_run(run, args.runs_dir, args.force)
        refused += message.startswith("REFUSED")
        note = f" (left out, not made by this run: {', '.join(left_out)})" if left_out else ""
        print(message + note)
    if not exports:
        print("no finished experiments found (refs/exps is empty) and no --workspace run")
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())

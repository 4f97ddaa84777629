"""Run a plan of pipeline runs on a CUDA machine that has torch but no DVC and no network, and turn
what comes back into run files (`study/runs/<name>.json`), as `export_runs` does for `dvc exp`.

    python -m study.gpu_runs plan [--set SET ...] [--corpora ...] [--seeds ...]  # here: sets of study/plan.yaml
    python -m study.gpu_runs run [--workers 5] [--deadline-seconds S]                        # there
    python -m study.gpu_runs import RESULTS.jsonl ...                                        # here
    python -m study.gpu_runs seed-model [DEST]               # the runs' seed model folder, on any machine

`plan` (after `python -m study.gpu_bundle`) adds to gpu-bundle/: `plan.json`, one entry per run
with its full params and the stage commands `dvc repro --dry --force TARGETS` (the set's targets)
lists for them (DVC's own order and templating), and `corpora/<corpus>/`: the
prepare stage's outputs, `documents.parquet` at the first seed and the label split of every seed
(`splits.parquet`), so that three seeds of both corpora fit the bundle; the runs of one corpus must
share its `corpus` and `split` params. Every run is fp32 (embed, evaluate, train, finetune) on
`cuda`, and starts from
the bundle's seed model: all-MiniLM-L6-v2 with fp16-rounded weights, upcast to fp32 and saved there
once as the folder `all-MiniLM-L6-v2-fp16`, which is the runs' `seed_model`. The reports therefore
never pool these runs with runs from the published weights (`seed_model` is part of a run's
evaluation): they form their own group, each run paired with its own seed-model row.

`run` executes the plan there: N worker processes take runs in plan order; each run gets its own
folder (params.yaml, the prepared corpus, metrics/corpus.json) and calls every stage module in
process, in the listed order, the `record` stage last. After each run a worker appends one JSON line
to `$RESULTS_DIR/runs.jsonl`: the run record (params, every metrics file), stage seconds, the md5 of
each code file it ran, and the versions of torch, transformers and sentence-transformers. A run that fails is
recorded with its error; a run cut off by the deadline is not recorded.

`import` writes one run file per finished run (source "gpu stage runner"): `commit` is the commit
the plan was made at (each result records it), and `uncommitted_code` lists the code files whose
md5 there differed from that commit's. Existing run files are never replaced with other content (as `export_runs`).
"""

from __future__ import annotations

import argparse
import copy
import datetime
import fcntl
import fnmatch
import hashlib
import json
import os
import runpy
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import yaml

from study.export_runs import RECORDS
from study.gpu_bundle import SIZE_LIMIT
from study.plan import GPU_SEED_MODEL, expand, load_plan
from study.plan import tagged as plan_tagged

BUNDLE = Path("gpu-bundle")
SEED_MODEL_FOLDER = GPU_SEED_MODEL
CODE_GLOBS = ("stages/*.py", "infocse/**/*.py", "dvc.yaml")
FP32 = {"precision": "fp32"}
SOURCE = "gpu stage runner"


def set_dotted(params: dict, dotted: str, value) -> None:
    keys = dotted.split(".")
    node = params
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = value


def is_code(path: str) -> bool:
    """Whether CODE_GLOBS finds `path` (a commit's file list; `**/` also matches no folder)."""
    return any(fnmatch.fnmatchcase(path, pattern) or fnmatch.fnmatchcase(path, pattern.replace("**/", ""))
               for pattern in CODE_GLOBS)


def code_md5(root: Path) -> dict[str, str]:
    files = sorted({p for pattern in CODE_GLOBS for p in root.glob(pattern) if p.is_file()})
    return {str(p.relative_to(root)): hashlib.md5(p.read_bytes()).hexdigest() for p in files}


# ------------------------------------------------------------------------------------------ plan (here)


def gpu_name(name: str, tag: str) -> str:
    """`<name>[-<tag>]-gpu-s<seed>`: GPU runs are never pooled with CPU runs of the same name."""
    return plan_tagged(name, f"{tag}-gpu" if tag else "gpu")


def needs_other_model(overrides: dict) -> bool:
    """A run whose seed model or round-1 model is not the bundle's: `plan` sets every run's `seed_model` to the
    bundle's, which would run another model's plan from MiniLM under that plan's name."""
    return "seed_model" in overrides or overrides.get("idc.first_round_model", "current") != "current"


def stage_commands(scratch: Path, params: dict, *targets: str) -> list[str]:
    """The commands `dvc repro --dry --force TARGETS` (none: the whole pipeline) runs for these params,
    in its order (prepare excluded), in `scratch`: a copy of the commit's files."""
    Path(scratch, "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")
    dry = subprocess.run([sys.executable, "-m", "dvc", "repro", "--dry", "--force", *targets], cwd=scratch,
                         capture_output=True, text=True)
    if dry.returncode:
        raise SystemExit(f"dvc repro --dry failed for these params:\n{dry.stderr.strip()}")
    commands = [line[2:] for line in dry.stdout.splitlines() if line.startswith("> ")]
    if not commands or not all(c.startswith("python -m stages.") for c in commands):
        raise SystemExit(f"unexpected stage commands from dvc: {commands}")
    return [c for c in commands if c != "python -m stages.prepare"]


def prepare_corpora(params_by_run: list[dict], dest: Path) -> None:
    """The prepare stage's outputs per corpus: documents at the first seed, every seed's split."""
    import pandas as pd

    from infocse.config import parse_config
    from infocse.corpora.build import prepare_corpus

    seeds_of: dict[str, list[int]] = {}
    prepared_by: dict[str, tuple] = {}
    for params in params_by_run:
        source = params["corpus"]["source"]
        what = (params["corpus"], params["split"])  # with the seed, what the prepare stage depends on
        if prepared_by.setdefault(source, what) != what:
            raise SystemExit(f"the runs of corpus {source!r} differ in their `corpus` or `split` params: "
                             "plan them separately")
        seeds_of.setdefault(source, [])
        if params["seed"] not in seeds_of[source]:
            seeds_of[source].append(params["seed"])
    for corpus, seeds in seeds_of.items():
        folder = dest / corpus
        folder.mkdir(parents=True)
        splits = {}
        for seed in seeds:
            params = next(p for p in params_by_run if p["corpus"]["source"] == corpus and p["seed"] == seed)
            documents, sentences, stats = prepare_corpus(parse_config(params))
            documents, sentences = documents.reset_index(drop=True), sentences.reset_index(drop=True)
            if seed == seeds[0]:
                documents.to_parquet(folder / "documents.parquet", index=False)
                sentences.to_parquet(folder / "sentences.parquet", index=False)
                first = documents
            else:  # only the split depends on the seed: check it, keep the split alone
                if not first.drop(columns="split").equals(documents.drop(columns="split")):
                    raise SystemExit(f"{corpus}: documents differ between seeds in more than the split")
                if not sentences.equals(pd.read_parquet(folder / "sentences.parquet")):
                    raise SystemExit(f"{corpus}: sentences differ between seeds")
            splits[f"s{seed}"] = documents["split"].to_numpy()
            (folder / f"corpus-s{seed}.json").write_text(json.dumps(stats, indent=1, sort_keys=True) + "\n")
        pd.DataFrame(splits).to_parquet(folder / "splits.parquet", index=False)


def plan(args: argparse.Namespace) -> None:
    if not (BUNDLE / "model").is_dir():
        raise SystemExit(f"{BUNDLE}/model is missing: build the bundle first (python -m study.gpu_bundle)")
    runs = [{**r, "name": gpu_name(r["name"], args.tag)} for set_name in args.set
            for r in expand(set_name, args.corpora, args.seeds)]
    runs = [r for r in runs if fnmatch.fnmatchcase(r["name"], args.match)]
    other_models = [r["name"] for r in runs if needs_other_model(r["overrides"])]
    if other_models:
        raise SystemExit(f"the bundle's only model is {SEED_MODEL_FOLDER}, and these runs need another one: "
                         f"{', '.join(other_models)}; leave them out (--match) and queue them with DVC "
                         "(python -m study.plan queue)")
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "stages", "infocse", "dvc.yaml"],
                           capture_output=True, text=True, check=True).stdout.strip()
    if dirty:  # the stage commands come from HEAD's dvc.yaml, the code from the working tree
        raise SystemExit(f"commit the pipeline's code first; it differs from {commit[:7]}:\n{dirty}")
    base = yaml.safe_load(Path("params.yaml").read_text(encoding="utf-8"))
    entries = []
    smoke = {"corpus.max_documents": args.max_documents} if args.max_documents else {}
    with tempfile.TemporaryDirectory() as scratch:
        subprocess.run(f"git archive HEAD | tar -x -C {shlex.quote(scratch)}", shell=True, check=True)
        subprocess.run(["git", "init", "-q"], cwd=scratch, check=True)
        for run in runs:
            params = copy.deepcopy(base)
            for key, value in {**run["overrides"], **FP32, **smoke, "device": args.device,
                               "seed_model": SEED_MODEL_FOLDER}.items():
                set_dotted(params, key, value)
            entries.append({"name": run["name"], "params": params,
                            "commands": stage_commands(Path(scratch), params, *run["targets"])})
            print(f"planned {run['name']}: {len(entries[-1]['commands'])} stages")
    shutil.rmtree(BUNDLE / "corpora", ignore_errors=True)
    prepare_corpora([e["params"] for e in entries], BUNDLE / "corpora")
    (BUNDLE / "plan.json").write_text(json.dumps({"commit": commit, "code_md5": code_md5(Path(".")),
                                                  "runs": entries}, indent=1) + "\n")
    size = sum(p.stat().st_size for p in BUNDLE.rglob("*") if p.is_file())
    print(f"{BUNDLE}/plan.json: {len(entries)} runs; bundle {size / 2**20:.1f} MiB")
    if size > SIZE_LIMIT:
        raise SystemExit(f"the bundle holds {size / 2**20:.1f} MiB, over {SIZE_LIMIT / 2**20:.0f} MiB: "
                         "plan fewer corpora")


# ------------------------------------------------------------------------------------------ run (there)


def fp32_seed_model(fp16_model: Path, dest: Path) -> None:
    """fp16 weights (the bundle's model folder) upcast to fp32 and saved once (stages load the stored dtype)."""
    if (dest / "modules.json").exists():
        return
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(fp16_model), device="cpu").float()
    tmp = dest.with_name(dest.name + ".tmp")
    model.save(str(tmp), create_model_card=False)
    tmp.rename(dest)


def seed_model_here(dest: Path) -> None:
    """The same folder as `run` makes there (the bundle's fp16 rounding, upcast), from the published weights:
    a CPU run with `seed_model: all-MiniLM-L6-v2-fp16` in its working tree joins these runs' group."""
    from study.gpu_bundle import save_fp16_model

    if dest.exists():
        raise SystemExit(f"{dest} exists: remove it first")
    with tempfile.TemporaryDirectory() as scratch:
        save_fp16_model(Path(scratch) / "model")
        fp32_seed_model(Path(scratch) / "model", dest)
    print(f"wrote {dest}")


def setup_run(entry: dict, bundle: Path, work: Path, model: Path) -> None:
    import pandas as pd

    shutil.rmtree(work, ignore_errors=True)
    (work / "data/corpus").mkdir(parents=True)
    (work / "metrics").mkdir()
    corpus = bundle / "corpora" / entry["params"]["corpus"]["source"]
    documents = pd.read_parquet(corpus / "documents.parquet")
    documents["split"] = pd.read_parquet(corpus / "splits.parquet")[f"s{entry['params']['seed']}"].to_numpy()
    documents.to_parquet(work / "data/corpus/documents.parquet", index=False)
    shutil.copy(corpus / "sentences.parquet", work / "data/corpus/sentences.parquet")
    shutil.copy(corpus / f"corpus-s{entry['params']['seed']}.json", work / "metrics/corpus.json")
    (work / SEED_MODEL_FOLDER).symlink_to(model)
    (work / "params.yaml").write_text(yaml.safe_dump(entry["params"], sort_keys=False), encoding="utf-8")


def run_stage_module(command: str) -> None:
    """`python -m stages.X ARGS` in this process; a nonzero exit is an error."""
    words = shlex.split(command)
    module, argv = words[2], words[3:]
    saved = sys.argv
    sys.argv = [module, *argv]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as stop:
        if stop.code not in (None, 0):
            raise RuntimeError(f"{command} exited with {stop.code}") from None
    finally:
        sys.argv = saved


def versions() -> dict:
    import importlib.metadata

    import torch

    found = {name: importlib.metadata.version(name) for name in ("torch", "transformers", "sentence-transformers")}
    found["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    return found


def worker(index: int, bundle: Path, runs_dir: Path, out: Path, deadline: float) -> None:
    repo = Path.cwd()
    sys.path.insert(0, str(repo))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(repo), os.environ.get("PYTHONPATH")]))
    planned = json.loads((bundle / "plan.json").read_text())
    entries = planned["runs"]
    claims = runs_dir / "claims"
    model = runs_dir / SEED_MODEL_FOLDER
    code = code_md5(repo)
    found = versions()
    for number, entry in enumerate(entries):
        try:
            os.close(os.open(claims / f"{number:04d}", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            continue
        if time.time() > deadline:
            print(f"w{index}: deadline reached before {entry['name']}", flush=True)
            return
        work = (runs_dir / entry["name"]).resolve()
        record = {"name": entry["name"], "commit": planned["commit"], "params": entry["params"], "code_md5": code,
                  "versions": found}
        started = time.time()
        seconds = {}
        try:
            setup_run(entry, bundle, work, model.resolve())
            os.chdir(work)
            for command in entry["commands"]:
                t0 = time.perf_counter()
                run_stage_module(command)
                seconds[command.removeprefix("python -m stages.")] = round(time.perf_counter() - t0, 2)
            made = next((Path(path) for path in RECORDS if Path(path).exists()), None)  # the pipeline's run record
            if made is None:
                raise RuntimeError(f"no run record ({' or '.join(RECORDS)}): the plan's commands end before `record`")
            record.update(json.loads(made.read_text()))  # params and metrics: importing is a copy
        except Exception as error:
            traceback.print_exc()
            record["error"] = f"{type(error).__name__}: {error}"
        finally:
            os.chdir(repo)
            shutil.rmtree(work / "models", ignore_errors=True)
        record["stage_seconds"] = seconds
        record["wall_seconds"] = round(time.time() - started, 1)
        record["finished_at"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        with open(out / "runs.jsonl", "a", encoding="utf-8") as sink:  # one file: few files come back
            fcntl.flock(sink, fcntl.LOCK_EX)
            sink.write(json.dumps(record, sort_keys=True) + "\n")
            sink.flush()
            fcntl.flock(sink, fcntl.LOCK_UN)
        best = (record.get("metrics") or {}).get("metrics/best.json", {})
        print(f"w{index}: {entry['name']} {'FAILED ' + record['error'] if 'error' in record else 'done'} "
              f"in {record['wall_seconds']:.0f}s; test R@1 {best.get('test', {}).get('recall@1')}", flush=True)


def run(args: argparse.Namespace) -> None:
    from study.gpu_bundle import activate

    taken = activate(args.bundle)
    print(f"from the bundle: {taken or 'nothing'}", flush=True)
    if args.worker is not None:
        worker(args.worker, args.bundle, args.runs_dir, args.out, args.deadline_at)
        return
    args.out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(args.runs_dir, ignore_errors=True)
    (args.runs_dir / "claims").mkdir(parents=True)
    fp32_seed_model(args.bundle / "model", args.runs_dir / SEED_MODEL_FOLDER)
    deadline = time.time() + args.deadline_seconds
    threads = str(max(1, (os.cpu_count() or 2) // args.workers))
    # one worker tokenizes over every core; several would oversubscribe them
    env = {**os.environ, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "true" if args.workers == 1 else "false"}
    procs = [subprocess.Popen([sys.executable, "-m", "study.gpu_runs", "run", "--worker", str(i),
                               "--bundle", str(args.bundle), "--runs-dir", str(args.runs_dir), "--out", str(args.out),
                               "--deadline-at", str(deadline)], env=env) for i in range(args.workers)]
    codes = [p.wait() for p in procs]
    print(f"workers exited {codes}", flush=True)


# ------------------------------------------------------------------------------------------ import (here)


def import_runs(args: argparse.Namespace) -> int:
    from study.export_runs import RUNS_DIR, run_file, write_run

    plan_commit = json.loads((args.bundle / "plan.json").read_text())["commit"]
    code_at = {}  # commit -> md5 of each code file there
    refused = 0
    for results in args.results:
        for line in Path(results).read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            if "error" in record or "metrics/best.json" not in (record.get("metrics") or {}):
                print(f"skipped {record['name']}: {record.get('error', 'no metrics/best.json')}")
                continue
            ran = record["code_md5"]
            commit = record.get("commit", plan_commit)  # older records lack it: the bundle's current plan
            if commit not in code_at:
                listing = subprocess.run(["git", "ls-tree", "-r", "--name-only", commit], capture_output=True,
                                         text=True, check=True).stdout.split()
                code_at[commit] = {path: hashlib.md5(subprocess.run(["git", "show", f"{commit}:{path}"],
                                   capture_output=True, check=True).stdout).hexdigest()
                                   for path in listing if is_code(path)}
            differs = sorted(p for p in set(ran) | set(code_at[commit]) if ran.get(p) != code_at[commit].get(p))
            run = {**run_file(record["name"], SOURCE, commit, None, record["finished_at"], record, differs),
                   "versions": record["versions"], "stage_seconds": record["stage_seconds"]}
            message = write_run(run, args.runs_dir or RUNS_DIR, args.force)
            refused += message.startswith("REFUSED")
            print(message)
    return 1 if refused else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("plan")
    p.add_argument("--set", nargs="+", choices=sorted(load_plan()), default=["main"],
                   help="sets of study/plan.yaml, e.g. main (Table 1), or fewshot ablations init")
    p.add_argument("--corpora", nargs="+", help="instead of each set's corpora")
    p.add_argument("--seeds", nargs="+", type=int, help="instead of each set's seeds")
    p.add_argument("--match", default="*", help="only runs whose name matches this glob (after --tag)")
    p.add_argument("--tag", default="", help="inserted before -gpu-s<seed> in every name: new names for runs "
                   "whose params changed since their run files were written (import never replaces those)")
    p.add_argument("--device", default="cuda", help="params `device` of every run (cpu: a smoke test here)")
    p.add_argument("--max-documents", type=int, default=None, help="params `corpus.max_documents` (a smoke test)")
    r = sub.add_parser("run")
    r.add_argument("--workers", type=int, default=5)
    r.add_argument("--deadline-seconds", type=float, default=3600, help="no run starts after this many seconds")
    r.add_argument("--bundle", type=Path, default=BUNDLE)
    r.add_argument("--runs-dir", type=Path, default=Path("gpu-runs"))
    r.add_argument("--out", type=Path, default=Path(os.environ.get("RESULTS_DIR", "gpu-results")))
    r.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    r.add_argument("--deadline-at", type=float, default=None, help=argparse.SUPPRESS)
    m = sub.add_parser("seed-model", help="write the runs' seed model folder here, from the published weights")
    m.add_argument("dest", type=Path, nargs="?", default=Path(SEED_MODEL_FOLDER))
    i = sub.add_parser("import")
    i.add_argument("results", nargs="+")
    i.add_argument("--bundle", type=Path, default=BUNDLE)
    i.add_argument("--runs-dir", type=Path, default=None)
    i.add_argument("--force", action="store_true")
    args = parser.parse_args(argv)
    if args.command == "plan":
        plan(args)
    elif args.command == "run":
        run(args)
    elif args.command == "seed-model":
        seed_model_here(args.dest)
    else:
        return import_runs(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Build gpu-bundle/: what an offline CUDA machine lacks to run `benchmarks/gpu_throughput.py` and the
runs of `study/gpu_runs.py` (which adds its plan and corpora to the same folder).

    python -m study.gpu_bundle [--dest gpu-bundle] [--corpus DIR] [--python 3.10 3.11 3.12 3.13]

Such a machine has torch, sentence-transformers, transformers, pandas, pyarrow and scipy, and no
network, DVC, blingfire or registry-packaged models. The bundle (git-ignored, under 64 MiB) holds:

* wheels/  `datasets` (the sentence-transformers trainer will not start without it), its small
  dependencies, `accelerate` and sentence-transformers, pinned to this environment's versions, for
  each Python version asked (binary wheels: manylinux x86_64). Installed there when missing, and
  sentence-transformers also when the machine has another version (the code pins it); see `activate`.
* model/   the seed model all-MiniLM-L6-v2 with fp16 weights (45 MiB instead of 87 MiB). The
  benchmark upcasts it to fp32 before use, so both arms of every comparison start from the same
  fp32 weights (the fp16-rounded seed model, not bit for bit the published one).
* corpus/  the prepared man-pages corpus (documents.parquet with the seed-0 label split of
  params.yaml, sentences.parquet), made by the prepare stage's own function; or a copy of an
  already prepared corpus folder (`--corpus data/corpus`).
* manifest.json  what is in it: versions, sizes and sha256 of every file.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

BUNDLE = Path("gpu-bundle")
SIZE_LIMIT = 64 * 2**20
# The trainer's extra: datasets and what it needs beyond torch / transformers / pandas / pyarrow.
BUNDLED = ("datasets", "dill", "multiprocess", "xxhash", "fsspec", "accelerate", "psutil", "sentence-transformers")
# Installed from the bundle even where the machine has another version: the code under test pins it.
EXACT = ("sentence-transformers",)
PYTHON_VERSIONS = ("3.10", "3.11", "3.12", "3.13")
PLATFORMS = ("manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_28_x86_64")
SEED_MODEL = "all-MiniLM-L6-v2"


def pinned(name: str) -> str:
    return f"{name}=={importlib.metadata.version(name)}"


def download_wheels(dest: Path, python_versions: tuple[str, ...]) -> None:
    """One wheel per bundled distribution and Python version (pip skips what it already has)."""
    dest.mkdir(parents=True, exist_ok=True)
    for version in python_versions:
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                   "--python-version", version, "--implementation", "cp", "--dest", str(dest)]
        command += [argument for platform in PLATFORMS for argument in ("--platform", platform)]
        subprocess.run(command + [pinned(name) for name in BUNDLED], check=True)


def save_fp16_model(dest: Path) -> None:
    from infocse.models import load_model, resolve_model_source

    model = load_model(resolve_model_source(SEED_MODEL), device="cpu")
    model.half()
    model.save(str(dest), create_model_card=False)


def prepare_manpages(dest: Path) -> dict:
    """The man-pages corpus as the prepare stage makes it, with params.yaml's split at seed 0."""
    import yaml

    from infocse.config import PARAMS_FILE, parse_config
    from infocse.corpora.build import prepare_corpus

    raw = yaml.safe_load(PARAMS_FILE.read_text(encoding="utf-8"))
    config = parse_config(raw)
    config = config.model_copy(update=dict(seed=0, corpus=config.corpus.model_copy(
        update=dict(source="manpages", max_documents=None))))
    documents, sentences, stats = prepare_corpus(config)
    dest.mkdir(parents=True)
    documents.to_parquet(dest / "documents.parquet", index=False)
    sentences.to_parquet(dest / "sentences.parquet", index=False)
    return stats


def manifest(root: Path, corpus_stats: dict | None) -> dict:
    files = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file() and p.name != "manifest.json"):
        files[str(path.relative_to(root))] = {"bytes": path.stat().st_size,
                                              "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    return {"seed_model": SEED_MODEL, "model_dtype": "float16 (upcast to float32 before use)",
            "wheels": [pinned(name) for name in BUNDLED], "corpus": corpus_stats,
            "bytes": sum(entry["bytes"] for entry in files.values()), "files": files}


def build(dest: Path, corpus: Path | None, python_versions: tuple[str, ...]) -> dict:
    scratch = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    download_wheels(scratch / "wheels", python_versions)
    save_fp16_model(scratch / "model")
    if corpus is not None:
        shutil.copytree(corpus, scratch / "corpus", ignore=lambda _, names: [n for n in names if not n.endswith(".parquet")])
        stats = {"copied_from": str(corpus)}
    else:
        stats = prepare_manpages(scratch / "corpus")
    info = manifest(scratch, stats)
    (scratch / "manifest.json").write_text(json.dumps(info, indent=1) + "\n")
    if info["bytes"] > SIZE_LIMIT:
        raise SystemExit(f"the bundle holds {info['bytes'] / 2**20:.1f} MiB, over {SIZE_LIMIT / 2**20:.0f} MiB")
    shutil.rmtree(dest, ignore_errors=True)
    scratch.rename(dest)
    return info


# ---------------------------------------------------------------- on the GPU machine
def missing(names: tuple[str, ...] = BUNDLED, wheels: Path | None = None) -> list[str]:
    """Bundled distributions absent here, and those of EXACT whose version differs from the bundled wheel's."""
    found = []
    for name in names:
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found.append(name)
            continue
        if wheels is not None and name in EXACT and pinned_in(wheels, name) not in (name, f"{name}=={version}"):
            found.append(name)
    return found


def activate(bundle: Path = BUNDLE) -> list[str]:
    """Make the bundled packages this interpreter lacks importable: install their wheels (no index,
    no dependencies) into bundle/site-packages once, and put it first on sys.path and PYTHONPATH
    (dataloader workers). Call before sentence-transformers is imported: it looks for `datasets`
    on import. Returns the distributions taken from the bundle."""
    site = (bundle / "site-packages").resolve()  # dill pickles what lives under "site-packages" by reference
    wheels = bundle / "wheels"
    if site.is_dir() and str(site) not in sys.path:
        sys.path.insert(0, str(site))
        importlib.invalidate_caches()
    absent = missing(wheels=wheels if wheels.is_dir() else None)
    if absent and wheels.is_dir():
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
                        "--find-links", str(wheels), "--target", str(site), *[pinned_in(wheels, n) for n in absent]],
                       check=True)
        if str(site) not in sys.path:
            sys.path.insert(0, str(site))
        importlib.invalidate_caches()
    if site.is_dir():
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    return sorted(set(absent) - set(missing(wheels=wheels if wheels.is_dir() else None))) if absent else []


def pinned_in(wheels: Path, name: str) -> str:
    """`name==version` of the bundled wheels of `name` (file names use underscores)."""
    versions = {path.name.split("-")[1] for path in wheels.glob(f"{name.replace('-', '_')}-*.whl")}
    return f"{name}=={versions.pop()}" if len(versions) == 1 else name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dest", type=Path, default=BUNDLE)
    parser.add_argument("--corpus", type=Path, default=None,
                        help="a prepared corpus folder to copy (documents.parquet, sentences.parquet); "
                             "default: prepare the man pages here")
    parser.add_argument("--python", nargs="+", default=list(PYTHON_VERSIONS), help="Python versions of the wheels")
    args = parser.parse_args()
    info = build(args.dest, args.corpus, tuple(args.python))
    print(f"{args.dest}: {info['bytes'] / 2**20:.1f} MiB in {len(info['files'])} files")


if __name__ == "__main__":
    main()

"""record: the run record -> one JSON with the run's params (the whole params.yaml) and every
metrics file the named inputs hold ({path: content}).

DVC makes it for this run: its deps are those inputs and every param, so a record in an
experiment's commit belongs to that experiment, and exporting a study run is reading this file.
`record` covers the unsupervised loop (the study's unlabelled runs stop there); `record_fewshot`
is that record (`--base`) with the labels, fine-tuning and InfoCSE++ metrics added, so a run that
stops at it has made both.

    python -m stages.record OUTPUT [--base RECORD] INPUT...   # INPUT: a metrics JSON file or a folder of them
"""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from infocse.errors import StageError, run_stage
from infocse.io import read_json, write_json


def run_record(inputs: list[str], base: str | None = None) -> dict:
    metrics = read_json(base)["metrics"] if base else {}
    for name in inputs:
        path = Path(name)
        if not path.exists():
            raise StageError(f"{path} not found: run the stages before `record` (dvc repro does)")
        for file in sorted(path.rglob("*.json")) if path.is_dir() else [path]:
            metrics[file.as_posix()] = read_json(file)
    return {"params": yaml.safe_load(Path("params.yaml").read_text(encoding="utf-8")), "metrics": metrics}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output")
    parser.add_argument("--base", help="a record whose metrics this one starts from")
    parser.add_argument("inputs", nargs="+")
    args = parser.parse_args()
    write_json(args.output, run_record(args.inputs, args.base))


if __name__ == "__main__":
    run_stage(main)

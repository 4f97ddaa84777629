"""record: the run record -> one JSON with the run's params (the whole params.yaml) and every
metrics file the named inputs hold ({path: content}).

DVC makes it for this run: its deps are those inputs and every param, so a record in an
experiment's commit belongs to that experiment, and exporting a study run is reading this file.
`record` covers the unsupervised loop (the study's unlabelled runs stop there); `record_fewshot`
adds the labels, fine-tuning and InfoCSE++ metrics.

    python -m stages.record OUTPUT INPUT...   # INPUT: a metrics JSON file or a folder of them
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from infocse.errors import StageError, run_stage
from infocse.io import read_json, write_json


def run_record(inputs: list[str]) -> dict:
    metrics = {}
    for name in inputs:
        path = Path(name)
        if not path.exists():
            raise StageError(f"{path} not found: run the stages before `record` (dvc repro does)")
        for file in sorted(path.rglob("*.json")) if path.is_dir() else [path]:
            metrics[file.as_posix()] = read_json(file)
    return {"params": yaml.safe_load(Path("params.yaml").read_text(encoding="utf-8")), "metrics": metrics}


def main() -> None:
    output, *inputs = sys.argv[1:]
    write_json(output, run_record(inputs))


if __name__ == "__main__":
    run_stage(main)

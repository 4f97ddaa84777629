#!/usr/bin/env bash
# Install, then run the test suite (unit tests, a tiny end-to-end `dvc repro`, a smoke run of the real model).
# Two pytest workers, one test file each at a time (module fixtures build once), the slowest files
# first (tests/conftest.py), one thread per process: the tests' models are tiny, and torch threads
# competing for the same cores spin.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
. .venv/bin/activate
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
HF_HUB_OFFLINE=1 python -m pytest -q -n "${TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder --durations=25 "$@"

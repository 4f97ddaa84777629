#!/usr/bin/env bash
# Queue the runs behind reports/comparison.md as `dvc exp run` experiments, then run them one at
# a time and gather the report:
#
#   bash scripts/queue_comparison.sh [main|ablations|all] [corpus ...]   # default: main bbc manpages
#   dvc queue start -j 1          # one at a time: each run uses every core
#   python -m scripts.compare_experiments
#
# main:      for seeds 0 1 2: the seed model + InfoCSE (init none), and one round of SimCSE, CONPONO, ICT
# ablations: seed 0: Mirror-BERT, ConSERT, K=2, K=3, InfoCSE from each init (conpono, simcse,
#            ict), round 1 mined by all-mpnet-base-v2; seeds 0 1 2: IDC K-means
# Each experiment is named <corpus>-<row>-s<seed>; an existing name is replaced (--force).
set -euo pipefail
cd "$(dirname "$0")/.."
set_name="${1:-main}"
shift || true
corpora=("${@:-bbc manpages}")
corpora=(${corpora[@]})
seeds=(0 1 2)  # the main table's runs, and the K-means ablation's

queue() {  # queue NAME PARAM...
  local name="$1"; shift
  local args=()
  for param in "$@"; do args+=(-S "$param"); done
  dvc exp run --queue --force -n "$name" "${args[@]}"
}

for corpus in "${corpora[@]}"; do
  short="${corpus:0:3}"
  if [[ "$set_name" == main || "$set_name" == all ]]; then
    for seed in "${seeds[@]}"; do
      queue "$short-infocse-s$seed" "corpus.source=$corpus" "seed=$seed"
      for method in simcse conpono ict; do
        queue "$short-$method-s$seed" "corpus.source=$corpus" "seed=$seed" "init.method=$method" "loop.max_iterations=0"
      done
    done
  fi
  if [[ "$set_name" == ablations || "$set_name" == all ]]; then
    for method in mirror consert; do
      queue "$short-$method-s0" "corpus.source=$corpus" "seed=0" "init.method=$method" "loop.max_iterations=0"
    done
    for seed in "${seeds[@]}"; do
      queue "$short-kmeans-s$seed" "corpus.source=$corpus" "seed=$seed" "idc.method=kmeans"
    done
    for k in 2 3; do
      queue "$short-k$k-s0" "corpus.source=$corpus" "seed=0" "idc.k=$k"
    done
    for method in conpono simcse ict; do
      queue "$short-infocse-init-$method-s0" "corpus.source=$corpus" "seed=0" "init.method=$method"
    done
    queue "$short-sbert-round1-s0" "corpus.source=$corpus" "seed=0" "idc.first_round_annotator=all-mpnet-base-v2"
  fi
done
dvc queue status

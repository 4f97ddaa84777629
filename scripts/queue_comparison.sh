#!/usr/bin/env bash
# Queue the runs behind reports/comparison.md as `dvc exp run` experiments of the self-supervised
# part of the pipeline (targets `select report`: no labels, no fine-tuning), then run them one at a
# time, export them as committed run files and regenerate the reports:
#
#   bash scripts/queue_comparison.sh [main|larger|ablations|init|sweep|mixed|all] [corpus ...]
#   dvc queue start -j 1          # one at a time: each run uses every core
#   python -m scripts.export_runs --wait && python -m scripts.make_reports
#   git add results/runs reports  # the run files are the data behind every report
#
# main:      seeds 0 1 2: the seed model + InfoCSE (init none), and one round of each baseline:
#            SimCSE, Mirror-BERT, text shuffle + cutoff (ConSERT-style), ICT, neighbour pairs
#            (CONPONO-style)
# larger:    seeds 0 1 2: all-mpnet-base-v2 scored as it is (the seed model set to it, no training; the
#            model a user would pick instead; needs `bash scripts/install.sh --mpnet`)
# ablations: seed 0 (SEEDS if given): K=2, K=3, InfoCSE from each init (neighbours, simcse, ict),
#            round 1 mined by all-mpnet-base-v2, three iterations with patience for all three
#            (convergence); seeds 0 1 2: IDC K-means
# init:      seeds 0 1 2: InfoCSE from each init (INITS="neighbours simcse ict" by default), beside the
#            main set's one round of that baseline (whose init stage the run cache restores)
# sweep:     the pair budget, InfoCSE and neighbour pairs at the same budget, seeds 0 1 2: 2,560 pairs at
#            20 per document (the default: the main runs), and every pair at 10, 20 and 40 per
#            document (budget.max_pairs=all); BUDGETS="all10 ..." limits it to those budgets (names:
#            default all10 all20 all40), e.g. `BUDGETS=all20 bash scripts/queue_comparison.sh sweep bbc`
#            for the chosen budget on another corpus
# mixed:     documents that mix topics (corpus.mix.sources: MIX_SOURCES="3" and MIX_ORDERS="interleaved
#            concatenated" by default), seeds 0 1 2: the seed model + InfoCSE and neighbour pairs; SimCSE
#            at seed 0 as a control whose pairs mixing cannot make wrong (MIX_CONTROL=0: none) (names:
#            <corpus>-mix3i-... / -mix3c-...); e.g. the curve over sources:
#            `MIX_SOURCES="2 4 8" MIX_ORDERS=interleaved MIX_CONTROL=0 bash scripts/queue_comparison.sh mixed`
# Corpora default to "bbc manpages" (sweep, mixed: manpages). Each experiment is named
# <corpus>-<row>[-<budget>][-<TAG>]-s<seed>. An experiment of the same name at this commit is replaced
# once it has a run file, and refused otherwise (scripts/queue_experiment.sh); export_runs refuses to
# replace a run file with other content, so give runs of new code a TAG (e.g. TAG=fixed). With
# ONLY_MISSING=1, a name that already has a run file in results/runs is not queued (to resume a queue
# that died: export what finished first).
# SEEDS (default "0 1 2"; 0 for the ablations' one-seed studies) replaces the seeds of every set:
# SEEDS="3 4" TAG=fixed ... main manpages
# adds seeds 3 and 4 where reports/paper_tables.md asks for them.
# PRECISION=bf16 (or fp32) sets params `precision` (default: params.yaml's, fp32): the reports compare
# runs by the precision they ran in (reports/precision.md sets bf16 beside fp32).
# Experiments run the committed code: commit before queueing (export_runs records any uncommitted
# code it finds).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/queue_experiment.sh
set_name="${1:-main}"
shift || true
case "$set_name" in
  main|larger|ablations|init|sweep|mixed|all) ;;
  *) echo "unknown set '$set_name' (known: main larger ablations init sweep mixed all)" >&2; exit 2 ;;
esac
if [[ $# -gt 0 ]]; then
  corpora=("$@")
elif [[ "$set_name" == sweep || "$set_name" == mixed ]]; then
  corpora=(manpages)
else
  corpora=(bbc manpages)
fi
read -ra seeds <<< "${SEEDS:-0 1 2}"  # SEEDS="3 4": more seeds where a comparison asks for them
for seed in "${seeds[@]}"; do
  [[ "$seed" =~ ^[0-9]+$ ]] || { echo "SEEDS: '$seed' is not a non-negative integer" >&2; exit 2; }
done
# budget -> "max_pairs_per_document max_pairs"; `default` is params.yaml's (its runs are the main set's)
declare -A budgets=([default]="20 2560" [all10]="10 all" [all20]="20 all" [all40]="40 all")

sweep_budgets="${BUDGETS:-all20 default all10 all40}"
for budget in $sweep_budgets; do
  [[ -n "${budgets[$budget]:-}" ]] || { echo "BUDGETS: unknown budget '$budget' (known: default all10 all20 all40)" >&2; exit 2; }
done

if [[ "$set_name" == larger || "$set_name" == all ]]; then  # its runs would each fail at init without the model
  python - <<'EOF_PY' || exit 2
import sys

from infocse.errors import StageError
from infocse.models import SPLIT_ZIP_MODELS, split_zip_parts

try:
    split_zip_parts(*SPLIT_ZIP_MODELS["all-mpnet-base-v2"])
except StageError as error:
    sys.exit(f"the larger set needs all-mpnet-base-v2 (bash scripts/install.sh --mpnet): {error}")
EOF_PY
fi

mix_sources="${MIX_SOURCES:-3}"  # MIX_SOURCES="2 4 8": the curve over sources per training document
for sources in $mix_sources; do
  [[ "$sources" =~ ^[0-9]+$ && "$sources" -ge 2 ]] || { echo "MIX_SOURCES: '$sources' is not an integer >= 2" >&2; exit 2; }
done

precision_args=()
case "${PRECISION:-}" in
  "") ;;
  fp32|bf16) precision_args+=(-S "precision=$PRECISION") ;;
  *) echo "PRECISION must be fp32 or bf16, got '${PRECISION}'" >&2; exit 2 ;;
esac

tag="${TAG:+-$TAG}"
queue() {  # queue NAME PARAM...: the unlabelled stages only; NAME ends in -s<seed>, the TAG goes before it
  local name="${1%-s*}$tag-s${1##*-s}"; shift
  local args=()
  for param in "$@"; do args+=(-S "$param"); done
  queue_experiment "$name" "${args[@]}" "${precision_args[@]}" select report
}

queue_inits() {  # queue_inits SEED METHOD...: InfoCSE started from one round of each baseline (uses $corpus, $short)
  local seed="$1"; shift
  for method in "$@"; do
    queue "$short-infocse-init-$method-s$seed" "corpus.source=$corpus" "seed=$seed" "init.method=$method"
  done
}

for corpus in "${corpora[@]}"; do
  short="${corpus:0:3}"
  if [[ "$set_name" == main || "$set_name" == all ]]; then
    for seed in "${seeds[@]}"; do
      queue "$short-infocse-s$seed" "corpus.source=$corpus" "seed=$seed"
      for method in simcse mirror text_shuffle_cutoff ict neighbours; do
        queue "$short-$method-s$seed" "corpus.source=$corpus" "seed=$seed" "init.method=$method" "loop.max_iterations=0"
      done
    done
  fi
  if [[ "$set_name" == larger || "$set_name" == all ]]; then
    for seed in "${seeds[@]}"; do
      queue "$short-mpnet-s$seed" "corpus.source=$corpus" "seed=$seed" "seed_model=all-mpnet-base-v2" "loop.max_iterations=0"
    done
  fi
  if [[ "$set_name" == ablations || "$set_name" == all ]]; then
    for seed in "${seeds[@]}"; do
      queue "$short-kmeans-s$seed" "corpus.source=$corpus" "seed=$seed" "idc.method=kmeans"
    done
    read -ra study_seeds <<< "${SEEDS:-0}"  # one seed unless more are asked for
    for seed in "${study_seeds[@]}"; do
      for k in 2 3; do
        queue "$short-k$k-s$seed" "corpus.source=$corpus" "seed=$seed" "idc.k=$k"
      done
      queue_inits "$seed" neighbours simcse ict
      queue "$short-sbert-round1-s$seed" "corpus.source=$corpus" "seed=$seed" "idc.first_round_annotator=all-mpnet-base-v2"
      # params.yaml lists iterations 1 and 2 (DVC templates have no arithmetic): add the third
      queue "$short-iter3-s$seed" "corpus.source=$corpus" "seed=$seed" "loop.patience=3" "++iterations.3.prev=2"
    done
  fi
  if [[ "$set_name" == init ]]; then
    read -ra inits <<< "${INITS:-neighbours simcse ict}"
    for method in "${inits[@]}"; do
      [[ " simcse mirror text_shuffle_cutoff ict neighbours " == *" $method "* ]] ||
        { echo "INITS: unknown method '$method' (known: simcse mirror text_shuffle_cutoff ict neighbours)" >&2; exit 2; }
    done
    for seed in "${seeds[@]}"; do queue_inits "$seed" "${inits[@]}"; done
  fi
  if [[ "$set_name" == sweep || "$set_name" == all ]]; then
    # seed-major order, InfoCSE's budgets before the neighbour pairs': a queue stopped part-way still holds
    # every budget InfoCSE's setting is chosen from, at the first seeds
    for seed in "${seeds[@]}"; do
      for method in infocse neighbours; do
        for budget in $sweep_budgets; do
          read -r per_document max_pairs <<< "${budgets[$budget]}"
          suffix="-$budget"
          if [[ "$budget" == default ]]; then
            [[ "$set_name" == all ]] && continue  # queued above as the main set's runs
            suffix=""
          fi
          limits=("budget.max_pairs_per_document=$per_document" "budget.max_pairs=$max_pairs")
          one_round=()
          [[ "$method" == neighbours ]] && one_round=("init.method=neighbours" "loop.max_iterations=0")
          queue "$short-$method$suffix-s$seed" "corpus.source=$corpus" "seed=$seed" "${limits[@]}" "${one_round[@]}"
        done
      done
    done
  fi
  if [[ "$set_name" == mixed || "$set_name" == all ]]; then
    for sources in $mix_sources; do
      for order in ${MIX_ORDERS:-interleaved concatenated}; do
        mix=("corpus.source=$corpus" "corpus.mix.sources=$sources" "corpus.mix.order=$order")
        prefix="$short-mix$sources${order:0:1}"
        for seed in "${seeds[@]}"; do
          queue "$prefix-infocse-s$seed" "${mix[@]}" "seed=$seed"
          queue "$prefix-neighbours-s$seed" "${mix[@]}" "seed=$seed" "init.method=neighbours" "loop.max_iterations=0"
          if [[ "$seed" == 0 && "${MIX_CONTROL:-1}" == 1 ]]; then
            queue "$prefix-simcse-s$seed" "${mix[@]}" "seed=$seed" "init.method=simcse" "loop.max_iterations=0"
          fi
        done
      done
    done
  fi
done
dvc queue status
echo "next: dvc queue start -j 1 && python -m scripts.export_runs --wait && python -m scripts.make_reports"

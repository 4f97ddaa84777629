# Sourced by the queue scripts. queue_experiment NAME ARG...: queue `dvc exp run` ARGs as experiment
# NAME, replacing an experiment of that name; with ONLY_MISSING=1, not if results/runs/NAME.json
# exists (to resume a queue that died). Not `--force`: a forced experiment reruns every stage, while
# without it DVC's run cache restores each stage whose command, deps and params an earlier run shared
# (a few-shot budget reruns only its fine-tuning, a control only its longer fine-tuning).
queue_experiment() {
  local name="$1"; shift
  if [[ "${ONLY_MISSING:-0}" == 1 && -e "results/runs/$name.json" ]]; then
    echo "skip $name: results/runs/$name.json exists"
    return
  fi
  dvc exp remove "$name" >/dev/null 2>&1 || true  # none of that name: nothing to replace
  dvc exp run --queue -n "$name" "$@"
}

# Sourced by the queue scripts (checks ONLY_MISSING and TAG). queue_experiment NAME ARG...: queue `dvc exp run` ARGs as experiment
# NAME. With ONLY_MISSING=1, not if results/runs/NAME.json exists (to resume a queue that died).
# An experiment NAME at this commit is replaced only once it has a run file (export first: a run
# not exported would be lost); a NAME already queued or running is refused. Experiment names are
# per commit: one of an older commit stays as it is. Not `--force`: a forced experiment reruns every
# stage, while without it DVC's run cache restores each stage whose command, deps and params an
# earlier run shared (another budget of the same seed reruns only the labelled stages: labels,
# fine-tuning, InfoCSE++ rounds; a control only its fine-tuning).
[[ "${ONLY_MISSING:-0}" == 0 || "${ONLY_MISSING:-0}" == 1 ]] ||
  { echo "ONLY_MISSING must be 0 or 1, got '$ONLY_MISSING'" >&2; exit 2; }
[[ "${TAG:-}" =~ ^[A-Za-z0-9_]*$ ]] || { echo "TAG must be letters, digits or _, got '$TAG'" >&2; exit 2; }

queue_experiment() {
  local name="$1"; shift
  if [[ "${ONLY_MISSING:-0}" == 1 && -e "results/runs/$name.json" ]]; then
    echo "skip $name: results/runs/$name.json exists"
    return
  fi
  if dvc queue status 2>/dev/null | awk -v name="$name" '$2 == name && ($NF == "Queued" || $NF == "Running") {found = 1}
                                                        END {exit !found}'; then
    echo "$name is already queued or running (dvc queue status): remove it (dvc queue remove $name) or use a TAG" >&2
    return 1
  fi
  local head ref
  head="$(git rev-parse HEAD)"
  ref="refs/exps/${head:0:2}/${head:2}/$name"
  if git rev-parse -q --verify "$ref" >/dev/null; then
    if [[ ! -e "results/runs/$name.json" ]]; then
      echo "$name ran at this commit but has no run file: export it first (python -m scripts.export_runs)" >&2
      return 1
    fi
    dvc exp remove "$ref" >/dev/null
  fi
  dvc exp run --queue -n "$name" "$@"
}

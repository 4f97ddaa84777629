#!/usr/bin/env bash
# What a CI job runs for the pipeline (docs/caching.md): install, `dvc repro` that restores every
# stage whose deps and params did not change from the DVC remote instead of recomputing it, push the
# outputs and the run cache for the next job, then one Markdown report for the pull request
# (scripts/ci_report.py: params and headline metrics diff, stages run or restored, changed plots).
# Everything comes from the environment, so the same steps run locally:
#   DVC_REMOTE_URL       storage shared by CI jobs (a folder, s3://, gs://, azure://, ssh://); added as
#                        the default remote in .dvc/config.local, which git ignores. Unset: the remote
#                        already configured, else none (nothing restored, nothing pushed). Credentials:
#                        the storage's own variables (AWS_ACCESS_KEY_ID, GOOGLE_APPLICATION_CREDENTIALS, ...)
#   DIFF_AGAINST         branch or rev the diffs compare with; default: the pull (merge) request's
#                        target branch (GITHUB_BASE_REF, CI_MERGE_REQUEST_TARGET_BRANCH_NAME), else HEAD
#                        (the committed params and metrics). Fetched from origin when the checkout lacks it
#   CI_REPORT_DIR        where the report goes: report.md and its plots (default ci-report); the job
#                        posts report.md as the pull-request comment (examples/ci/)
#   GITHUB_STEP_SUMMARY  the file the report is also appended to (GitHub Actions sets it); else stdout
#   SKIP_INSTALL=1       use the dvc and python on PATH instead of running scripts/install.sh
set -euo pipefail
cd "$(dirname "$0")/.."

step() { echo "== $*" >&2; }

if [ "${SKIP_INSTALL:-0}" != 1 ]; then
  step "install"
  bash scripts/install.sh
  . .venv/bin/activate
  case "${DVC_REMOTE_URL:-}" in  # the remote's DVC plugin, at the installed DVC's version
    s3://*) extra=s3 ;; gs://*) extra=gs ;; azure://*) extra=azure ;; ssh://*) extra=ssh ;; *) extra= ;;
  esac
  if [ -n "$extra" ]; then
    python -m pip install -q "dvc[$extra]==$(python -c 'import dvc; print(dvc.__version__)')"
  fi
fi

if [ -n "${DVC_REMOTE_URL:-}" ]; then
  dvc remote add --local --default --force ci "$DVC_REMOTE_URL"
fi
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
remote=$(dvc remote default 2>/dev/null) || remote=""  # none: it prints "No default remote set", status 1
if [ -n "$remote" ]; then
  step "dvc repro --pull (unchanged stages are restored from the remote, the rest run)"
  dvc repro --pull 2>&1 | tee "$log"
  step "dvc push --run-cache"
  dvc push --run-cache
  # A run-cache entry also restores the stage's `cache: false` metrics, which `dvc push` leaves to
  # git: push the ones this job produced, or another machine cannot restore the stage from the entry.
  python - <<'EOF_PY'
from dvc.repo import Repo

with Repo() as repo:
    outs = [out for out in repo.index.outs
            if not out.use_cache and out.hash_info and out.cache.exists(out.hash_info.value)]
    objects = []
    for out in outs:  # a directory's listing names its files: send them too, or it restores nothing
        objects.append(out.hash_info)
        if out.hash_info.isdir:
            tree = out.get_obj()
            if tree is None:
                raise SystemExit(f"{out}: its directory listing {out.hash_info.value} is not readable in the cache")
            objects.extend(entry for _, _, entry in tree)
    result = repo.cloud.push(objects)
    if result.failed:
        raise SystemExit(f"failed to push {len(result.failed)} of the run cache's cache: false outputs")
    print(f"{len(result.transferred)} objects of cache: false outputs pushed for the run cache")
EOF_PY
else
  echo "warning: no DVC remote (set DVC_REMOTE_URL; a pull request from a fork gets no secrets): stages not in" \
       "the local cache are recomputed, nothing is restored or pushed, and the report says so" >&2
  step "dvc repro"
  dvc repro 2>&1 | tee "$log"
fi

target="${DIFF_AGAINST:-${GITHUB_BASE_REF:-${CI_MERGE_REQUEST_TARGET_BRANCH_NAME:-HEAD}}}"
if ! rev=$(git rev-parse --verify --quiet "$target^{commit}"); then
  step "git fetch origin $target"
  git fetch --quiet origin "$target"
  rev=$(git rev-parse --verify FETCH_HEAD)
fi
out="${CI_REPORT_DIR:-ci-report}"
step "the report: $out/report.md"
python -m scripts.ci_report --against "$rev" --label "$target" --repro-log "$log" ${remote:+--remote "$remote"} \
  --out "$out"
cat "$out/report.md" >>"${GITHUB_STEP_SUMMARY:-/dev/stdout}"

"""The CI script users copy (scripts/ci_pipeline.sh, docs/caching.md) on the tiny pipeline, with a
real DVC remote in a folder: a fresh clone restores every stage instead of recomputing it, a change
reruns only the stages it touched, a second fresh clone of that change restores those from the run
cache, and the summary names what the change did to params and metrics."""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from pipeline_helpers import REPO, locked_outputs, run, update_params
from pipeline_project import report_rows

SCRIPT = "scripts/ci_pipeline.sh"
# A fine-tuning param: read by the fine-tuning and InfoCSE++ stages only, late in the pipeline
LATE_CHANGE = {"finetune": {"learning_rate": 5.0e-4}}
DOWNSTREAM_OF_LATE_CHANGE = {"finetune@f0", "finetune@best", "plusplus@2", "plusplus@3", "select_plusplus"}
UP_TO_DATE = "Data and pipelines are up to date."


@dataclass
class Job:
    """What one run of the CI script did in a clone."""

    ran: list[str]
    from_run_cache: set[str]
    summary: str
    status: str


def git(clone: Path, *args: str) -> str:
    return run(["git", "-c", "user.name=ci", "-c", "user.email=ci@example.com", *args], clone).stdout.strip()


def ci_job(clone: Path, remote: Path, summary: Path, diff_against: str = "HEAD") -> Job:
    """Run the CI script as a job would, with the remote and the diff target from the environment
    (install skipped: the test's environment is the installed one)."""
    result = run(["env", "SKIP_INSTALL=1", f"DVC_REMOTE_URL={remote}", f"DIFF_AGAINST={diff_against}",
                  f"GITHUB_STEP_SUMMARY={summary}", "bash", SCRIPT], clone)
    status = run(["dvc", "status"], clone).stdout
    return Job(ran=re.findall(r"Running stage '([^']+)'", result.stdout),
               from_run_cache=set(re.findall(r"Stage '([^']+)' is cached - skipping run", result.stdout)),
               summary=summary.read_text(), status=status)


@dataclass
class CiRuns:
    fresh: Job
    change: Job
    change_again: Job
    changed_metric_files: set[str]
    change_outputs: dict[str, str]
    change_again_outputs: dict[str, str]


@pytest.fixture(scope="module")
def ci_runs(built_project, tmp_path_factory) -> CiRuns:
    """Clone A (the tiny project after its `dvc repro`, committed as the base branch) pushes with the
    script; clone B, fresh, runs it, then a late change on a branch; clone C, fresh, runs that branch."""
    origin = built_project[0]
    root = tmp_path_factory.mktemp("ci")
    remote = root / "remote"
    (origin / "scripts").mkdir(exist_ok=True)
    shutil.copy(REPO / SCRIPT, origin / SCRIPT)
    git(origin, "add", "-A")
    git(origin, "commit", "-qm", "the tiny pipeline, its dvc.lock and metrics")
    base = git(origin, "branch", "--show-current")
    ci_job(origin, remote, root / "a.md")

    clone_b = root / "b"
    git(root, "clone", "-q", str(origin), str(clone_b))
    fresh = ci_job(clone_b, remote, root / "b.md")
    git(clone_b, "checkout", "-qb", "late-change")
    update_params(clone_b, LATE_CHANGE)
    git(clone_b, "commit", "-qam", "a fine-tuning param")
    change = ci_job(clone_b, remote, root / "b-change.md", diff_against=base)

    clone_c = root / "c"  # lacks a local base branch: the script fetches its diff target
    git(root, "clone", "-q", "-b", "late-change", str(clone_b), str(clone_c))
    change_again = ci_job(clone_c, remote, root / "c.md", diff_against=base)
    return CiRuns(fresh=fresh, change=change, change_again=change_again,
                  changed_metric_files=set(git(clone_b, "diff", "--name-only", base, "--", "metrics").split()),
                  change_outputs=locked_outputs(clone_b), change_again_outputs=locked_outputs(clone_c))


def test_a_fresh_clone_restores_every_stage_from_the_remote(ci_runs):
    assert ci_runs.fresh.ran == []
    assert UP_TO_DATE in ci_runs.fresh.status, ci_runs.fresh.status


def test_a_late_change_reruns_only_the_stages_downstream_of_it(ci_runs):
    assert set(ci_runs.change.ran) == DOWNSTREAM_OF_LATE_CHANGE, ci_runs.change.ran
    assert UP_TO_DATE in ci_runs.change.status, ci_runs.change.status


def test_a_fresh_clone_of_the_change_restores_its_stages_from_the_run_cache(ci_runs):
    """dvc.lock still holds the base run, so only the run cache can give the changed stages back."""
    assert ci_runs.change_again.ran == []
    assert ci_runs.change_again.from_run_cache == DOWNSTREAM_OF_LATE_CHANGE
    assert UP_TO_DATE in ci_runs.change_again.status, ci_runs.change_again.status
    assert ci_runs.change_again_outputs == ci_runs.change_outputs


def test_the_summary_names_the_changed_param_and_exactly_the_changed_metrics(ci_runs):
    params_part, metrics_part = ci_runs.change.summary.split("#### Metrics")
    params = report_rows(params_part)
    assert ["params.yaml", "finetune.learning_rate", "0.001", "0.0005"] in params, params
    assert len(params) == 3, params  # header, rule, the one changed param
    named_files = {row[0] for row in report_rows(metrics_part)[2:]}
    assert named_files == ci_runs.changed_metric_files, named_files
    assert "metrics/plusplus.json" in named_files
    assert not any(path.startswith("metrics/iterations/") for path in named_files), named_files


def test_the_restored_change_reports_the_same_diff(ci_runs):
    assert sorted(report_rows(ci_runs.change_again.summary)) == sorted(report_rows(ci_runs.change.summary))


def test_the_unchanged_fresh_clone_reports_no_change(ci_runs):
    assert "No params changed." in ci_runs.fresh.summary and "No metrics changed." in ci_runs.fresh.summary


SCRIPT_CALL = f"bash {SCRIPT}"
CI_SETTING = re.compile(r"^\$\{\{ *(vars|secrets|github)\.[\w.]+ *\}\}$")


def test_the_github_workflow_calls_only_the_script_with_settings_from_ci():
    workflow = yaml.safe_load((REPO / "examples/ci/github-actions.yml").read_text())
    steps = [step for job in workflow["jobs"].values() for step in job["steps"]]
    assert [step["run"] for step in steps if "run" in step] == [SCRIPT_CALL]
    assert all(step["uses"].split("@")[0] in {"actions/checkout", "actions/setup-python"}
               for step in steps if "run" not in step), steps
    env = {name: value for step in steps for name, value in step.get("env", {}).items()}
    assert "DVC_REMOTE_URL" in env
    assert all(CI_SETTING.match(value) for value in env.values()), env


def test_the_gitlab_job_calls_only_the_script_with_settings_from_ci():
    config = yaml.safe_load((REPO / "examples/ci/gitlab-ci.yml").read_text())
    jobs = [job for job in config.values() if isinstance(job, dict) and "script" in job]
    assert [job["script"] for job in jobs] == [[SCRIPT_CALL]]
    # the remote and its credentials are the project's CI/CD variables, which GitLab passes to every job
    assert not any({"before_script", "after_script", "variables"} & set(job) for job in jobs), jobs

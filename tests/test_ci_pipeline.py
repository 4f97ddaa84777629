"""The CI script users copy (scripts/ci_pipeline.sh, docs/caching.md) on the tiny pipeline, with a
real DVC remote in a folder: a fresh clone restores every stage instead of recomputing it, a change
reruns only the stages it touched, a second fresh clone of that change restores those from the run
cache, and the pull-request report (scripts/ci_report.py) names the changed param, shows the
headline metrics of both revisions with the timings apart, lists the stages run and restored, and
draws the plots that changed; without a remote it says that nothing was restored or pushed."""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from pipeline_helpers import REPO, locked_outputs, run, update_params
from pipeline_project import report_rows

SCRIPT = "scripts/ci_pipeline.sh"
REPORT_SCRIPT = "scripts/ci_report.py"
# An evaluation param: every score moves (bodies cut to 16 tokens), no embedding, mining or training
CHANGE = {"evaluate": {"max_seq_length": 16}}
DOWNSTREAM_OF_CHANGE = {"evaluate_init", "evaluate@1", "select", "report", "finetune@f0", "finetune@best", "plusplus@2",
                        "plusplus@3", "select_plusplus", "record", "record_fewshot"}
# a plain `cache: false` output keeps a stage out of DVC's run cache: it reruns
NEVER_RUN_CACHED = {"report", "record", "record_fewshot"}
UP_TO_DATE = "Data and pipelines are up to date."


@dataclass
class Job:
    """What one run of the CI script did in a clone."""

    ran: list[str]
    from_run_cache: set[str]
    summary: str
    status: str
    report_dir: Path


def git(clone: Path, *args: str) -> str:
    return run(["git", "-c", "user.name=ci", "-c", "user.email=ci@example.com", *args], clone).stdout.strip()


def ci_job(clone: Path, remote: Path | None, summary: Path, diff_against: str = "HEAD") -> Job:
    """Run the CI script as a job would, with the remote and the diff target from the environment
    (install skipped: the test's environment is the installed one); no remote: a fork's job."""
    report_dir = summary.with_suffix("")
    result = run(["env", "SKIP_INSTALL=1", *([f"DVC_REMOTE_URL={remote}"] if remote else []),
                  f"DIFF_AGAINST={diff_against}", f"GITHUB_STEP_SUMMARY={summary}", f"CI_REPORT_DIR={report_dir}",
                  "bash", SCRIPT], clone)
    status = run(["dvc", "status"], clone).stdout
    assert summary.read_text() == (report_dir / "report.md").read_text()  # the job summary is the comment
    return Job(ran=re.findall(r"Running stage '([^']+)'", result.stdout),
               from_run_cache=set(re.findall(r"Stage '([^']+)' is cached - skipping run", result.stdout)),
               summary=summary.read_text(), status=status, report_dir=report_dir)


@dataclass
class CiRuns:
    fresh: Job
    change: Job
    change_again: Job
    changed_metric_files: set[str]
    change_outputs: dict[str, str]
    change_again_outputs: dict[str, str]
    summaries: tuple[dict, dict]  # metrics/summary.json before and after the change
    fork: Job


@pytest.fixture(scope="module")
def ci_runs(built_project, tmp_path_factory) -> CiRuns:
    """Clone A (the tiny project after its `dvc repro`, committed as the base branch) pushes with the
    script; clone B, fresh, runs it, then a late change on a branch; clone C, fresh, runs that branch."""
    root = tmp_path_factory.mktemp("ci")
    origin = root / "origin"  # a copy: built_project is shared with other modules, and this one commits to it
    shutil.copytree(built_project[0], origin, symlinks=True)
    remote = root / "remote"
    (origin / "scripts").mkdir(exist_ok=True)
    shutil.copy(REPO / SCRIPT, origin / SCRIPT)
    shutil.copy(REPO / REPORT_SCRIPT, origin / REPORT_SCRIPT)
    git(origin, "add", "-A")
    git(origin, "commit", "-qm", "the tiny pipeline, its dvc.lock and metrics")
    base = git(origin, "branch", "--show-current")
    ci_job(origin, remote, root / "a.md")

    clone_b = root / "b"
    git(root, "clone", "-q", str(origin), str(clone_b))
    fresh = ci_job(clone_b, remote, root / "b.md")
    git(clone_b, "checkout", "-qb", "change")
    update_params(clone_b, CHANGE)
    git(clone_b, "commit", "-qam", "an evaluation param")
    change = ci_job(clone_b, remote, root / "b-change.md", diff_against=base)
    if os.environ.get("CI_REPORT_EXAMPLE"):  # docs/caching.md shows this report: how to make it again
        shutil.copytree(change.report_dir, os.environ["CI_REPORT_EXAMPLE"], dirs_exist_ok=True)

    clone_c = root / "c"  # lacks a local base branch: the script fetches its diff target
    git(root, "clone", "-q", "-b", "change", str(clone_b), str(clone_c))
    change_again = ci_job(clone_c, remote, root / "c.md", diff_against=base)

    run(["dvc", "remote", "remove", "--local", "ci"], clone_c)  # as a fork's pull request: no secrets, no remote
    fork = ci_job(clone_c, None, root / "c-fork.md", diff_against=base)
    summaries = (json.loads(git(clone_b, "show", f"{base}:metrics/summary.json")),
                 json.loads((clone_b / "metrics/summary.json").read_text()))  # CI commits nothing
    return CiRuns(fresh=fresh, change=change, change_again=change_again,
                  changed_metric_files=set(git(clone_b, "diff", "--name-only", base, "--", "metrics").split()),
                  change_outputs=locked_outputs(clone_b), change_again_outputs=locked_outputs(clone_c),
                  summaries=summaries, fork=fork)


def test_a_fresh_clone_restores_every_stage_from_the_remote(ci_runs):
    assert ci_runs.fresh.ran == []
    assert UP_TO_DATE in ci_runs.fresh.status, ci_runs.fresh.status


def test_a_change_reruns_only_the_stages_downstream_of_it(ci_runs):
    assert set(ci_runs.change.ran) == DOWNSTREAM_OF_CHANGE, ci_runs.change.ran
    assert UP_TO_DATE in ci_runs.change.status, ci_runs.change.status


def test_a_fresh_clone_of_the_change_restores_its_stages_from_the_run_cache(ci_runs):
    """dvc.lock still holds the base run, so only the run cache can give the changed stages back."""
    assert set(ci_runs.change_again.ran) == NEVER_RUN_CACHED
    assert ci_runs.change_again.from_run_cache == DOWNSTREAM_OF_CHANGE - NEVER_RUN_CACHED
    assert UP_TO_DATE in ci_runs.change_again.status, ci_runs.change_again.status
    assert ci_runs.change_again_outputs == ci_runs.change_outputs


def section(report: str, title: str) -> str:
    """The text of one `### title` section of the report."""
    return report.split(f"### {title}")[1].split("\n### ")[0]


def test_the_report_names_the_changed_param(ci_runs):
    params = report_rows(section(ci_runs.change.summary, "Params"))
    assert ["params.yaml", "evaluate.max_seq_length", "64", "16"] in params, params
    assert len(params) == 3, params  # header, rule, the one changed param


def test_the_report_shows_the_headline_of_both_revisions_and_keeps_timings_out_of_it(ci_runs):
    before, after = ci_runs.summaries
    rows = {row[0]: row[1:] for row in report_rows(section(ci_runs.change.summary, "Headline"))[2:]}
    keys = {"test R@1": "test_recall@1", "test R@1 − seed model": "test_recall@1_vs_seed", "test MRR@10": "test_mrr@10",
            "test MRR@10 − seed model": "test_mrr@10_vs_seed", "val MRR@10": "val_mrr@10"}
    for name, key in keys.items():
        old, new, change = rows[name]
        assert (float(old), float(new)) == (round(before[key], 4), round(after[key], 4)), name
        assert change == ("" if before[key] == after[key] else f"{after[key] - before[key]:+.4f}"), name
    assert rows["chosen iteration"][:2] == [str(before["chosen_iteration"]), str(after["chosen_iteration"])]
    assert any(before[key] != after[key] for key in keys.values()), "the change moved no headline metric"
    headline = section(ci_runs.change.summary, "Headline") + section(ci_runs.change.summary, "Stages")
    assert "seconds" not in headline
    timings = report_rows(ci_runs.change.summary.split("<summary>Timings")[1])
    assert any(row[1] == "seconds" for row in timings[2:]), timings
    others = report_rows(ci_runs.change.summary.split("<summary>Every other metric")[1].split("<summary>")[0])
    assert others and not any("seconds" in row[1] for row in others[2:]), others
    named_files = {row[0] for row in others[2:] + timings[2:]} | {"metrics/summary.json"}
    assert named_files == ci_runs.changed_metric_files, named_files


def test_the_report_lists_the_stages_run_and_restored(ci_runs):
    for job in (ci_runs.change, ci_runs.change_again):
        stages = section(job.summary, "Stages")
        ran = re.search(r"- ran \((\d+)\): (.*)", stages)
        cached = re.search(r"- restored from the run cache \((\d+)\): (.*)", stages)
        assert set(re.findall(r"`([^`]+)`", ran.group(2))) == set(job.ran) and int(ran.group(1)) == len(job.ran)
        assert set(re.findall(r"`([^`]+)`", cached.group(2))) == job.from_run_cache
    assert "DVC remote `ci`" in ci_runs.change.summary


def test_the_report_draws_the_plots_that_changed(ci_runs):
    plots = section(ci_runs.change.summary, "Plots that changed")
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", plots)
    assert set(images) == {"convergence.png"}, plots  # the scores moved; the training loss did not
    for image in images:
        assert (ci_runs.change.report_dir / image).read_bytes()[:4] == b"\x89PNG"


def test_the_restored_change_reports_the_same_diff(ci_runs):
    for title in ("Params", "Headline", "Plots that changed"):
        assert section(ci_runs.change_again.summary, title) == section(ci_runs.change.summary, title), title


def test_the_unchanged_fresh_clone_reports_no_change(ci_runs):
    assert "No params changed." in ci_runs.fresh.summary
    assert not re.search(r"\| [+-]\d", section(ci_runs.fresh.summary, "Headline"))
    assert "### Plots that changed\n\nNone." in ci_runs.fresh.summary


def test_a_job_without_a_remote_says_nothing_was_restored_or_pushed(ci_runs):
    assert "**No DVC remote**" in ci_runs.fork.summary and "nothing was restored or pushed" in ci_runs.fork.summary
    assert ci_runs.fork.from_run_cache == set()


SCRIPT_CALL = f"bash {SCRIPT}"
CI_SETTING = re.compile(r"^\$\{\{ *(vars|secrets|github)\.[\w.]+ *\}\}$")


def test_the_github_workflow_runs_the_script_and_posts_its_report():
    """The script, then CML posts (or updates) the report on the pull request; settings come from
    the CI, never from the file; a superseded run is cancelled; a fork's pull request is stated."""
    workflow = yaml.safe_load((REPO / "examples/ci/github-actions.yml").read_text())
    job, fork = workflow["jobs"]["pipeline"], workflow["jobs"]["fork"]
    runs = [step["run"] for step in job["steps"] if "run" in step]
    assert runs == [SCRIPT_CALL, "cml comment update --publish ci-report/report.md"]
    assert {step["uses"].split("@")[0] for step in job["steps"] if "run" not in step} == {
        "actions/checkout", "actions/setup-python", "iterative/setup-cml"}
    env = {name: value for step in job["steps"] for name, value in step.get("env", {}).items()}
    assert {"DVC_REMOTE_URL", "REPO_TOKEN"} <= set(env)
    assert all(CI_SETTING.match(value) for value in env.values()), env
    assert job["timeout-minutes"] <= 90 and workflow["concurrency"]["cancel-in-progress"] is True
    assert any(step.get("with", {}).get("cache") == "pip" for step in job["steps"])
    assert "head.repo.full_name == github.repository" in job["if"]
    assert "head.repo.full_name != github.repository" in fork["if"]
    assert "GITHUB_STEP_SUMMARY" in fork["steps"][0]["run"] and "no secrets" in fork["steps"][0]["run"]


def test_the_gitlab_job_runs_the_script_and_a_note_job_posts_its_report():
    config = yaml.safe_load((REPO / "examples/ci/gitlab-ci.yml").read_text())
    pipeline, note = config["pipeline"], config["note"]
    assert SCRIPT_CALL in pipeline["script"] and "ci-report/" in pipeline["artifacts"]["paths"]
    assert pipeline["interruptible"] is True and pipeline["timeout"] == "90m" and pipeline["cache"]["paths"]
    assert note["script"] == ["npx --yes @dvcorg/cml@0 comment update --publish ci-report/report.md"]
    # the remote and its credentials are the project's CI/CD variables, which GitLab passes to every job
    assert not any("variables" in job for job in (pipeline, note))

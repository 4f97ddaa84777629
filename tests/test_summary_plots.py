"""The report stage's headline metrics (metrics/summary.json), the live training curves and the
data behind `dvc plots`, on the tiny end-to-end run: every value recomputed here from the iteration
metrics the other stages wrote, and every declared plot rendered by DVC itself."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pandas as pd
import pytest
from pipeline_helpers import read_params, run

HEADLINE_DELTAS = ("recall@1", "mrr@10")
EXP_SHOW_FIXED_COLUMNS = ("Experiment", "rev", "typ", "Created", "parent", "State", "Executor")  # before any metric


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())


def iteration_metrics(project: Path, name: str) -> dict[int, dict]:
    """{t: metrics/iterations/iter-t/<name>} for every iteration that has that file."""
    folders = (project / "metrics/iterations").glob("iter-*")
    return {int(folder.name.removeprefix("iter-")): read_json(folder / name) for folder in folders
            if (folder / name).exists()}


def expected_summary(project: Path) -> dict:
    """The headline from the iteration files alone: the first iteration with the best val score
    among those that ran, its test scores minus iteration 0's, the pairs of every round that mined
    any, and the seconds of every stage file under metrics/iterations."""
    states = iteration_metrics(project, "retrieval.json")
    metric = states[0]["val_metric"]
    ran = [t for t in sorted(states) if not states[t]["stopped"]]
    chosen = max(ran, key=lambda t: (states[t]["val"][metric], -t))
    pairs = iteration_metrics(project, "pairs.json")
    summary = {"chosen_iteration": chosen, f"val_{metric}": states[chosen]["val"][metric],
               "pairs_per_round": {str(t): stats["pairs"] for t, stats in pairs.items() if stats.get("pairs")},
               "total_seconds": sum(read_json(path).get("seconds", 0.0)
                                    for path in (project / "metrics/iterations").glob("iter-*/*.json"))}
    for name in HEADLINE_DELTAS:
        summary[f"test_{name}"] = states[chosen]["test"][name]
        summary[f"test_{name}_vs_seed"] = states[chosen]["test"][name] - states[0]["test"][name]
    return summary


def assert_report_files_match_metrics(project: Path) -> None:
    summary, expected = read_json(project / "metrics/summary.json"), expected_summary(project)
    assert summary.pop("pairs_per_round") == expected.pop("pairs_per_round")
    assert summary == pytest.approx(expected, rel=1e-12, abs=1e-12)  # seconds summed in another order
    loss = pd.read_csv(project / "reports/run_loss.csv")
    train = iteration_metrics(project, "train.json")
    curves = [(t, point["step"], point["loss"]) for t, stats in sorted(train.items()) for point in stats.get("loss_curve", [])]
    assert curves and list(zip(loss["iteration"], loss["step"])) == [(t, step) for t, step, _ in curves]
    assert list(loss["loss"]) == pytest.approx([value for _, _, value in curves], abs=1e-6)
    steps_before = {t: sum(stats.get("steps", 0) for u, stats in train.items() if u < t) for t in train}
    assert list(loss["run_step"]) == [steps_before[t] + step for t, step, _ in curves]
    pairs = pd.read_csv(project / "reports/run_pairs.csv").set_index("iteration")
    mined = {t: stats for t, stats in iteration_metrics(project, "pairs.json").items() if stats.get("pairs")}
    assert sorted(pairs.index) == sorted(mined)
    for t, stats in mined.items():
        for column in pairs.columns:
            value = pairs.loc[t, column]
            assert math.isnan(value) if column not in stats else value == pytest.approx(stats[column], abs=1e-6), column


def live_curve(folder: Path, phase: str, curve: str) -> pd.DataFrame:
    return pd.read_csv(folder / "plots/metrics" / phase / f"{curve}.tsv", sep="\t")


def assert_empty_live_curves(folder: Path, phases: tuple[str, ...]) -> None:
    for phase in phases:
        for curve in ("loss", "learning_rate"):
            assert (folder / "plots/metrics" / phase / f"{curve}.tsv").read_text() == f"step\t{curve}\n"
    assert read_json(folder / "metrics.json") == {}


def test_live_curves_hold_the_steps_the_trainer_logged(built_project):
    """Each training stage's live curves (written while it trains) against train.json's loss curve
    (the trainer's log history, read after training): same steps, same losses; the live summary is
    the last point. Stages that trained nothing, or logged no step, leave empty curves."""
    project, _ = built_project
    trained = 0
    for t, stats in iteration_metrics(project, "train.json").items():
        folder = project / f"metrics/iterations/iter-{t}/live"
        if stats.get("skipped"):
            assert_empty_live_curves(folder, ("train",))
            continue
        expected = stats["loss_curve"]
        loss, rate = live_curve(folder, "train", "loss"), live_curve(folder, "train", "learning_rate")
        assert expected and list(loss["step"]) == [point["step"] for point in expected]
        assert list(loss["loss"]) == pytest.approx([point["loss"] for point in expected], abs=1e-6)
        assert list(rate["step"]) == list(loss["step"])
        assert ((rate["learning_rate"] > 0) & (rate["learning_rate"] <= read_params(project)["train"]["learning_rate"])).all()
        assert read_json(folder / "metrics.json") == {
            "train": {"loss": pytest.approx(expected[-1]["loss"], abs=1e-6),
                      "learning_rate": pytest.approx(rate["learning_rate"].iloc[-1]), "step": expected[-1]["step"]}}
        trained += 1
    assert trained  # the tiny run trains iteration 1
    # the tiny fine-tuning is 2 steps, under the trainer's logging interval; InfoCSE++ stops at round 1
    for start in ("f0", "best"):
        assert read_json(project / f"metrics/finetuned/{start}.json")["train"]["steps"] < 10
        assert_empty_live_curves(project / f"metrics/finetuned/live/{start}", ("finetune",))
    for number in (2, 3):
        assert_empty_live_curves(project / f"metrics/finetuned/live/round-{number}", ("iteration-1", "finetune"))


def test_summary_and_plot_data_match_the_iteration_metrics(built_project):
    assert_report_files_match_metrics(built_project[0])


def test_summary_follows_a_later_iteration_that_wins(project):
    """The tiny run keeps iteration 0 (deltas 0): give iteration 1 better scores and the pair
    precisions of a mixed corpus, rerun select and report, and the summary follows."""
    retrieval = project / "metrics/iterations/iter-1/retrieval.json"
    state = read_json(retrieval)
    state["val"][state["val_metric"]] += 0.25
    state["test"] = {name: value + 0.125 for name, value in state["test"].items()}
    state.update(best_iteration=1, best_score=state["val"][state["val_metric"]], since_best=0)
    retrieval.write_text(json.dumps(state))
    pairs_file = project / "metrics/iterations/iter-1/pairs.json"
    pairs_file.write_text(json.dumps({**read_json(pairs_file), "pair_source_precision": 0.75,
                                      "pair_category_precision": 0.875}))
    for stage in ("stages.select", "stages.report"):
        run([sys.executable, "-m", stage], project)
    assert_report_files_match_metrics(project)
    summary = read_json(project / "metrics/summary.json")
    assert summary["chosen_iteration"] == 1 and summary["test_recall@1_vs_seed"] == pytest.approx(0.125)


def test_dvc_plots_render_convergence_loss_and_pair_statistics(built_project):
    project, _ = built_project
    shown = json.loads(run([sys.executable, "-m", "dvc", "plots", "show", "--json"], project).stdout)
    assert "errors" not in shown, shown.get("errors")
    rows = {plot: [row for entry in entries if entry["type"] == "vega" for row in entry["content"]["data"]["values"]]
            for plot, entries in shown["data"].items()}
    for plot, field in [("reports/run_convergence.csv", "val_mrr@10"), ("reports/run_loss.csv", "loss"),
                        ("reports/run_pairs.csv", "mean_token_jaccard"), ("pairs per round", "pairs"),
                        ("mean cluster size", "mean_cluster_size")]:
        assert rows.get(plot) and all(row[field] != "NaN" for row in rows[plot]), plot
    # no sources in the tiny corpus: NaN, which Vega-Lite leaves out (an empty cell can plot as 0)
    assert {row["pair_source_precision"] for row in rows["reports/run_pairs.csv"]} == {"NaN"}
    loss = pd.read_csv(project / "reports/run_loss.csv")
    assert [float(row["loss"]) for row in rows["reports/run_loss.csv"]] == pytest.approx(list(loss["loss"]), abs=1e-6)
    live = live_curve(project / "metrics/iterations/iter-1/live", "train", "loss")
    shown_live = rows.get("metrics/iterations/iter-1/live/plots/metrics/train/loss.tsv")
    assert shown_live and [float(row["loss"]) for row in shown_live] == pytest.approx(list(live["loss"]), abs=1e-6)


def test_dvc_exp_show_leads_with_the_headline_metrics(project):
    """`dvc exp show` orders metric columns by the stages' order in dvc.yaml, then by the keys of
    each file: the report stage is declared first, so the summary's columns come first."""
    run(["git", "add", "-A"], project)
    run(["git", "-c", "user.name=test", "-c", "user.email=test@example.com", "commit", "-qm", "tiny run"], project)
    header = run([sys.executable, "-m", "dvc", "exp", "show", "--csv"], project).stdout.splitlines()[0].split(",")
    columns = []
    for key, value in read_json(project / "metrics/summary.json").items():
        columns += [f"{key}.{sub}" for sub in value] if isinstance(value, dict) else [key]
    start = max(header.index(name) for name in EXP_SHOW_FIXED_COLUMNS if name in header) + 1
    assert header[start:start + len(columns)] == columns, header[:start + len(columns)]


# ---------------------------------------------------------------- the run report (reports/report.md)
def report_table(report: str, heading: str) -> pd.DataFrame:
    """The Markdown table under `## heading`, as strings."""
    from pipeline_project import report_rows

    rows = report_rows(report.split(f"## {heading}")[1].split("\n## ")[0])
    return pd.DataFrame(rows[2:], columns=rows[0])


def test_the_run_report_leads_with_its_headline_and_stays_narrow(built_project):
    """Headline first; every difference from the seed model equals the difference of the two
    iterations' own metrics (the paired mean over the same queries); the fine-tuned models and
    every stage's seconds are there; no line is wider than 160 characters."""
    project = built_project[0]
    report = (project / "reports/report.md").read_text()
    best = read_json(project / "metrics/best.json")["iteration"]
    assert report.splitlines()[2].startswith(f"**Iteration {best} chosen** by validation")
    assert max(map(len, report.splitlines())) <= 160
    states = iteration_metrics(project, "retrieval.json")
    quality = report_table(report, "Quality per iteration").set_index("iter")
    for t in (1,):
        difference = states[t]["test"]["recall@1"] - states[0]["test"]["recall@1"]
        assert float(quality.loc[str(t), "Δ test R@1 [95%]"].split()[0]) == pytest.approx(difference, abs=5e-4)
    assert quality.loc["0", "Δ test R@1 [95%]"] == "–"
    tuned = report_table(report, "Fine-tuned on").set_index("model")
    for start, name in (("f0", "seed model, fine-tuned"), ("best", "InfoCSE (chosen iteration), fine-tuned")):
        assert tuned.loc[name, "test R@1"] == f"{read_json(project / f'metrics/finetuned/{start}.json')['test']['recall@1']:.3f}"
    seconds = report_table(report, "Seconds per stage").set_index("stage")
    assert {"init", "evaluate_init", "embed@1", "cluster@1", "train@1", "evaluate@1", "finetune@f0", "finetune@best",
            "plusplus@2", "total"} <= set(seconds.index)
    assert (project / "reports/run_seconds.png").read_bytes()[:4] == b"\x89PNG"


def test_the_headline_says_when_validation_cannot_tell_iterations_apart():
    """A made-up run: the seed model kept, iteration 1 within validation noise of it, iteration 2
    clearly below: the headline names the trained model as good by validation; with iteration 1
    also separated, it says validation separates them."""
    from types import SimpleNamespace

    from stages.report import headline_lines

    states = {t: {"stopped": False, "validation_queries": 170, "validate_on": "val", "val_metric": "mrr@10"}
              for t in (0, 1, 2)}
    config = SimpleNamespace(report=SimpleNamespace(bootstrap_samples=2000))
    noise = {"mean": -0.002, "low": -0.020, "high": 0.016, "queries": 170}
    apart = {"mean": 0.040, "low": 0.010, "high": 0.070, "queries": 170}
    lines = headline_lines(states, 0, {(0, 1, "val-pair"): noise, (0, 2, "val-pair"): apart}, "mrr@10", config, {})
    text = " ".join(lines)
    assert "Validation cannot tell iteration 0 from iteration 1" in text
    assert "the trained model is `models/iterations/iter-1`" in text and "iter-2" not in text
    lines = headline_lines(states, 0, {(0, 1, "val-pair"): apart, (0, 2, "val-pair"): apart}, "mrr@10", config, {})
    assert "Validation separates iteration 0 from every other iteration run." in lines


def test_the_headline_names_the_validation_set_the_loop_used():
    """With `loop.validate_on: fewshot+val` the headline counts and names the pooled queries, and the
    noise sentence names the set its interval is over."""
    from types import SimpleNamespace

    from stages.report import headline_lines

    states = {t: {"stopped": False, "validation_queries": 510, "validate_on": "fewshot+val", "val_metric": "mrr@10"}
              for t in (0, 1)}
    noise = {"mean": -0.002, "low": -0.020, "high": 0.016, "queries": 510}
    config = SimpleNamespace(report=SimpleNamespace(bootstrap_samples=10))
    text = " ".join(headline_lines(states, 0, {(0, 1, "val-pair"): noise}, "mrr@10", config, {}))
    assert "by validation MRR@10 (510 few-shot pool + val queries)" in text
    assert "(few-shot+val MRR@10 of 0 minus 1: -0.002 [-0.020, +0.016])" in text

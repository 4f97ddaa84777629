"""The few-shot report (study/compare_fewshot.py) from hand-made run files: which run gives which
starting point, the best baseline picked by validation, cells per label budget, differences paired
by seed with a t-interval, and stale or missing fine-tuning metrics."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import repo_params
from pipeline_helpers import deep_merge
from scipy import stats
from test_compare_experiments import cells as table_cells
from test_compare_experiments import write_runs

from study import compare_fewshot as fewshot


def scores(r1: float, val_mrr: float) -> dict:
    return {"val": {"mrr@10": val_mrr, "recall@1": r1}, "test": {"recall@1": r1, "mrr@10": r1 + 0.1}}


def run(name: str, seed: int, labels, init: str = "none", max_iterations="all", max_rounds: int = 1, f0=None,
        best=None, plusplus=None, ran_at: str = "2030-01-01T00:00:00", precision: str = "fp32", **overrides) -> dict:
    metrics = {"metrics/best.json": {"iteration": 0},
               "metrics/iterations/iter-0/retrieval.json": {"stopped": False, **scores(0.5, 0.5)},
               "metrics/iterations/iter-0/evaluate.json": {"seconds": 10.0, "precision": precision}}
    for path, value in (("f0", f0), ("best", best)):
        if value:
            metrics[f"metrics/finetuned/{path}.json"] = value
    if plusplus:
        metrics["metrics/plusplus.json"] = plusplus
        metrics["metrics/finetuned/round-2.json"] = {**plusplus, "round": 2, "stopped": False}
        metrics["metrics/finetuned/round-3.json"] = {"round": 3, "stopped": True}
    params = deep_merge(repo_params(), {"seed": seed, "init": {"method": init}, "loop": {"max_iterations": max_iterations},
                                        "finetune": {"labels": labels}, "plusplus": {"max_rounds": max_rounds},
                                        **overrides})
    return {"name": name, "commit": "c" * 40, "ran_at": ran_at, "params": params, "metrics": metrics}


def rows_of(text: str) -> dict[str, list[str]]:
    """First table row per start label, as cells."""
    found = {}
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith("| start"):
            found.setdefault(table_cells(line)[0], table_cells(line))
    return found


def test_starting_points_budgets_and_the_best_baseline_by_validation():
    runs = [
        run("s0", 0, 100, f0=scores(0.50, 0.5), best=scores(0.52, 0.5), plusplus=scores(0.55, 0.6), max_rounds=3),
        run("s1", 1, 100, f0=scores(0.54, 0.5), best=scores(0.56, 0.5)),
        run("s0-300", 0, 300, f0=scores(0.60, 0.5), best=scores(0.61, 0.5)),
        # SimCSE is better on test, CONPONO on validation: the report must pick CONPONO
        run("simcse", 0, 100, init="simcse", max_iterations=0, f0=scores(0.90, 0.40)),
        run("neighbours", 0, 100, init="neighbours", max_iterations=0, f0=scores(0.45, 0.70)),
    ]
    cells, _ = fewshot.collect(runs)
    assert fewshot.best_baseline(cells) == "neighbour pairs (CONPONO-style)"
    text = fewshot.render(runs)
    row = rows_of(text)
    assert row["seed model"][1:] == ["0.520 ± 0.028 / 0.620 ± 0.028 (n = 2)", "0.600 / 0.700 (n = 1)"]
    assert row["InfoCSE"][1:] == ["0.540 ± 0.028 / 0.640 ± 0.028 (n = 2)", "0.610 / 0.710 (n = 1)"]
    assert row["InfoCSE++"][1:] == ["0.550 / 0.650 (n = 1)", "–"]
    assert "best baseline: neighbour pairs (CONPONO-style)" in row and "SimCSE" not in text
    assert "| start " in text and "100 labels" in text and "300 labels" in text


def test_the_best_baseline_is_scored_on_the_budgets_and_seeds_every_candidate_has():
    # ICT's one run at "all" labels scores higher than anything at 100 labels, but CONPONO and ICT
    # share only seed 0 at 100 labels, where CONPONO is better
    shared = [run("c0", 0, 100, init="neighbours", max_iterations=0, f0=scores(0.5, 0.60)),
              run("c1", 1, 100, init="neighbours", max_iterations=0, f0=scores(0.5, 0.50)),
              run("i0", 0, 100, init="ict", max_iterations=0, f0=scores(0.5, 0.55)),
              run("i-all", 0, "all", init="ict", max_iterations=0, f0=scores(0.5, 0.95))]
    assert fewshot.best_baseline(fewshot.collect(shared)[0]) == "neighbour pairs (CONPONO-style)"
    # no shared run: the baseline run at more budgets and seeds is the candidate
    apart = [run("c0", 0, 100, init="neighbours", max_iterations=0, f0=scores(0.5, 0.60)),
             run("c1", 1, 100, init="neighbours", max_iterations=0, f0=scores(0.5, 0.60)),
             run("m", 0, 300, init="mirror", max_iterations=0, f0=scores(0.5, 0.90))]
    assert fewshot.best_baseline(fewshot.collect(apart)[0]) == "neighbour pairs (CONPONO-style)"
    assert fewshot.best_baseline(fewshot.collect(apart[2:])[0]) == "Mirror-BERT"
    # the report has no column for the budget only the baseline left out was run with
    assert "300 labels" not in fewshot.render(apart)


def test_other_fine_tuning_settings_are_separate_groups():
    runs = [run("a", 0, 100, f0=scores(0.5, 0.5), best=scores(0.5, 0.5)),
            run("b", 0, 100, f0=scores(0.6, 0.5), best=scores(0.6, 0.5), finetune={"learning_rate": 1.0e-4})]
    text = fewshot.render(runs)
    assert text.count("## Corpus: bbc (finetune.learning_rate=") == 2


def test_only_infocse_at_its_defaults_is_the_infocse_start():
    """A newer K=3 run and a K-means run, fine-tuned too, are other models: neither replaces nor joins the
    InfoCSE (K=1) cell, though their fine-tuned seed model is the same as any run's."""
    runs = [run("k1-s0", 0, 100, f0=scores(0.50, 0.5), best=scores(0.60, 0.5)),
            run("k3-s0", 0, 100, f0=scores(0.50, 0.5), best=scores(0.90, 0.5), ran_at="2031-01-01T00:00:00",
                idc={"k": 3}),
            run("kmeans-s1", 1, 100, f0=scores(0.52, 0.5), best=scores(0.95, 0.5), idc={"method": "kmeans"})]
    cells, dropped = fewshot.collect(runs)
    infocse = cells[cells["start"] == "InfoCSE"]
    assert infocse["run"].tolist() == ["k1-s0"] and dropped == [("k1-s0", "k3-s0")]  # the seed model's f0 alone
    assert rows_of(fewshot.render(runs))["InfoCSE"][1] == "0.600 / 0.700 (n = 1)"


def test_paired_differences_by_seed_with_a_t_interval():
    """InfoCSE - seed model per seed at 100 labels: +0.02, +0.03, +0.04; at 300 labels one run only."""
    runs = [run(f"s{seed}", seed, 100, f0=scores(0.50 + seed / 100, 0.5), best=scores(0.52 + 2 * seed / 100, 0.5))
            for seed in range(3)]
    runs.append(run("s0-300", 0, 300, f0=scores(0.60, 0.5), best=scores(0.58, 0.5)))
    text = fewshot.render(runs)
    recall, mrr = [line for line in text.splitlines() if line.startswith("| InfoCSE − seed model")]
    gains = [0.02, 0.03, 0.04]
    low, high = stats.t.interval(0.95, 2, loc=np.mean(gains), scale=stats.sem(gains))
    expected = f"+0.030 [{low:+.3f}, {high:+.3f}] (n = 3): higher (95% CI above 0)"
    assert table_cells(recall)[1:] == [expected, "-0.020 (n = 1): one run (n = 1): no interval"]
    assert table_cells(mrr)[1] == expected  # scores(): MRR = R@1 + 0.1


def test_plusplus_curve_from_the_round_files():
    """Round 1 = finetune@best, round 2 ran, round 3 was skipped by the stop rule."""
    cells, _ = fewshot.collect([run("s0", 0, 100, f0=scores(0.5, 0.5), best=scores(0.52, 0.5),
                                    plusplus=scores(0.55, 0.6), max_rounds=3)])
    (curve,) = cells.loc[cells["start"] == "InfoCSE++", "curve"]
    assert [(p["round"], p["val"]["mrr@10"]) for p in curve] == [(1, 0.5), (2, 0.6)]


def test_plusplus_curves_of_different_settings_are_separate_lines():
    """InfoCSE++ at 3 and at 6 fine-tuning epochs: one line each per split, never one averaged line."""
    runs = [run(f"e{epochs}", 0, 100, best=scores(0.5, r1), plusplus=scores(0.6, r1 + 0.1), max_rounds=3,
                finetune={"labels": 100, "epochs": epochs}) for epochs, r1 in ((3, 0.5), (6, 0.7))]
    lines = fewshot.round_curves(fewshot.collect(runs)[0])
    assert [(name, means) for name, split, _, means in lines if split == "val"] == [
        ("bbc (finetune.epochs=3), 100 labels, val (n=1)", [0.5, 0.6]),
        ("bbc (finetune.epochs=6), 100 labels, val (n=1)", [0.7, pytest.approx(0.8)])]


def test_a_run_without_fine_tuning_metrics_gives_no_cell_and_the_report_says_so(tmp_path, monkeypatch):
    """A budget-sweep run (`dvc exp run select report`) has no finetuned metrics in its run file."""
    monkeypatch.chdir(tmp_path)
    write_runs(tmp_path / "study/runs", [run("sweep", 0, 100)])
    fewshot.main()
    assert "no run with fine-tuning metrics" in (tmp_path / "study/reports/fewshot.md").read_text()


def test_report_and_plot_are_identical_bytes_on_a_rerun(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_runs(tmp_path / "study/runs", [
        run(f"s{seed}", seed, 100, f0=scores(0.5, 0.5), best=scores(0.52, 0.5), plusplus=scores(0.55, 0.6),
            max_rounds=3) for seed in range(2)])
    fewshot.main()
    first = {p: (tmp_path / p).read_bytes() for p in ("study/reports/fewshot.md", "study/reports/plusplus_rounds.png")}
    fewshot.main()
    assert {p: (tmp_path / p).read_bytes() for p in first} == first

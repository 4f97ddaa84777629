"""The few-shot report, study/reports/fewshot.md and study/reports/plusplus_rounds.png, from committed run files.

    python -m study.make_reports           # this report and the comparison (study/compare_experiments.py)
    python -m study.compare_fewshot        # this report alone

It reads only `study/runs/*.json` (written by `python -m study.export_runs` after the runs of
study/plan.yaml), never DVC, so a clone regenerates the same bytes.

Rows are starting points, columns label budgets (`finetune.labels`); a cell is test Recall@1 /
MRR@10 after fine-tuning, mean ± sd over seeds, with n:
- seed model: finetune@f0 of runs with `init.method: none`;
- best baseline: finetune@f0 of the baseline runs (`loop.max_iterations: 0`) of the baseline with
  the highest mean fine-tuned *validation* MRR@10 (never chosen by test);
- InfoCSE: finetune@best of runs whose loop ran (round 1 of InfoCSE++), InfoCSE at its defaults only
  (init none, partition IDC with K=1, every iteration: its variants are zero-shot studies, never pooled here);
- InfoCSE++: the round chosen by fine-tuned validation, in those runs with `plusplus.max_rounds` > 1.
Runs are grouped by corpus, evaluation protocol and setting (the self-supervised setting of
study/reports/comparison.md plus the fine-tuning params other than the label budget). Differences are
paired by seed (same split, same labels) with a t-based 95% interval over seeds and n; a verdict
says higher or lower only when the interval excludes 0. A per-run table follows each group.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from infocse.io import write_text
from infocse.reporting import format_interval, markdown_table, save_figure, t_interval, verdict
from study.compare_experiments import (
    BASELINE_NAMES,
    REFERENCE,
    RUNS_DIR,
    canonical,
    evaluation_of,
    infocse_label,
    label,
    load_runs,
    setting_of,
    varying_keys,
)
from study.template import render_template

REPORT = Path("study/reports/fewshot.md")
PLOT = Path("study/reports/plusplus_rounds.png")
METRICS = ("recall@1", "mrr@10")
FEWSHOT_SETTING = ("finetune.", "plusplus.patience")  # setting params beyond the self-supervised ones
NOT_SETTING = ("finetune.labels", "finetune.devices", "finetune.launcher")  # the budget is a column
FIXED_STARTS = ("seed model", "InfoCSE", "InfoCSE++")


def fewshot_setting(params: dict) -> dict:
    return {k: v for k, v in setting_of(params, extra=FEWSHOT_SETTING).items() if k not in NOT_SETTING}


def budget_of(params: dict) -> str:
    labels = (params.get("finetune") or {}).get("labels")
    return "all" if labels in (None, "all") else str(labels)


def run_cells(run: dict) -> list[dict]:
    """(starting point, budget, seed, val, test) entries one run contributes."""
    params, metrics = run["params"], run["metrics"]
    init = (params.get("init") or {}).get("method", "none")
    loop_ran = (params.get("loop") or {}).get("max_iterations", "all") != 0
    infocse = infocse_label(params) == REFERENCE  # its loop ran, at the defaults: not K=3, K-means, ... (other models)
    setting = fewshot_setting(params)
    base = {"corpus": (params.get("corpus") or {}).get("source", "bbc"), "seed": params.get("seed"),
            "budget": budget_of(params), "run": run["name"], "ran_at": run.get("ran_at") or "",
            "evaluation": canonical(evaluation_of(params, metrics)), "setting": canonical(setting),
            "setting_params": setting, "curve": []}
    cells = []
    f0 = metrics.get("metrics/finetuned/f0.json")
    if f0 and "test" in f0 and (init == "none" or not loop_ran):
        cells.append({**base, "start": BASELINE_NAMES.get(init, init), "val": f0["val"], "test": f0["test"]})
    best = metrics.get("metrics/finetuned/best.json")
    if best and "test" in best and infocse:
        cells.append({**base, "start": "InfoCSE", "val": best["val"], "test": best["test"]})
    plusplus = metrics.get("metrics/plusplus.json")
    if plusplus and "test" in plusplus and (params.get("plusplus") or {}).get("max_rounds", 1) > 1 and infocse:
        cells.append({**base, "start": "InfoCSE++", "val": plusplus["val"], "test": plusplus["test"],
                      "curve": plusplus_curve(metrics)})
    return cells


def plusplus_curve(metrics: dict) -> list[dict]:
    """Fine-tuned val/test per InfoCSE++ round that ran (round 1 = finetune@best)."""
    rounds = {1: metrics.get("metrics/finetuned/best.json")}
    for path, value in metrics.items():
        if path.startswith("metrics/finetuned/round-") and path.endswith(".json"):
            rounds[int(path.removeprefix("metrics/finetuned/round-").removesuffix(".json"))] = value
    return [{"round": number, "val": value["val"], "test": value["test"]} for number, value in sorted(rounds.items())
            if value and not value.get("stopped") and "val" in value]


KEY = ["corpus", "evaluation", "setting", "start", "budget", "seed"]
COLUMNS = [*KEY, "run", "ran_at", "val", "test", "setting_params", "curve"]


def collect(runs: list[dict]) -> tuple[pd.DataFrame, list[tuple[str, str]]]:
    """One row per (corpus, evaluation, setting, start, budget, seed), the newest run's, in that
    order; and the (run, run kept instead) pairs left out."""
    cells = pd.DataFrame([cell for run in runs for cell in run_cells(run)], columns=COLUMNS)
    newest = cells.sort_values(["ran_at", "run"], ascending=False, kind="stable")
    repeated = newest.duplicated(KEY)
    kept = newest[~repeated]
    dropped = newest[repeated].merge(kept[[*KEY, "run"]], on=KEY, suffixes=("", "_kept"))
    return (kept.sort_values(KEY, kind="stable").reset_index(drop=True),
            sorted(set(zip(dropped["run"], dropped["run_kept"]))))


def best_baseline(cells: pd.DataFrame) -> str | None:
    """The baseline with the highest mean validation MRR@10 after fine-tuning (validation only),
    scored on the (budget, seed) runs every candidate has, since fine-tuned scores grow with the
    budget. Where the candidates share no run, only those run most often are candidates."""
    cells = pd.DataFrame(cells, columns=COLUMNS)  # or a list of cells (study/paper_tables.py)
    candidates = cells[~cells["start"].isin(FIXED_STARTS)]
    if candidates.empty:
        return None
    scores = candidates.assign(val=candidates["val"].map(lambda val: val["mrr@10"])).pivot(
        index=["budget", "seed"], columns="start", values="val")
    shared = scores.dropna()
    if shared.empty:
        counts = scores.count()
        shared = scores.loc[:, counts == counts.max()]
    means = {start: statistics.mean(shared[start].dropna()) for start in shared.columns}
    return max(sorted(means), key=means.get)


def budget_order(budget: str) -> tuple:
    return budget == "all", int(budget) if budget.isdigit() else 0


def cell_text(group: pd.DataFrame | list[dict]) -> str:
    group = pd.DataFrame(group, columns=COLUMNS)
    if group.empty:
        return "–"
    parts = []
    for metric in METRICS:
        values = [test[metric] for test in group["test"]]
        spread = f" ± {statistics.stdev(values):.3f}" if len(values) > 1 else ""
        parts.append(f"{statistics.mean(values):.3f}{spread}")
    return " / ".join(parts) + f" (n = {len(group)})"


def paired_differences(mine: pd.DataFrame, budgets: list[str], baseline: str | None, metric: str) -> str:
    """Test `metric` of one starting point minus another's, paired by seed, per budget."""
    contrasts = [("InfoCSE", "seed model"), ("InfoCSE++", "InfoCSE"), ("InfoCSE++", "seed model")]
    if baseline:
        contrasts[1:1] = [(baseline, "seed model"), ("InfoCSE", baseline), ("InfoCSE++", baseline)]
    score = mine.assign(score=mine["test"].map(lambda test: test[metric]))[["start", "budget", "seed", "score"]]
    records = []
    for first, second in contrasts:
        pairs = score[score["start"] == first].merge(score[score["start"] == second], on=["budget", "seed"])
        record = [f"{first} − {second}"]
        for budget in budgets:
            paired = pairs[pairs["budget"] == budget]
            interval = t_interval((paired["score_x"] - paired["score_y"]).tolist())
            record.append(f"{format_interval(interval)}: {verdict(interval)}" if len(paired) else "–")
        records.append(record)
    return markdown_table(pd.DataFrame(records, columns=["difference", *(f"{b} labels" for b in budgets)]))


def per_run_table(mine: pd.DataFrame, starts: list[str]) -> str:
    order = {start: i for i, start in enumerate(starts)}
    rows = mine.assign(order=mine["start"].map(lambda start: (order.get(start, len(order)), start)),
                       labels=mine["budget"].map(budget_order)).sort_values(["order", "labels", "seed"])
    return markdown_table(pd.DataFrame({
        "start": rows["start"], "labels": rows["budget"], "seed": rows["seed"].astype(str), "run": rows["run"],
        "val mrr@10": [f"{val['mrr@10']:.3f}" for val in rows["val"]],
        "test recall@1": [f"{test['recall@1']:.3f}" for test in rows["test"]],
        "test mrr@10": [f"{test['mrr@10']:.3f}" for test in rows["test"]]}))


def group_section(mine: pd.DataFrame, title: str) -> dict:
    baseline = best_baseline(mine)
    starts = ["seed model", *([baseline] if baseline else []), "InfoCSE", "InfoCSE++"]
    shown = mine[mine["start"].isin(starts)]
    budgets = sorted(set(shown["budget"]), key=budget_order)  # not one only another baseline has
    records = [[f"best baseline: {start}" if start == baseline else start,
                *(cell_text(shown[(shown["start"] == start) & (shown["budget"] == b)]) for b in budgets)]
               for start in starts]
    return {"title": title,
            "cells": markdown_table(pd.DataFrame(records, columns=["start", *(f"{b} labels" for b in budgets)])),
            "differences": [(metric, paired_differences(shown, budgets, baseline, metric)) for metric in METRICS],
            "per_run": per_run_table(shown, starts)}


def render(runs: list[dict]) -> str:
    cells, dropped = collect(runs)
    if cells.empty:
        return render_template("fewshot.md", runs_dir=RUNS_DIR, empty="holds no run file" if not runs else
                               "holds no run with fine-tuning metrics")
    groups = []
    for corpus, mine in cells.groupby("corpus", sort=True):
        settings = list(mine.groupby(["evaluation", "setting"], sort=True).groups)
        keys = varying_keys([{**json.loads(e), **json.loads(s)} for e, s in settings])
        for (evaluation, setting), group in mine.groupby(["evaluation", "setting"], sort=True):
            title = f"## Corpus: {corpus}"
            if len(settings) > 1:
                title += f" ({label({**json.loads(evaluation), **json.loads(setting)}, keys)})"
            groups.append(group_section(group, title))
    return render_template("fewshot.md", runs_dir=RUNS_DIR, empty="", groups=groups,
                           dropped="; ".join(f"{old} (kept {new})" for old, new in dropped))


def round_curves(cells: pd.DataFrame) -> list[tuple[str, str, list[int], list[float]]]:
    """(line label, split, rounds, mean fine-tuned MRR@10) of the InfoCSE++ cells, one line per corpus,
    evaluation, setting, budget and split: runs of different settings are never averaged together."""
    cells = cells[cells["curve"].map(bool).astype(bool)]
    evaluation_keys = varying_keys([json.loads(e) for e in cells["evaluation"]])  # e.g. a mix, a precision
    setting_keys = varying_keys([json.loads(s) for s in cells["setting"]])  # e.g. the fine-tuning epochs
    lines = []
    for (corpus, evaluation, setting, budget), group in cells.groupby(["corpus", "evaluation", "setting", "budget"],
                                                                      sort=True):
        curves = group["curve"].tolist()
        rounds = sorted({point["round"] for curve in curves for point in curve})
        parts = [label(json.loads(evaluation), evaluation_keys)] if evaluation_keys else []
        parts += [label(json.loads(setting), setting_keys)] if setting_keys else []
        where = f"{corpus} ({', '.join(parts)})" if parts else corpus
        for split in ("val", "test"):
            means = [statistics.mean(p[split]["mrr@10"] for curve in curves for p in curve if p["round"] == r)
                     for r in rounds]
            lines.append((f"{where}, {budget} labels, {split} (n={len(curves)})", split, rounds, means))
    return lines


def plot_rounds(runs: list[dict], path: Path = PLOT) -> None:
    """InfoCSE++ fine-tuned MRR@10 per round, mean over runs (`round_curves`): val solid, test dashed."""
    lines = round_curves(collect(runs)[0])
    figure = Figure(figsize=(6, 4))
    axis = figure.add_subplot()
    for name, split, rounds, means in lines:
        axis.plot(rounds, means, "--" if split == "test" else "-", marker="o", label=name)
    if not lines:
        axis.text(0.5, 0.5, "no InfoCSE++ runs yet", ha="center", va="center")
    axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    axis.set_xlabel("InfoCSE++ round")
    axis.set_ylabel("fine-tuned mrr@10")
    axis.set_title("InfoCSE++ round by round (mean over runs)")
    if axis.get_legend_handles_labels()[0]:
        axis.legend(fontsize=7)
    save_figure(figure, path)


def main() -> None:
    runs = load_runs()
    write_text(REPORT, render(runs))
    plot_rounds(runs, PLOT)
    print(f"wrote {REPORT} and {PLOT} from {len(runs)} run file(s) in {RUNS_DIR}/")


if __name__ == "__main__":
    main()

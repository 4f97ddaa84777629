"""Gather few-shot fine-tuning results of the committed run and every finished `dvc exp` run into
reports/fewshot.md and reports/plusplus_rounds.png.

    python -m scripts.compare_fewshot        # after the runs of scripts/queue_fewshot.sh

Rows are starting points, columns label budgets (`finetune.labels`); a cell is test Recall@1 /
MRR@10, mean ± sd over seeds:
- seed model: finetune@f0 of runs with `init.method: none`;
- best baseline: finetune@f0 of the baseline runs (`loop.max_iterations: 0`) of the baseline with
  the highest mean *validation* MRR@10 in the comparison (never chosen by test);
- InfoCSE: finetune@best of runs whose loop ran (round 1 of InfoCSE++);
- InfoCSE++: the round chosen by fine-tuned validation, in runs with `plusplus.max_rounds` > 1.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import yaml

from scripts.compare_experiments import (BASELINE_NAMES, delta_verdict, finished_runs, metrics_match_params, protocol,
                                         unfinished_experiments)

REPORT = Path("reports/fewshot.md")
PLOT = Path("reports/plusplus_rounds.png")
METRICS = ("recall@1", "mrr@10")


def fewshot_protocol(params: dict) -> dict:
    """What must match for two runs to be compared: the self-supervised protocol and the fine-tuning
    trainer; the label budget is a column, not a protocol difference."""
    finetune = {key: value for key, value in (params.get("finetune") or {}).items() if key != "labels"}
    return {**protocol(params), "finetune": finetune}


def run_cells(run: dict) -> list[dict]:
    """(starting point, corpus, budget, seed, val, test) entries one run contributes."""
    params, metrics = run["params"], run["metrics"]
    init = (params.get("init") or {}).get("method", "none")
    loop_ran = (params.get("loop") or {}).get("max_iterations", "all") != 0
    base = {"corpus": (params.get("corpus") or {}).get("source", "bbc"), "seed": params["seed"],
            "budget": str((params.get("finetune") or {}).get("labels"))}
    cells = []
    f0 = metrics.get("metrics/finetuned/f0.json")
    if f0 and "test" in f0:
        start = "seed model" if init == "none" else BASELINE_NAMES.get(init, init)
        if init == "none" or not loop_ran:
            cells.append({**base, "start": start, "val": f0["val"], "test": f0["test"]})
    best = metrics.get("metrics/finetuned/best.json")
    if best and "test" in best and loop_ran and init == "none":
        cells.append({**base, "start": "InfoCSE", "val": best["val"], "test": best["test"]})
    plusplus = metrics.get("metrics/plusplus.json")
    if plusplus and "test" in plusplus and (params.get("plusplus") or {}).get("max_rounds", 1) > 1 and init == "none":
        cells.append({**base, "start": "InfoCSE++", "val": plusplus["val"], "test": plusplus["test"],
                      "curve": plusplus_curve(metrics)})
    return cells


def plusplus_curve(metrics: dict) -> list[dict]:
    """Fine-tuned val/test per InfoCSE++ round that ran, from the rounds' own metrics files (DVC
    drops lists, such as the curve in metrics/plusplus.json, from `exp show`)."""
    rounds = {1: metrics.get("metrics/finetuned/best.json")}
    for path, value in metrics.items():
        if path.startswith("metrics/finetuned/round-") and path.endswith(".json"):
            rounds[int(path.removeprefix("metrics/finetuned/round-").removesuffix(".json"))] = value
    return [{"round": number, "val": value["val"], "test": value["test"]} for number, value in sorted(rounds.items())
            if value and not value.get("stopped") and "val" in value]


def collect(show: list[dict], current: dict, unfinished: set[str] = frozenset()) -> list[dict]:
    cells, seen = [], set()
    for run in finished_runs(show):
        if (run["name"] in unfinished or fewshot_protocol(run["params"]) != fewshot_protocol(current)
                or not metrics_match_params(run)):
            continue
        for cell in run_cells(run):
            key = (cell["corpus"], cell["start"], cell["budget"], cell["seed"])
            if key not in seen:
                seen.add(key)
                cells.append(cell)
    return cells


def best_baseline(cells: list[dict], corpus: str) -> str | None:
    """The baseline with the highest mean validation MRR@10 after fine-tuning (validation only),
    scored on the (budget, seed) runs every candidate has, since fine-tuned scores grow with the
    budget. Where the candidates share no run, only those run most often are candidates."""
    runs = {}
    for c in cells:
        if c["corpus"] == corpus and c["start"] not in ("seed model", "InfoCSE", "InfoCSE++"):
            runs.setdefault(c["start"], {})[(c["budget"], c["seed"])] = c["val"]["mrr@10"]
    if not runs:
        return None
    shared = set.intersection(*(set(scores) for scores in runs.values()))
    if not shared:
        most = max(len(scores) for scores in runs.values())
        runs = {start: scores for start, scores in runs.items() if len(scores) == most}
    mean_val = {start: statistics.mean(v for key, v in scores.items() if not shared or key in shared)
                for start, scores in runs.items()}
    return max(sorted(mean_val), key=mean_val.get)


def cell_text(group: list[dict]) -> str:
    if not group:
        return "–"
    parts = []
    for metric in METRICS:
        values = [c["test"][metric] for c in group]
        spread = f" ± {statistics.stdev(values):.3f}" if len(values) > 1 else ""
        parts.append(f"{statistics.mean(values):.3f}{spread}")
    return " / ".join(parts) + f" (n={len(group)})"


def paired_differences(mine: list[dict], budgets: list[str], baseline: str | None, metric: str) -> list[str]:
    """Test `metric` of one starting point minus another's, paired by seed (same split, same labels),
    per budget, with the comparison report's verdict (beyond the spread: |mean| > 2 SE, n >= 3)."""
    contrasts = [("InfoCSE", "seed model"), ("InfoCSE++", "InfoCSE"), ("InfoCSE++", "seed model")]
    if baseline:
        contrasts[1:1] = [(baseline, "seed model"), ("InfoCSE", baseline), ("InfoCSE++", baseline)]
    lines = [f"Paired by seed, test {metric} (first minus second; verdict as in reports/comparison.md):", "",
             "| difference | " + " | ".join(f"{b} labels" for b in budgets) + " |", "|---|" + "---|" * len(budgets)]
    for first, second in contrasts:
        cells = []
        for budget in budgets:
            other = {c["seed"]: c for c in mine if c["start"] == second and c["budget"] == budget}
            deltas = [c["test"][metric] - other[c["seed"]]["test"][metric]
                      for c in mine if c["start"] == first and c["budget"] == budget and c["seed"] in other]
            text, verdict = delta_verdict(deltas)
            cells.append(text if text == "–" else f"{text}: {verdict}")
        lines.append(f"| {first} − {second} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def render(cells: list[dict]) -> str:
    lines = ["# Few-shot fine-tuning: seed model, best baseline, InfoCSE, InfoCSE++", "",
             "Made by `python -m scripts.compare_fewshot`. Cell: test Recall@1 / MRR@10 after fine-tuning, mean ± sd "
             "over runs (each run has its own `seed`: label split, label sample and training). The best baseline is "
             "picked by fine-tuned validation MRR@10 on the budgets and seeds every baseline was run with; nothing is "
             "chosen by test.", "",
             "- seed model / best baseline: that model fine-tuned (`finetune@f0` of its run).",
             "- InfoCSE: the InfoCSE model chosen by validation, fine-tuned (`finetune@best`, InfoCSE++ round 1).",
             "- InfoCSE++: the fine-tuned round chosen by validation (`metrics/plusplus.json`); each later round runs "
             "InfoCSE from the previous round's fine-tuned model, then fine-tunes again, until validation stops "
             "improving or `plusplus.max_rounds`. Round 1 can be chosen, so InfoCSE++ equals InfoCSE where "
             "round 2 did not help on validation.", ""]
    for corpus in sorted({c["corpus"] for c in cells}):
        mine = [c for c in cells if c["corpus"] == corpus]
        baseline = best_baseline(mine, corpus)
        starts = ["seed model", *([baseline] if baseline else []), "InfoCSE", "InfoCSE++"]
        budgets = sorted({c["budget"] for c in mine if c["start"] in starts},  # not one only another baseline has
                         key=lambda b: (b == "all", int(b) if b.isdigit() else 0))
        lines += [f"## Corpus: {corpus}", "", "| start | " + " | ".join(f"{b} labels" for b in budgets) + " |",
                  "|---|" + "---|" * len(budgets)]
        for start in starts:
            label = f"best baseline: {start}" if start == baseline else start
            lines.append(f"| {label} | " + " | ".join(
                cell_text([c for c in mine if c["start"] == start and c["budget"] == b]) for b in budgets) + " |")
        lines.append("")
        for metric in METRICS:
            lines += paired_differences(mine, budgets, baseline, metric)
    return "\n".join(lines)


def plot_rounds(cells: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    figure, axis = plt.subplots(figsize=(6, 4))
    for corpus, budget in sorted({(c["corpus"], c["budget"]) for c in cells if c.get("curve")}):
        curves = [c["curve"] for c in cells if c.get("curve") and c["corpus"] == corpus and c["budget"] == budget]
        rounds = sorted({point["round"] for curve in curves for point in curve})
        for split, style in (("val", "-"), ("test", "--")):
            means = [statistics.mean(p[split]["mrr@10"] for curve in curves for p in curve if p["round"] == r)
                     for r in rounds]
            axis.plot(rounds, means, style, marker="o", label=f"{corpus}, {budget} labels, {split} (n={len(curves)})")
    axis.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    axis.set_xlabel("InfoCSE++ round")
    axis.set_ylabel("fine-tuned mrr@10")
    axis.set_title("InfoCSE++ round by round (mean over runs)")
    if axis.get_legend_handles_labels()[0]:
        axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, format="png", dpi=100, metadata={"Software": None})
    plt.close(figure)


def main() -> None:
    result = subprocess.run([sys.executable, "-m", "dvc", "exp", "show", "--json", "--all-commits"],
                            capture_output=True, text=True, check=True)
    cells = collect(json.loads(result.stdout), yaml.safe_load(Path("params.yaml").read_text()), unfinished_experiments())
    if not cells:
        sys.exit("no finished run has fine-tuning metrics with the current protocol")
    REPORT.write_text(render(cells), encoding="utf-8")
    plot_rounds(cells, PLOT)
    print(REPORT.read_text())


if __name__ == "__main__":
    main()

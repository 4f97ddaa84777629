"""Gather the committed run and every finished `dvc exp` run into reports/comparison.md and
reports/convergence.png (validation metric per iteration, one curve per initialization).

    python -m scripts.compare_experiments          # after the runs of scripts/queue_comparison.sh

Each run yields up to two rows: iteration 0 (the seed model, or the seed after one round of a
baseline annotator: that is the baseline's row) and, when the loop ran, the InfoCSE model
chosen by validation. Rows are grouped by corpus and method; a (corpus, method, seed) is
counted once (the newest run). Only runs with the current protocol (pair budget, training,
evaluation and split params) are compared. Deltas are against the seed model of the same seed,
which has the same label split. Nothing here looks at test numbers to choose anything.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

import yaml

REPORT = Path("reports/comparison.md")
PLOT = Path("reports/convergence.png")
TEST_METRICS = ("recall@1", "recall@5", "recall@10", "mrr@10")
BASELINE_NAMES = {"none": "seed model", "simcse": "SimCSE", "mirror": "Mirror-BERT", "consert": "ConSERT",
                  "ict": "ICT", "conpono": "CONPONO"}
PROTOCOL_KEYS = ("budget", "train", "evaluate", "split", "seed_model")


def budget_of(params: dict) -> dict:
    """The pair budget; runs from before the `budget` section kept it under `idc`."""
    if "budget" in params:
        return params["budget"]
    idc = params.get("idc", {})
    return {"max_pairs_per_document": idc.get("max_pairs_per_document"), "max_pairs": idc.get("max_pairs")}


def protocol(params: dict) -> dict:
    """What must match for runs to be compared. `train.devices` is left out: it changes where the
    global batch is computed, not what it is."""
    found = {key: budget_of(params) if key == "budget" else params.get(key) for key in PROTOCOL_KEYS}
    if isinstance(found["train"], dict):
        found["train"] = {key: value for key, value in found["train"].items() if key != "devices"}
    if isinstance(found["evaluate"], dict):  # older runs kept the report's bootstrap count here
        found["evaluate"] = {key: value for key, value in found["evaluate"].items() if key != "bootstrap_samples"}
    return found


def metrics_match_params(run: dict) -> bool:
    """Whether the metrics were made with the run's params. A queued or running experiment shows
    the metrics of the commit it started from, which carry another corpus or init method."""
    params, metrics = run["params"], run["metrics"]
    init = (params.get("init") or {}).get("method", "none")
    made_by = metrics.get("metrics/iterations/iter-0/pairs.json", {}).get("method", "none")
    manpages = (params.get("corpus") or {}).get("source") == "manpages"
    return made_by == init and manpages == ("manpages_version" in metrics.get("metrics/corpus.json", {}))


def finished_runs(show: list[dict]) -> list[dict]:
    """(name, params, metrics) of each commit's run and of each experiment, newest first, that has
    metrics/best.json."""
    runs = []
    for entry in show:
        if entry.get("rev") == "workspace":
            continue
        candidates = [(entry.get("name") or entry["rev"][:7], entry.get("data"))]
        for experiment in entry.get("experiments") or []:
            for rev in experiment.get("revs", []):
                candidates.append((rev.get("name") or experiment.get("name") or rev.get("rev", "")[:7], rev.get("data")))
        for name, data in candidates:
            if not data or data.get("error"):
                continue
            metrics = {path: value.get("data", {}) for path, value in (data.get("metrics") or {}).items()}
            params = ((data.get("params") or {}).get("params.yaml") or {}).get("data")
            if params and "iteration" in metrics.get("metrics/best.json", {}) and "seed" in params:
                runs.append({"name": name, "params": params, "metrics": metrics})
    return runs


def iteration_metrics(metrics: dict, kind: str) -> dict[int, dict]:
    """{t: metrics/iterations/iter-t/<kind>.json}."""
    found = {}
    for path, value in metrics.items():
        if path.startswith("metrics/iterations/iter-") and path.endswith(f"/{kind}.json"):
            found[int(path.split("iter-")[1].split("/")[0])] = value
    return found


def infocse_label(params: dict) -> str:
    init = (params.get("init") or {}).get("method", "none")
    idc = params.get("idc") or {}
    parts = [f"init {BASELINE_NAMES[init]}" if init != "none" else "init none"]
    if idc.get("method", "partition") == "kmeans":
        parts.append(f"IDC K-means ({idc.get('kmeans_clusters')} clusters)")
    else:
        parts.append(f"K={idc.get('k', 1)}")
    annotator = idc.get("first_round_annotator", "current")
    if annotator not in (None, "current"):
        parts.append(f"round 1 mined by {annotator}")
    return "InfoCSE (" + ", ".join(parts) + ")"


def rounds_summary(metrics: dict, up_to: int) -> dict:
    """Pairs, their mean token Jaccard and training seconds over the rounds that made the model."""
    pairs, trains = iteration_metrics(metrics, "pairs"), iteration_metrics(metrics, "train")
    rounds = [t for t in range(up_to + 1) if trains.get(t, {}).get("skipped") is False]
    counts = [pairs.get(t, {}).get("pairs", 0) for t in rounds]
    jaccard = [pairs.get(t, {}).get("mean_token_jaccard") for t in rounds]
    weighted = sum(c * j for c, j in zip(counts, jaccard) if j is not None)
    return {"pairs": sum(counts), "token_jaccard": weighted / sum(counts) if sum(counts) else None,
            "train_seconds": sum(trains[t].get("seconds", 0.0) for t in rounds)}


def run_rows(run: dict) -> list[dict]:
    """The rows one run contributes: its iteration 0 and, if the loop ran, its chosen model."""
    params, metrics = run["params"], run["metrics"]
    states = iteration_metrics(metrics, "retrieval")
    corpus = (params.get("corpus") or {}).get("source", "bbc")
    init = (params.get("init") or {}).get("method", "none")
    base = {"corpus": corpus, "seed": params["seed"], "run": run["name"]}
    rows = [{**base, "method": BASELINE_NAMES.get(init, init), "val": states[0].get("val", {}),
             "test": states[0].get("test", {}), **rounds_summary(metrics, 0)}]
    ran = [t for t, state in states.items() if t > 0 and not state.get("stopped") and state.get("val")]
    if ran:
        best = metrics["metrics/best.json"]["iteration"]
        rows.append({**base, "method": infocse_label(params), "val": states[best].get("val", {}),
                     "test": states[best].get("test", {}), "best_iteration": best, "iterations_run": len(ran),
                     **rounds_summary(metrics, best),
                     "curve": [(t, states[t]["val"].get(params["evaluate"]["metric"]))
                               for t in sorted(states) if not states[t].get("stopped") and states[t].get("val")]})
    return rows


def unfinished_experiments() -> set[str]:
    """Names of queued and running experiments (`dvc queue status`): their metrics are not theirs yet."""
    result = subprocess.run([sys.executable, "-m", "dvc", "queue", "status"], capture_output=True, text=True, check=True)
    names = set()
    for line in result.stdout.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[-1] in ("Queued", "Running"):
            names.add(fields[1])
    return names


def collect(show: list[dict], current: dict, unfinished: set[str] = frozenset()) -> list[dict]:
    rows, seen = [], set()
    for run in finished_runs(show):
        if run["name"] in unfinished or protocol(run["params"]) != protocol(current) or not metrics_match_params(run):
            continue
        for row in run_rows(run):
            key = (row["corpus"], row["method"], row["seed"])
            if key not in seen:
                seen.add(key)
                rows.append(row)
    return rows


def mean_sd(values: list[float]) -> str:
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"


def delta_verdict(deltas: list[float]) -> tuple[str, str]:
    """Mean Δ ± sd over seeds, and whether it exceeds the spread: |mean| > 2 standard errors, n >= 3."""
    if not deltas:
        return "–", "–"
    text = f"{statistics.mean(deltas):+.3f}" + (f" ± {statistics.stdev(deltas):.3f}" if len(deltas) > 1 else "")
    text += f" ({sum(d > 0 for d in deltas)}/{len(deltas)} > 0)"
    if len(deltas) < 3:
        return text, f"n={len(deltas)}: too few runs to tell"
    error = statistics.stdev(deltas) / len(deltas) ** 0.5
    mean = statistics.mean(deltas)
    if abs(mean) > 2 * error:
        return text, "higher, beyond the spread" if mean > 0 else "lower, beyond the spread"
    return text, "within the spread"


def corpus_table(rows: list[dict], corpus: str) -> list[str]:
    mine = [row for row in rows if row["corpus"] == corpus]
    seeds = {row["seed"]: row for row in mine if row["method"] == "seed model"}
    methods = sorted({row["method"] for row in mine}, key=lambda m: (m != "seed model", m.startswith("InfoCSE"), m))
    header = ["method", "runs (seeds)"] + [f"test {m}" for m in TEST_METRICS] + [
        "val recall@1", "Δ test recall@1 vs seed", "verdict", "Δ test mrr@10 vs seed", "verdict",
        "pairs", "token Jaccard", "train s"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for method in methods:
        group = [row for row in mine if row["method"] == method]
        cells = [method, f"{len(group)} ({', '.join(str(r['seed']) for r in sorted(group, key=lambda r: r['seed']))})"]
        cells += [mean_sd([row["test"][m] for row in group if m in row["test"]]) for m in TEST_METRICS]
        cells.append(mean_sd([row["val"]["recall@1"] for row in group if "recall@1" in row["val"]]))
        for metric in ("recall@1", "mrr@10"):
            deltas = [row["test"][metric] - seeds[row["seed"]]["test"][metric] for row in group
                      if method != "seed model" and row["seed"] in seeds and metric in row["test"]]
            cells += list(delta_verdict(deltas)) if method != "seed model" else ["–", "–"]
        cells += [f"{statistics.mean(row['pairs'] for row in group):.0f}",
                  mean_sd([row["token_jaccard"] for row in group if row["token_jaccard"] is not None]),
                  f"{statistics.mean(row['train_seconds'] for row in group):.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


REFERENCE = "InfoCSE (init none, K=1)"


def against_reference(rows: list[dict], corpus: str) -> list[str]:
    """Each other method minus InfoCSE (the default), paired by seed: do the methods differ beyond the spread?"""
    mine = [row for row in rows if row["corpus"] == corpus]
    reference = {row["seed"]: row for row in mine if row["method"] == REFERENCE}
    if not reference:
        return []
    lines = [f"Against {REFERENCE}, paired by seed (the other method minus InfoCSE, on test):", "",
             "| method | Δ recall@1 | verdict | Δ mrr@10 | verdict |", "|---|---|---|---|---|"]
    for method in sorted({row["method"] for row in mine} - {REFERENCE}):
        group = [row for row in mine if row["method"] == method and row["seed"] in reference]
        cells = [method]
        for metric in ("recall@1", "mrr@10"):
            cells += list(delta_verdict([row["test"][metric] - reference[row["seed"]]["test"][metric]
                                         for row in group if metric in row["test"]]))
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]


def render(rows: list[dict], current: dict) -> str:
    lines = ["# Comparison: InfoCSE, the classic self-supervised baselines, initializations and IDC ablations", "",
             "Made by `python -m scripts.compare_experiments` from every finished run "
             "(`dvc exp show --all-commits`) that used the current protocol: "
             f"pair budget {json.dumps(budget_of(current))}, train {json.dumps(current['train'])}, "
             f"seed model {current['seed_model']}.", "",
             "- A cell is the mean ± sample standard deviation over runs; each run has its own `seed`, which sets "
             "both the label split and the training seed.",
             "- Baseline rows are one round of that annotator from the seed model (`init.method=X`, "
             "`loop.max_iterations=0`), with the same pairs budget, batches and trainer as an IDC round.",
             "- InfoCSE rows are the model chosen by validation (early stopping); pairs and training seconds are "
             "summed over the rounds that made it.",
             "- Δ vs seed: the run minus the seed model of the same seed (same queries), mean ± sd over seeds and how "
             "many were above 0. *Verdict*: 'beyond the spread' when |mean Δ| exceeds two standard errors "
             "(sd/√n) over at least 3 runs; otherwise the difference is within run-to-run variation.",
             "- Training seconds were measured while other jobs shared the 2 CPU cores: compare them loosely.",
             "- token Jaccard: mean lexical overlap of the positive pairs (trivial positives score high).", ""]
    for corpus in sorted({row["corpus"] for row in rows}):
        count = sum(row["method"] == "seed model" for row in rows if row["corpus"] == corpus)
        lines += [f"## Corpus: {corpus}", "", f"Seed-model runs (label splits): {count}.", "",
                  *corpus_table(rows, corpus), "", *against_reference(rows, corpus)]
    return "\n".join(lines)


def plot_convergence(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    corpora = sorted({row["corpus"] for row in rows if "curve" in row})
    figure, axes = plt.subplots(1, max(1, len(corpora)), figsize=(6 * max(1, len(corpora)), 4), squeeze=False)
    for axis, corpus in zip(axes[0], corpora):
        methods = sorted({row["method"] for row in rows if row["corpus"] == corpus and "curve" in row})
        for method in methods:
            curves = [dict(row["curve"]) for row in rows if row["corpus"] == corpus and row["method"] == method
                      and "curve" in row]
            steps = sorted({t for curve in curves for t in curve})
            means = [statistics.mean([c[t] for c in curves if c.get(t) is not None]) for t in steps]
            axis.plot(steps, means, marker="o", label=f"{method} (n={len(curves)})")
        axis.set_title(f"{corpus}: validation metric per iteration (mean over runs)")
        axis.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        axis.set_xlabel("iteration (0 = f_0)")
        axis.set_ylabel("val mrr@10")
        axis.legend(fontsize=7)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png", dpi=100, metadata={"Software": None})
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--show-json", type=Path, help="read `dvc exp show --json --all-commits` output from a file")
    args = parser.parse_args()
    if args.show_json:
        show = json.loads(args.show_json.read_text())
    else:
        result = subprocess.run([sys.executable, "-m", "dvc", "exp", "show", "--json", "--all-commits"],
                                capture_output=True, text=True, check=True)
        show = json.loads(result.stdout)
    current = yaml.safe_load(Path("params.yaml").read_text())
    rows = collect(show, current, set() if args.show_json else unfinished_experiments())
    if not rows:
        sys.exit("no finished runs with the current protocol: run the pipeline or the experiments first")
    REPORT.write_text(render(rows, current), encoding="utf-8")
    plot_convergence(rows, PLOT)
    print(REPORT.read_text())


if __name__ == "__main__":
    main()

"""Gather the committed run and its `dvc exp` runs (one per `seed`) into reports/seeds.md.

    python scripts/summarize_seeds.py            # after: dvc exp run --queue -S seed=1,2,3 && dvc exp run --run-all

Each run has its own label split and training seed, so the spread across runs covers both
sources of variance. Reads only committed metrics (`dvc exp show --json`), no test-split choices.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

METRICS = ("recall@1", "mrr@10")
OUTPUT = Path("reports/seeds.md")


def experiment_runs(show: list[dict]) -> list[dict]:
    """(name, params, metrics) of each commit's run and every experiment that finished
    (runs from before the pipeline had a top-level `seed` are left out)."""
    runs = []
    for entry in show:
        if entry.get("rev") == "workspace":
            continue
        candidates = [(entry.get("name") or entry["rev"][:7], entry.get("data"))]
        for experiment in entry.get("experiments") or []:
            for rev in experiment.get("revs", []):
                candidates.append((rev.get("name") or experiment.get("name"), rev.get("data")))
        for name, data in candidates:
            best = ((data or {}).get("metrics") or {}).get("metrics/best.json", {}).get("data", {})
            if data and not data.get("error") and "iteration" in best and "seed" in data["params"]["params.yaml"]["data"]:
                runs.append({"name": name, "params": data["params"]["params.yaml"]["data"],
                             "metrics": {path: value.get("data", {}) for path, value in data["metrics"].items()}})
    return runs


def run_row(run: dict) -> dict:
    metrics = run["metrics"]
    states = {int(path.split("iter-")[1].split("/")[0]): data for path, data in metrics.items()
              if path.endswith("retrieval.json")}
    seed = states[0]
    row = {"name": run["name"], "seed": run["params"]["seed"], "best": metrics["metrics/best.json"]["iteration"],
           "seed_test": seed["test"], "seed_val": seed["val"]}
    for t, state in sorted(states.items()):
        if t and not state.get("stopped"):
            row[f"iter{t}"] = {split: {m: state[split][m] - seed[split][m] for m in METRICS} for split in ("val", "test")}
    row["best_delta"] = {m: metrics["metrics/best.json"]["test"][m] - seed["test"][m] for m in METRICS}
    return row


def spread(values: list[float]) -> str:
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:+.3f} (n=1)"
    return f"{statistics.mean(values):+.3f} ± {statistics.stdev(values):.3f} (n={len(values)}, {sum(v > 0 for v in values)} > 0)"


def render(rows: list[dict]) -> str:
    iterations = sorted({key for row in rows for key in row if key.startswith("iter")})
    header = ["run", "seed", "seed test R@1", "seed test MRR@10"]
    for it in iterations:
        header += [f"{it} Δval MRR@10", f"{it} Δtest R@1", f"{it} Δtest MRR@10"]
    header += ["best iter (by val)", "best Δtest R@1", "best Δtest MRR@10"]
    lines = ["# InfoCSE vs the seed model over several runs", "",
             "Each run: its own `seed` (label split, pair sampling, batch order, training). "
             "Δ = trained minus the seed model on the same run's queries; '–' = iteration skipped by early stopping.", "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in sorted(rows, key=lambda r: r["seed"]):
        cells = [row["name"], str(row["seed"]), f"{row['seed_test']['recall@1']:.3f}", f"{row['seed_test']['mrr@10']:.3f}"]
        for it in iterations:
            delta = row.get(it)
            cells += ([f"{delta['val']['mrr@10']:+.3f}", f"{delta['test']['recall@1']:+.3f}",
                       f"{delta['test']['mrr@10']:+.3f}"] if delta else ["–"] * 3)
        cells += [str(row["best"]), f"{row['best_delta']['recall@1']:+.3f}", f"{row['best_delta']['mrr@10']:+.3f}"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Mean ± sample standard deviation over runs (and how many runs were above 0):", ""]
    for it in iterations:
        for split, metric in (("test", "recall@1"), ("test", "mrr@10"), ("val", "mrr@10")):
            values = [row[it][split][metric] for row in rows if it in row]
            lines.append(f"- {it} Δ{split} {metric}: {spread(values)}")
    for metric in METRICS:
        lines.append(f"- best-by-val Δtest {metric}: {spread([row['best_delta'][metric] for row in rows])}")
    return "\n".join(lines) + "\n"


def main() -> None:
    result = subprocess.run(["dvc", "exp", "show", "--json", "--all-commits"], capture_output=True, text=True, check=True)
    rows, seen = [], set()
    for run in experiment_runs(json.loads(result.stdout)):
        row = run_row(run)
        if row["seed"] not in seen:  # one row per seed (a rerun of the same seed is the same run)
            seen.add(row["seed"])
            rows.append(row)
    if not rows:
        sys.exit("no finished runs with metrics/best.json: run the pipeline or the experiments first")
    OUTPUT.write_text(render(rows), encoding="utf-8")
    print(OUTPUT.read_text())


if __name__ == "__main__":
    main()

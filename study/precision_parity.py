"""bf16 against fp32, study/reports/precision.md, from committed run files: does `precision: auto` on a
CPU with bf16 units (bf16 encoding and training) give the models fp32 gives?

    python -m study.make_reports             # every report, this one included
    python -m study.precision_parity         # this report alone

A bf16 row (study/compare_experiments.py: one method of one run) is paired with the fp32 row of
the same corpus, evaluation, setting, method and seed, so both have the same label split and test
queries; the difference bf16 minus fp32 carries a t-based 95% interval over the seeds. The seed
model's row is in it too: it isolates what bf16 encoding alone does to the scores. Training seconds
are not compared: the fp32 runs were made on other machines.
"""

from __future__ import annotations

import json

import pandas as pd

from infocse.io import write_text
from infocse.reporting import format_interval, markdown_table, t_interval, verdict
from study.compare_experiments import (ALWAYS_SHOWN, PRECISION, RUNS_DIR, canonical, collect, label, load_runs,
                                         method_order, varying_keys)

REPORT = "study/reports/precision.md"
REDUCED = "bf16"
FULL = "fp32"
METRICS = (("test", "recall@1"), ("test", "mrr@10"))


def without_precision(evaluation: str) -> tuple[str, str]:
    """(the evaluation without the precision, the precision) of a row's evaluation key."""
    values = json.loads(evaluation)
    precision = values.pop(PRECISION, None)
    return canonical(values), precision


def twins(rows: list[dict]) -> list[tuple[dict, dict]]:
    """(bf16 row, fp32 row) of the same corpus, evaluation, setting, method and seed."""
    full = {}
    for row in rows:
        evaluation, precision = without_precision(row["evaluation"])
        if precision == FULL:
            full[row["corpus"], evaluation, row["setting"], row["method"], row["seed"]] = row
    pairs = []
    for row in rows:
        evaluation, precision = without_precision(row["evaluation"])
        other = full.get((row["corpus"], evaluation, row["setting"], row["method"], row["seed"]))
        if precision == REDUCED and other is not None:
            pairs.append((row, other))
    return pairs


def difference(pair: tuple[dict, dict], split: str, metric: str) -> float | None:
    reduced, full = pair
    if metric not in reduced[split] or metric not in full[split]:
        return None
    return reduced[split][metric] - full[split][metric]


def render(runs: list[dict]) -> str:
    lines = ["# Precision: bf16 against fp32", "",
             "Made by `python -m study.make_reports` (or `python -m study.precision_parity`) from the committed "
             f"run files in `{RUNS_DIR}/` alone.", "",
             f"- Each {REDUCED} row is paired with the {FULL} row of the same corpus, setting, method and seed (same "
             "label split, same test queries); a run's precision is what its stages recorded (`precision: auto` is "
             "bf16 on a CPU with AMX or AVX-512 BF16 units, fp32 elsewhere).",
             f"- Δ: {REDUCED} minus {FULL}, the mean over seeds with its t-based 95% interval, "
             "`mean [low, high] (n = seeds)`; the seed model's row is bf16 encoding alone.",
             "- Twins made by different commits differ in code too: the per-run table names both commits.",
             "- Training seconds are not compared: the fp32 runs ran on other machines "
             "(benchmarks/results/cpu_bf16.md compares speed side by side on one).", ""]
    pairs = twins(collect(runs)[0]) if runs else []
    if not pairs:
        return "\n".join(lines + [f"No {REDUCED} run has an {FULL} twin yet.", ""])
    keys = varying_keys([json.loads(reduced["setting"]) for reduced, _ in pairs], ALWAYS_SHOWN)
    groups = {}  # pooled within one evaluation (seed model, corpus size, ...) as well as one setting
    for pair in pairs:
        reduced = pair[0]
        evaluation = without_precision(reduced["evaluation"])[0]
        groups.setdefault((reduced["corpus"], evaluation, reduced["setting"], reduced["method"]), []).append(pair)
    evaluation_keys = varying_keys([json.loads(evaluation) for _, evaluation, _, _ in groups])
    records, per_run = [], []
    for (corpus, evaluation, setting, method), mine in sorted(
            groups.items(), key=lambda item: (*item[0][:3], method_order(item[0][3]))):
        metric = mine[0][0]["val_metric"]
        mine = sorted(mine, key=lambda pair: pair[0]["seed"])
        named = label({**json.loads(evaluation), **json.loads(setting)}, evaluation_keys + keys)
        record = {"corpus": corpus, "setting": named.replace("budget.", ""),
                  "method": method, "n (seeds)": f"{len(mine)} ({', '.join(str(p[0]['seed']) for p in mine)})"}
        for split, name in (("val", metric), *METRICS):
            values = [d for d in (difference(pair, split, name) for pair in mine) if d is not None]
            interval = t_interval(values)  # 4 digits: the differences are of the order of 0.001
            record[f"Δ {split} {name}"] = format_interval(interval, 4) if values else "–"
            record[f"verdict ({split} {name})"] = verdict(interval) if values else "–"
        records.append(record)
        per_run += [{"corpus": corpus, "method": method, "seed": reduced["seed"], f"{REDUCED} run": reduced["run"],
                     f"{FULL} run": full["run"], "commits": f"{reduced['commit']} / {full['commit']}",
                     f"val {metric}": f"{reduced['val'].get(metric, float('nan')):.4f} / "
                     f"{full['val'].get(metric, float('nan')):.4f}",
                     "test recall@1": f"{reduced['test'].get('recall@1', float('nan')):.4f} / "
                     f"{full['test'].get('recall@1', float('nan')):.4f}"} for reduced, full in mine]
    return "\n".join(lines + ["## Paired differences", "", markdown_table(pd.DataFrame(records)), "",
                              f"## Per run ({REDUCED} / {FULL})", "", markdown_table(pd.DataFrame(per_run)), ""])


def main() -> None:
    runs = load_runs()
    write_text(REPORT, render(runs))
    print(f"wrote {REPORT} from {len(runs)} run file(s) in {RUNS_DIR}/")


if __name__ == "__main__":
    main()

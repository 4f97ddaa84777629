"""report: one Markdown table and one convergence plot of the whole run.

Rows are iterations (0 = f_0: the seed model, or the seed after one `init.method` round). Test
deltas against f_0 carry paired-bootstrap 95% intervals over test queries: the same queries
ranked by both models are resampled together.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from stages.common import (  # noqa: E402
    IterationPaths,
    atomic_output,
    iteration_numbers,
    load_params,
    positive_int,
    read_json,
    run_stage,
)
from stages.evaluate import METRICS, per_query_scores  # noqa: E402

REPORT = "reports/report.md"
PLOT = "reports/run_convergence.png"
CURVE = "reports/run_convergence.csv"


def paired_bootstrap(seed_ranks: pd.DataFrame, ranks: pd.DataFrame, metric: str, samples: int, seed: int) -> tuple[float, float, float]:
    """Mean per-query difference (model - seed) of `metric` and its 95% percentile interval."""
    joined = seed_ranks.merge(ranks, on="doc_id", suffixes=("_seed", "_model"))
    difference = per_query_scores(joined["rank_model"])[metric] - per_query_scores(joined["rank_seed"])[metric]
    rng = np.random.default_rng(seed)
    means = difference[rng.integers(0, len(difference), size=(samples, len(difference)))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(difference.mean()), float(low), float(high)


def _stage_seconds(t: int) -> dict:
    names = ("embed", "train", "evaluate") if t else ("train", "evaluate")
    seconds = {}
    for name in names:
        path = IterationPaths(t).metrics / f"{name}.json"
        seconds[name] = read_json(path).get("seconds", 0.0) if path.exists() else 0.0
    return seconds


def collect_rows(iterations: list[int]) -> list[dict]:
    rows = []
    for t in [0, *iterations]:
        state = read_json(IterationPaths(t).state)
        pairs_path = IterationPaths(t).metrics / "pairs.json"
        pairs = read_json(pairs_path) if pairs_path.exists() else {}
        rows.append({"iteration": t, "state": state, "pairs": pairs, "seconds": _stage_seconds(t),
                     "init": pairs.get("method", "none") if t == 0 else None})
    return rows


def _fmt(value, digits=3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def render_markdown(rows: list[dict], deltas: dict[int, dict], best: int, corpus: dict) -> str:
    metric = rows[0]["state"]["val_metric"]
    header = ["iter", "status"] + [f"val {m}" for m in METRICS] + [f"test {m}" for m in METRICS] + [
        "pairs", "mean cluster size", "token Jaccard", "embed s", "IDC s", "train s", "eval s"]
    lines = ["# InfoCSE run report", "",
             f"Corpus: {corpus.get('documents')} documents, {corpus.get('sentences')} sentences; "
             f"{rows[0]['state'].get('val_queries', 0)} val and {rows[0]['state'].get('test_queries', 0)} test queries "
             f"against all {rows[0]['state'].get('candidates', 0)} bodies. Validation metric: {metric}. "
             f"Best iteration by validation: **{best}**.", "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        state, pairs, seconds = row["state"], row["pairs"], row["seconds"]
        if row["iteration"] == 0:
            status = "seed" if row["init"] in (None, "none") else f"seed + {row['init']}"
        else:
            status = "skipped (loop stopped)" if state["stopped"] else "trained"
        cells = [str(row["iteration"]), status]
        cells += [_fmt(state.get(split, {}).get(m)) for split in ("val", "test") for m in METRICS]
        cells += [str(pairs.get("pairs", "–")), _fmt(pairs.get("mean_cluster_size"), 2),
                  _fmt(pairs.get("mean_token_jaccard")), _fmt(seconds.get("embed"), 0), _fmt(pairs.get("idc_seconds"), 2),
                  _fmt(seconds.get("train"), 0), _fmt(seconds.get("evaluate"), 0)]
        lines.append("| " + " | ".join(cells) + " |")
    if deltas:
        lines += ["", "Test deltas against iteration 0 (paired bootstrap over test queries, 95% interval):", "",
                  "| iter | Δ recall@1 | 95% CI | Δ mrr@10 | 95% CI |", "|---|---|---|---|---|"]
        for t, delta in deltas.items():
            r1, mrr = delta["recall@1"], delta["mrr@10"]
            lines.append(f"| {t} | {r1[0]:+.3f} | [{r1[1]:+.3f}, {r1[2]:+.3f}] | {mrr[0]:+.3f} | [{mrr[1]:+.3f}, {mrr[2]:+.3f}] |")
    lines += ["", "An interval that contains 0 means this run cannot tell the model from iteration 0 on test. "
              "One run is one training seed and one label split; see the README for the spread over several.", ""]
    return "\n".join(lines)


def plot_convergence(curve: pd.DataFrame, metric: str, path: str) -> None:
    figure, axis = plt.subplots(figsize=(6, 4))
    for split in ("val", "test"):
        column = f"{split}_{metric}"
        if column in curve and curve[column].notna().any():
            axis.plot(curve["iteration"], curve[column], marker="o", label=f"{split} {metric}")
    axis.set_xlabel("iteration (0 = f_0)")
    axis.set_ylabel(metric)
    axis.set_xticks(curve["iteration"])
    axis.set_title("InfoCSE convergence")
    axis.legend()
    figure.tight_layout()
    with atomic_output(path) as tmp:
        figure.savefig(tmp, format="png", dpi=100, metadata={"Software": None})
    plt.close(figure)


def main() -> None:
    params = load_params()
    rows = collect_rows(iteration_numbers(params))
    active = [row for row in rows if not row["state"]["stopped"]]
    metric = rows[0]["state"]["val_metric"]
    samples = positive_int(params, "report.bootstrap_samples")
    deltas = {}
    seed_ranks = pd.read_parquet(IterationPaths(0).ranks)
    seed_ranks = seed_ranks[seed_ranks["split"] == "test"]
    if len(seed_ranks):
        for row in active[1:]:
            ranks = pd.read_parquet(IterationPaths(row["iteration"]).ranks)
            deltas[row["iteration"]] = {m: paired_bootstrap(seed_ranks, ranks[ranks["split"] == "test"], m, samples,
                                                            int(params["seed"])) for m in ("recall@1", "mrr@10")}
    curve = pd.DataFrame([{"iteration": row["iteration"],
                           **{f"{split}_{m}": row["state"].get(split, {}).get(m) for split in ("val", "test") for m in METRICS}}
                          for row in active])
    with atomic_output(CURVE) as tmp:
        curve.to_csv(tmp, index=False, float_format="%.6f")
    plot_convergence(curve, metric, PLOT)
    best = read_json("metrics/best.json")["iteration"]
    with atomic_output(REPORT) as tmp:
        tmp.write_text(render_markdown(rows, deltas, best, read_json("metrics/corpus.json")), encoding="utf-8")
    print(f"wrote {REPORT}, {PLOT}")


if __name__ == "__main__":
    run_stage(main)

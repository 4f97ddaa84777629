"""report: the run's table (reports/report.md), its headline metrics (metrics/summary.json) and
the data of `dvc plots`: convergence, training loss and pair statistics (reports/run_*.csv).

Rows are iterations (0 = f_0). Test deltas against f_0 carry paired-bootstrap 95% intervals over
the test queries of this one run.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from infocse.config import METRICS, load_config
from infocse.errors import run_stage
from infocse.io import atomic_output, read_json, write_json, write_text
from infocse.paths import BEST_METRICS, CONVERGENCE_CSV, CONVERGENCE_PLOT, CORPUS_METRICS, REPORT, IterationPaths
from infocse.reporting import markdown_table, new_figure, paired_bootstrap, save_figure
from infocse.retrieval import per_query_scores

DELTA_METRICS = ("recall@1", "mrr@10")
# Named here, not in infocse/paths.py: every stage depends on that file, and a new path there
# would rerun the whole pipeline for outputs only this stage writes.
SUMMARY = Path("metrics/summary.json")
LOSS_CSV = Path("reports/run_loss.csv")
PAIRS_CSV = Path("reports/run_pairs.csv")
# Always every column, NaN where a round has none: dvc.yaml's plots name them, `dvc plots` fails
# on a named field that a file lacks, and Vega-Lite draws no point for NaN (all CSVs here: NaN).
PAIR_STATISTICS = ("pairs", "mean_cluster_size", "mean_token_jaccard", "pair_source_precision",
                   "pair_category_precision")
LOOP_STAGE_FILES = ("embed", "pairs", "train", "evaluate")  # per iteration; iteration 0's train.json is init's


def read_optional(path) -> dict:
    return read_json(path) if path.exists() else {}


def fmt(value, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def iteration_row(t: int, mixed: bool) -> dict:
    paths = IterationPaths(t)
    state = read_json(paths.retrieval)
    pairs = read_optional(paths.metrics / "pairs.json")
    seconds = {name: read_optional(paths.metrics / f"{name}.json").get("seconds") for name in ("embed", "train", "evaluate")}
    train = read_optional(paths.metrics / "train.json")
    if t == 0:
        status = "seed" if pairs.get("method", "none") == "none" else f"seed + {pairs['method']}"
    else:
        status = "skipped (loop stopped)" if state["stopped"] else "trained"
    row = {"iter": str(t), "status": status}
    row.update({f"val {m}": fmt(state.get("val", {}).get(m)) for m in METRICS})
    row.update({f"test {m}": fmt(state.get("test", {}).get(m)) for m in METRICS})
    batches = train.get("batches", {})
    row.update({"pairs": str(pairs.get("pairs", "–")), "mean cluster size": fmt(pairs.get("mean_cluster_size"), 2),
                "token Jaccard": fmt(pairs.get("mean_token_jaccard")),
                "top-10% docs' pair share": fmt(pairs.get("share_of_pairs_from_top_10pct_documents"), 2),
                "batches": str(batches.get("batches", "–")), "mean batch": fmt(batches.get("mean_size"), 1),
                "min batch": str(batches.get("min_size", "–")), "full batches": fmt(batches.get("share_full"), 2),
                "embed s": fmt(seconds["embed"], 0), "IDC s": fmt(pairs.get("idc_seconds"), 2),
                "train s": fmt(seconds["train"], 0), "eval s": fmt(seconds["evaluate"], 0)})
    if "pairs_with_sources" in pairs or mixed:  # a mixed corpus: how many mined pairs are right
        row["pairs from one source"] = fmt(pairs.get("pair_source_precision"))
        row["pairs from one category"] = fmt(pairs.get("pair_category_precision"))
    return row


def test_deltas(iterations: list[int], samples: int, seed: int) -> pd.DataFrame:
    """Per active iteration: mean per-query test difference against f_0 and its bootstrap interval."""
    reference = pd.read_parquet(IterationPaths(0).ranks)
    reference = reference[reference["split"] == "test"]
    rows = []
    for t in iterations:
        if read_json(IterationPaths(t).retrieval)["stopped"] or reference.empty:
            continue
        ranks = pd.read_parquet(IterationPaths(t).ranks)
        joined = reference.merge(ranks[ranks["split"] == "test"], on="doc_id", suffixes=("_seed", "_model"))
        row = {"iter": str(t)}
        for metric in DELTA_METRICS:
            difference = per_query_scores(joined["rank_model"])[metric] - per_query_scores(joined["rank_seed"])[metric]
            mean, low, high = paired_bootstrap(difference, samples, seed)
            row[f"Δ {metric}"] = f"{mean:+.3f}"
            row[f"Δ {metric} 95% CI"] = f"[{low:+.3f}, {high:+.3f}]"
        rows.append(row)
    return pd.DataFrame(rows)


def mined_pairs(iterations: list[int]) -> dict[int, dict]:
    """pairs.json of every iteration that mined pairs (not f_0 without an init round, nor a round
    after the loop stopped)."""
    stats = {t: read_optional(IterationPaths(t).metrics / "pairs.json") for t in iterations}
    return {t: pairs for t, pairs in stats.items() if pairs.get("pairs")}


def headline(states: dict[int, dict], best: int) -> dict:
    """The few numbers `dvc exp show` compares runs on, named unlike any other metric so that its
    columns carry no file prefix. Test deltas are against f_0 (iteration 0); the seconds are those
    of init, evaluate_init and every embed, cluster, train and evaluate (fine-tuning runs later)."""
    chosen, seed, metric = states[best], states[0], states[0]["val_metric"]
    summary = {"chosen_iteration": best, f"val_{metric}": chosen.get("val", {}).get(metric),
               "pairs_per_round": {str(t): stats["pairs"] for t, stats in mined_pairs(list(states)).items()},
               "total_seconds": sum(read_optional(IterationPaths(t).metrics / f"{name}.json").get("seconds", 0.0)
                                    for t in states for name in LOOP_STAGE_FILES)}
    for name in DELTA_METRICS:
        value = chosen.get("test", {}).get(name)
        summary[f"test_{name}"] = value
        summary[f"test_{name}_vs_seed"] = None if value is None else value - seed["test"][name]
    return summary


def loss_curves(iterations: list[int]) -> pd.DataFrame:
    """Every logged training loss; `run_step` counts steps over the whole run, so the curve of
    all iterations reads left to right (`step` restarts each iteration)."""
    rows, offset = [], 0
    for t in iterations:
        train = read_optional(IterationPaths(t).metrics / "train.json")
        rows += [{"iteration": t, "step": point["step"], "run_step": offset + point["step"], "loss": point["loss"]}
                 for point in train.get("loss_curve", [])]
        offset += train.get("steps", 0)
    return pd.DataFrame(rows, columns=["iteration", "step", "run_step", "loss"])


def pair_statistics(iterations: list[int]) -> pd.DataFrame:
    """Per iteration that mined pairs: how many, cluster size, token overlap, and on a mixed
    corpus the share of pairs from one source and one category."""
    rows = [{"iteration": t, **{name: stats.get(name) for name in PAIR_STATISTICS}}
            for t, stats in mined_pairs(iterations).items()]
    return pd.DataFrame(rows, columns=["iteration", *PAIR_STATISTICS])


def write_csv(frame: pd.DataFrame, path: Path) -> None:
    with atomic_output(path) as tmp:
        frame.to_csv(tmp, index=False, float_format="%.6f", na_rep="NaN")


def plot_convergence(curve: pd.DataFrame, metric: str) -> None:
    figure, axis = new_figure()
    for split in ("val", "test"):
        column = f"{split}_{metric}"
        if column in curve and curve[column].notna().any():
            axis.plot(curve["iteration"], curve[column], marker="o", label=f"{split} {metric}")
    axis.set_xlabel("iteration (0 = f_0)")
    axis.set_ylabel(metric)
    axis.set_xticks(curve["iteration"])
    axis.set_title("InfoCSE convergence")
    if axis.get_legend_handles_labels()[0]:
        axis.legend()
    save_figure(figure, CONVERGENCE_PLOT)


def main() -> None:
    config = load_config()
    iterations = [0, *config.iterations]
    states = {t: read_json(IterationPaths(t).retrieval) for t in iterations}
    first, metric = states[0], states[0]["val_metric"]
    best = read_json(BEST_METRICS)["iteration"]
    corpus = read_json(CORPUS_METRICS)
    mixed = "mixed_documents" in corpus
    curve = pd.DataFrame([{"iteration": t, **{f"{split}_{m}": state.get(split, {}).get(m)
                                               for split in ("val", "test") for m in METRICS}}
                          for t, state in states.items() if not state["stopped"]])
    write_csv(curve, CONVERGENCE_CSV)
    plot_convergence(curve, metric)
    write_csv(loss_curves(iterations), LOSS_CSV)
    write_csv(pair_statistics(iterations), PAIRS_CSV)
    write_json(SUMMARY, headline(states, best))
    if first.get("val_queries", 0):
        chosen = f"Best iteration by validation: **{best}**."
    elif corpus.get("documents_with_title") == 0:
        chosen = (f"No document has a title, so there are no retrieval queries and no retrieval metrics: the table "
                  f"shows pair statistics only. No validation was possible: nothing stopped the loop early, and "
                  f"the last iteration run (**{best}**) was kept.")
    else:
        chosen = (f"No val queries, so no validation was possible: nothing stopped the loop early, and the last "
                  f"iteration run (**{best}**) was kept, not chosen by any metric (test was not used to choose).")
    lines = ["# InfoCSE run report", "",
             f"Corpus: {corpus.get('documents')} documents, {corpus.get('sentences')} sentences; "
             f"{first.get('val_queries', 0)} val and {first.get('test_queries', 0)} test queries "
             f"against all {first.get('candidates', 0)} bodies. Validation metric: {metric}. {chosen}"
             + (f" Training documents: {corpus['mixed_documents']} mixed documents of several sources each; the "
                "pair columns say how many mined pairs have both sentences from one source, and from one "
                "category." if mixed else ""), "",
             markdown_table(pd.DataFrame([iteration_row(t, mixed) for t in iterations]))]
    deltas = test_deltas(config.iterations, config.bootstrap_samples, config.seed)
    if not deltas.empty:
        lines += ["", f"Test deltas against iteration 0: mean per-query difference over the "
                      f"{first.get('test_queries', 0)} test queries, with a paired bootstrap 95% interval "
                      f"({config.bootstrap_samples} resamples):", "", markdown_table(deltas)]
    lines += ["", "An interval that contains 0 means this run cannot tell the model from iteration 0 on test. "
                  "One run is one training seed and one label split; see the README for the spread over several.", ""]
    write_text(REPORT, "\n".join(lines))
    print(f"wrote {REPORT}, {SUMMARY}, {CONVERGENCE_PLOT}, {LOSS_CSV}, {PAIRS_CSV}")


if __name__ == "__main__":
    run_stage(main)

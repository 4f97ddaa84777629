"""report: the run's report (reports/report.md: the headline first, then narrow tables), its
headline metrics (metrics/summary.json), its plots (each iteration minus the seed model with its
interval; seconds per stage) and the data of `dvc plots` (reports/run_*.csv).

Differences from iteration 0 (the seed model) carry paired bootstrap 95% intervals over the
validation queries (params `loop.validate_on`: val, or few-shot pool + val) or test queries of this one run.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pandas as pd

from infocse.config import METRICS, VALIDATION_QUERIES, VALIDATION_SETS, load_config
from infocse.errors import run_stage
from infocse.io import atomic_output, read_json, write_json, write_text
from infocse.model_card import METRIC_NAMES
from infocse.paths import (BEST_METRICS, CONVERGENCE_CSV, CONVERGENCE_PLOT, CORPUS_METRICS, PLUSPLUS_METRICS, REPORT,
                           IterationPaths, finetuned_metrics, finetuned_timing)
from infocse.reporting import markdown_table, new_figure, paired_bootstrap, save_figure
from infocse.retrieval import per_query_scores
from infocse.stopping import round_names

DELTA_METRICS = ("recall@1", "mrr@10")
# Named here, not in infocse/paths.py: every stage depends on that file, and a new path there
# would rerun the whole pipeline for outputs only this stage writes.
SUMMARY = Path("metrics/summary.json")
LOSS_CSV = Path("reports/run_loss.csv")
PAIRS_CSV = Path("reports/run_pairs.csv")
SECONDS_PLOT = Path("reports/run_seconds.png")
# Always every column, NaN where a round has none: dvc.yaml's plots name them, `dvc plots` fails
# on a named field that a file lacks, and Vega-Lite draws no point for NaN (all CSVs here: NaN).
PAIR_STATISTICS = ("pairs", "mean_cluster_size", "mean_token_jaccard", "pair_source_precision",
                   "pair_category_precision")
LOOP_STAGE_FILES = ("embed", "pairs", "train", "evaluate")  # per iteration; iteration 0's train.json is init's


def read_optional(path) -> dict:
    return read_json(path) if path.exists() else {}


def fmt(value, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def status_of(t: int, state: dict, pairs: dict) -> str:
    if t == 0:
        return "seed" if pairs.get("method", "none") == "none" else f"seed + {pairs['method']}"
    return "skipped (loop stopped)" if state["stopped"] else "trained"


def scores_of(t: int, splits: tuple[str, ...]) -> pd.Series:
    """Per-query ranks of iteration t on the queries of `splits`, by doc_id."""
    ranks = pd.read_parquet(IterationPaths(t).ranks)
    return ranks[ranks["split"].isin(splits)].set_index("doc_id")["rank"]


def paired_delta(t: int, reference: int, splits: tuple[str, ...], metric: str, samples: int, seed: int) -> dict | None:
    """Mean per-query difference of iteration t minus `reference` on the queries of `splits`, with
    its paired bootstrap 95% interval; None where a side has no queries."""
    joined = pd.concat([scores_of(t, splits), scores_of(reference, splits)], axis=1, join="inner", keys=["t", "ref"])
    if joined.empty:
        return None
    difference = per_query_scores(joined["t"])[metric] - per_query_scores(joined["ref"])[metric]
    mean, low, high = paired_bootstrap(difference, samples, seed)
    return {"mean": mean, "low": low, "high": high, "queries": len(joined)}


def interval_text(delta: dict | None) -> str:
    return "–" if delta is None else f"{delta['mean']:+.3f} [{delta['low']:+.3f}, {delta['high']:+.3f}]"


def contains_zero(delta: dict) -> bool:
    return delta["low"] <= 0 <= delta["high"]


def validation_label(validate_on: str) -> str:
    return {"fewshot+val": "few-shot+val"}.get(validate_on, validate_on)


def quality_rows(states: dict[int, dict], deltas: dict, metric: str, validate_on: str) -> pd.DataFrame:
    rows, label = [], validation_label(validate_on)
    for t, state in states.items():
        row = {"iter": str(t), "status": status_of(t, state, read_optional(IterationPaths(t).metrics / "pairs.json")),
               f"{label} {METRIC_NAMES[metric]}": fmt(state.get("validation", {}).get(metric)),
               f"Δ {label} {METRIC_NAMES[metric]} [95%]": interval_text(deltas.get((t, "validation", metric))),
               "test R@1": fmt(state.get("test", {}).get("recall@1")),
               "Δ test R@1 [95%]": interval_text(deltas.get((t, "test", "recall@1"))),
               "test MRR@10": fmt(state.get("test", {}).get("mrr@10")),
               "Δ test MRR@10 [95%]": interval_text(deltas.get((t, "test", "mrr@10")))}
        rows.append(row)
    return pd.DataFrame(rows)


def pair_rows(iterations: list[int], mixed: bool) -> pd.DataFrame:
    rows = []
    for t in iterations:
        pairs = read_optional(IterationPaths(t).metrics / "pairs.json")
        batches = read_optional(IterationPaths(t).metrics / "train.json").get("batches", {})
        if not pairs.get("pairs"):
            continue
        row = {"iter": str(t), "pairs": f"{pairs['pairs']:,}", "mean cluster": fmt(pairs.get("mean_cluster_size"), 2),
               "token Jaccard": fmt(pairs.get("mean_token_jaccard")),
               "top-10% docs' share": fmt(pairs.get("share_of_pairs_from_top_10pct_documents"), 2),
               "batches": str(batches.get("batches", "–")), "mean batch": fmt(batches.get("mean_size"), 1),
               "full batches": fmt(batches.get("share_full"), 2)}
        if mixed:  # a mixed corpus: how many mined pairs are right
            row["from one source"] = fmt(pairs.get("pair_source_precision"))
            row["from one category"] = fmt(pairs.get("pair_category_precision"))
        rows.append(row)
    return pd.DataFrame(rows)


def stage_seconds(iterations: list[int], finetuned: list[str]) -> pd.DataFrame:
    """Seconds of each stage that records them, in pipeline order (select, labels and report record none)."""
    rows = [("init", IterationPaths(0).metrics / "train.json"), ("evaluate_init", IterationPaths(0).metrics / "evaluate.json")]
    for t in iterations:
        rows += [(f"{name}@{t}", IterationPaths(t).metrics / f"{file}.json")
                 for name, file in (("embed", "embed"), ("cluster", "pairs"), ("train", "train"), ("evaluate", "evaluate"))]
    rows += [(f"{'finetune' if name in ('f0', 'best') else 'plusplus'}@{name.removeprefix('round-')}",
              finetuned_timing(name)) for name in finetuned]
    found = [(stage, read_optional(path).get("seconds")) for stage, path in rows]
    return pd.DataFrame([(stage, seconds) for stage, seconds in found if seconds is not None], columns=["stage", "seconds"])


def finetuned_rows(names: list[str]) -> pd.DataFrame:
    labels = {"f0": "seed model, fine-tuned", "best": "InfoCSE (chosen iteration), fine-tuned"}
    rows = []
    for name in names:
        result = read_optional(finetuned_metrics(name))
        if not result or result.get("skipped"):
            continue
        row = {"model": labels.get(name, f"InfoCSE++ {name.replace('-', ' ')}")}
        if result.get("stopped"):
            row.update({"val MRR@10": "–", "test R@1": "–", "test MRR@10": "–", "status": "skipped (stopped)"})
        else:
            row.update({"val MRR@10": fmt(result["val"].get("mrr@10")), "test R@1": fmt(result["test"].get("recall@1")),
                        "test MRR@10": fmt(result["test"].get("mrr@10")), "status": "fine-tuned"})
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


def plot_deltas(deltas: dict, iterations: list[int], metric: str, validate_on: str) -> None:
    """Each iteration minus the seed model, with its paired bootstrap 95% interval and a zero line:
    the scale is the difference, so a step inside the noise does not look like a jump."""
    figure, axis = new_figure(7, 4)
    series = [("validation", metric), ("test", "recall@1"), ("test", "mrr@10")]
    for offset, (split, name) in zip((-0.12, 0.0, 0.12), series):
        points = [(t, deltas[t, split, name]) for t in iterations if deltas.get((t, split, name))]
        if points:
            x = [t + offset for t, _ in points]
            y = [d["mean"] for _, d in points]
            error = [[d["mean"] - d["low"] for _, d in points], [d["high"] - d["mean"] for _, d in points]]
            label = validation_label(validate_on) if split == "validation" else split
            axis.errorbar(x, y, yerr=error, fmt="o", capsize=4, label=f"{label} {METRIC_NAMES[name]}")
    axis.axhline(0.0, color="black", linewidth=0.8)
    axis.set_xticks(iterations)
    axis.set_xlabel("iteration")
    axis.set_ylabel("minus the seed model (95% interval)")
    axis.set_title("Each iteration against the seed model (iteration 0)")
    if axis.get_legend_handles_labels()[0]:
        axis.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    save_figure(figure, CONVERGENCE_PLOT)


def plot_seconds(seconds: pd.DataFrame) -> None:
    figure, axis = new_figure(7, max(2.5, 0.3 * len(seconds) + 1))
    axis.barh(seconds["stage"][::-1], seconds["seconds"][::-1])
    axis.set_xlabel("seconds")
    axis.set_title("Seconds per stage")
    save_figure(figure, SECONDS_PLOT)


def headline_lines(states: dict[int, dict], best: int, deltas: dict, metric: str, config, corpus: dict) -> list[str]:
    """What a reader needs first: the chosen model, its test difference from the seed model, and
    whether this run (or its validation) can tell them apart."""
    first = states[0]
    validate_on = first.get("validate_on", "val")
    lines = []
    if first.get("validation_queries", 0):
        lines.append(f"**Iteration {best} chosen** by validation {METRIC_NAMES[metric]} ({first['validation_queries']:,} "
                     f"{VALIDATION_QUERIES[validate_on]}): `models/best`.")
    elif corpus.get("documents_with_title") == 0:
        return [f"No document has a title, so there are no retrieval queries and no retrieval metrics: the tables show "
                f"pair statistics and seconds only. Nothing stopped the loop early, and the last iteration run "
                f"(**{best}**) is `models/best`."]
    else:
        lines.append(f"No {VALIDATION_QUERIES[validate_on]}, so no validation was possible: nothing stopped the loop early, and the last "
                     f"iteration run (**{best}**) is `models/best`, not chosen by any metric (test chooses nothing).")
    r1, mrr = deltas.get((best, "test", "recall@1")), deltas.get((best, "test", "mrr@10"))
    if best == 0:
        lines.append("The seed model itself was kept: no trained iteration beat it on validation.")
    elif r1 and mrr:
        lines.append(f"Against the seed model on {r1['queries']:,} test queries: R@1 {interval_text(r1)}, MRR@10 "
                     f"{interval_text(mrr)}")
        samples = config.report.bootstrap_samples
        lines.append(f"(mean per-query difference, paired bootstrap 95%, {samples:,} resamples).")
        above, below = any(d["low"] > 0 for d in (r1, mrr)), any(d["high"] < 0 for d in (r1, mrr))
        lines.append("This run cannot tell the chosen model from the seed model on test: both intervals contain 0."
                     if not (above or below) else
                     "On test this run puts the chosen model above the seed model (an interval above 0)." if not below
                     else "On test this run puts the chosen model below the seed model (an interval below 0)." if not above
                     else "On test R@1 and MRR@10 disagree: one interval is above 0, the other below.")
    if first.get("validation_queries", 0):
        active = [t for t, state in states.items() if not state["stopped"] and t != best]
        close = {t: deltas.get((best, t, "val-pair")) for t in active}
        within = [t for t, delta in close.items() if delta and contains_zero(delta)]
        if within:
            named = ("iteration " if len(within) == 1 else "iterations ") + " and ".join(str(t) for t in within)
            lines.append(f"Validation cannot tell iteration {best} from {named} ({validation_label(validate_on)} "
                         f"{METRIC_NAMES[metric]} "
                         f"of {best} minus " + ", ".join(f"{t}: {interval_text(close[t])}" for t in within) + ")"
                         + ("; the trained model is " + ", ".join(f"`models/iterations/iter-{t}`" for t in within if t)
                            if best == 0 and any(within) else "") + ".")
        elif active:
            lines.append(f"Validation separates iteration {best} from every other iteration run.")
    lines.append("One run is one training seed and one label split: the README gives the spread over seeds.")
    return [wrapped for line in lines for wrapped in textwrap.wrap(line, 150)]  # no line wider than a terminal


def main() -> None:
    config = load_config()
    iterations = [0, *config.iterations]
    states = {t: read_json(IterationPaths(t).retrieval) for t in iterations}
    first, metric = states[0], states[0]["val_metric"]
    validate_on = first.get("validate_on", "val")
    splits = {"validation": VALIDATION_SETS[validate_on], "test": ("test",)}
    best = read_json(BEST_METRICS)["iteration"]
    corpus = read_json(CORPUS_METRICS)
    mixed = "mixed_documents" in corpus
    curve = pd.DataFrame([{"iteration": t, **{f"{split}_{m}": state.get(split, {}).get(m)
                                               for split in ("val", "test") for m in METRICS}}
                          for t, state in states.items() if not state["stopped"]])
    write_csv(curve, CONVERGENCE_CSV)
    write_csv(loss_curves(iterations), LOSS_CSV)
    write_csv(pair_statistics(iterations), PAIRS_CSV)
    write_json(SUMMARY, headline(states, best))

    active = [t for t, state in states.items() if not state["stopped"]]
    deltas, samples, seed = {}, config.report.bootstrap_samples, config.seed
    for t in active[1:]:
        for split, name in (("validation", metric), ("test", "recall@1"), ("test", "mrr@10")):
            deltas[t, split, name] = paired_delta(t, 0, splits[split], name, samples, seed)
    for t in active:
        if t != best:
            deltas[best, t, "val-pair"] = paired_delta(best, t, splits["validation"], metric, samples, seed)
    plot_deltas(deltas, iterations, metric, validate_on)
    finetuned = ["f0", *round_names(config).values()]
    seconds = stage_seconds(config.iterations, finetuned)
    plot_seconds(seconds)

    lines = ["# InfoCSE run report", "", *headline_lines(states, best, deltas, metric, config, corpus), "",
             f"Corpus: {corpus.get('documents', 0):,} documents, {corpus.get('sentences', 0):,} sentences; "
             f"{first.get('validation_queries', 0):,} {VALIDATION_QUERIES[validate_on].removesuffix(' queries')} and "
             f"{first.get('test_queries', 0):,} test queries against all "
             f"{first.get('candidates', 0):,} bodies.", "",
             "## Quality per iteration", "",
             "Δ: minus iteration 0 (the seed model), mean per-query difference with its paired bootstrap 95% interval. "
             "Plot: `reports/run_convergence.png`.", "",
             markdown_table(quality_rows(states, deltas, metric, validate_on)), ""]
    pairs = pair_rows(iterations, mixed)
    if not pairs.empty:
        lines += ["## Pairs and batches", "", markdown_table(pairs), ""]
    tuned = finetuned_rows(finetuned)
    if not tuned.empty:
        plusplus = read_optional(PLUSPLUS_METRICS)
        lines += [f"## Fine-tuned on {read_optional(finetuned_metrics('f0')).get('labels', 0):,} labels", "",
                  markdown_table(tuned), "",
                  f"Chosen: InfoCSE++ round {plusplus.get('best_round')} by {plusplus.get('selected_by')}: "
                  "`models/plusplus/best`, the model to use when you have these labels.", ""]
    if not seconds.empty:
        total = pd.DataFrame([("total", seconds["seconds"].sum())], columns=["stage", "seconds"])
        table = pd.concat([seconds, total]).assign(
            seconds=lambda f: f["seconds"].map(lambda v: f"{v:,.1f}" if v < 10 else f"{v:,.0f}"))
        lines += ["## Seconds per stage", "", "Plot: `reports/run_seconds.png`.", "", markdown_table(table), ""]
    write_text(REPORT, "\n".join(lines))
    print(f"wrote {REPORT}, {SUMMARY}, {CONVERGENCE_PLOT}, {SECONDS_PLOT}, {LOSS_CSV}, {PAIRS_CSV}")


if __name__ == "__main__":
    run_stage(main)

"""The cross-run comparison, study/reports/comparison.md and study/reports/convergence.png, from committed run files.

    python -m study.make_reports             # this report and the few-shot one (study/compare_fewshot.py)
    python -m study.compare_experiments      # this report alone

It reads only `study/runs/*.json` (written by `python -m study.export_runs` after the runs of
study/plan.yaml), never DVC, so a clone regenerates the same bytes. With no run files
it still writes a report that says so.

Each run gives up to two rows: iteration 0 (the seed model, or the seed model after one round of a
baseline annotator: that baseline's row) and, when the loop ran, the InfoCSE model chosen by
validation. Rows are grouped by corpus, evaluation protocol and setting (the pair budget and every
other training param), then by method; a (group, method, seed) counts once, from its newest run.
Across seeds every difference is paired: a run minus the seed model of the same seed (same label
split, same test queries), and minus InfoCSE (init none, K=1) of the same seed and setting; the
mean difference carries a t-based 95% interval over the seeds (`infocse.reporting.t_interval`),
n is always shown, and a method is called higher or lower only when that interval excludes 0.
Under each budget sweep the report names the InfoCSE setting with the best mean validation metric
over the seeds every setting has run. Nothing here looks at test numbers to choose anything.
"""

from __future__ import annotations

import itertools
import json
import statistics
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from infocse.io import write_text
from infocse.methods import METHODS
from infocse.reporting import format_interval, markdown_table, save_figure, t_interval, verdict
from study.export_runs import flatten
from study.template import render_template

RUNS_DIR = Path("study/runs")
REPORT = Path("study/reports/comparison.md")
PLOT = Path("study/reports/convergence.png")
TEST_METRICS = ("recall@1", "recall@5", "recall@10", "mrr@10")
DELTA_METRICS = ("recall@1", "mrr@10")
BASELINE_NAMES = {name: method.display for name, method in METHODS.items()}  # each `init.method` by what it runs
NEIGHBOURS = BASELINE_NAMES["neighbours"]
TEXT_SHUFFLE_CUTOFF = BASELINE_NAMES["text_shuffle_cutoff"]
SEED_MODEL = BASELINE_NAMES["none"]
REFERENCE = "InfoCSE (init none, K=1)"

# What the stages ran in, from their metrics (`ran_precision`), stands for the precision params (the
# top-level `precision`; older run files have per-stage keys, whose `auto` was bf16 on a CPU with bf16
# units and fp32 on one without): a run is compared, paired and pooled only with runs of the same
# precision (the evaluation includes it).
PRECISION = "precision"
PRECISION_PARAMS = ("precision", "embed.precision", "evaluate.precision", "train.precision", "finetune.precision")

# What each param is to a comparison. Evaluation: what the seed model's scores depend on (rows are
# only compared within one). Method: what a row is named by. Ignored: where or how fast a run
# computes, not what (and the few-shot params, which study/compare_fewshot.py reads). Every other
# param, present or added later, is part of the setting: runs differing in it are not pooled.
# A key ending in "." covers its whole section.
EVALUATION_KEYS = ("seed_model", "split.", "evaluate.metric", "evaluate.max_seq_length", "corpus.")
METHOD_KEYS = ("init.method", "idc.method", "idc.k", "idc.kmeans_clusters", "idc.first_round_model",
               "loop.max_iterations")
IGNORED_KEYS = ("seed", "device", "corpus.source", "corpus.manpages_root", "engine.", "embed.batch_size",
                "evaluate.batch_size", "idc.block_rows", "train.devices", "train.launcher", "report.", "finetune.",
                "plusplus.", "iterations.", *PRECISION_PARAMS)  # the iteration chain counts as its length, below
ALWAYS_SHOWN = ("budget.max_pairs_per_document", "budget.max_pairs")  # in every setting's name
# Params added after run files were made, with the value that does what the code before them did: an
# older run file reads as if it had set it, so it pools with newer runs that keep that default.
ADDED_PARAMS = {"loop.validate_on": "val"}  # 1e79a0f: before it the loop always validated on val


def covered(key: str, patterns: tuple[str, ...]) -> bool:
    return any(key == p or (p.endswith(".") and key.startswith(p)) for p in patterns)


def canonical(values: dict) -> str:
    return json.dumps(values, sort_keys=True)


def ran_precision(metrics: dict) -> str:
    """The precision a run's stages encoded and trained in, as their metrics record it: "fp32",
    "bf16", or e.g. "bf16+fp32" if its stages differed. Run files from before embed and evaluate
    recorded it have it from train.json alone (the stages resolve `auto` alike on one machine);
    one with no record at all is "unrecorded", never assumed. Fine-tuning and InfoCSE++ rounds
    record theirs beside the iterations' (older few-shot run files did not)."""
    found = {part for name, values in metrics.items()
             if name.startswith(("metrics/iterations/", "metrics/finetuned/")) and isinstance(values, dict)
             and values.get(PRECISION) for part in values[PRECISION].split("+")}
    return "+".join(sorted(found)) or "unrecorded"


def evaluation_of(params: dict, metrics: dict) -> dict:
    """What the seed model's scores depend on: the evaluation params, and the precision that ran."""
    flat = flatten(params)
    evaluation = {k: v for k, v in flat.items() if covered(k, EVALUATION_KEYS) and not covered(k, IGNORED_KEYS)}
    return {**evaluation, PRECISION: ran_precision(metrics)}


def setting_of(params: dict, extra: tuple[str, ...] = ()) -> dict:
    """The params that change what a method is trained on or with; `extra` adds ignored ones back."""
    setting = {k: v for k, v in flatten(params).items()
               if covered(k, extra) or not covered(k, EVALUATION_KEYS + METHOD_KEYS + IGNORED_KEYS)}
    setting["iterations"] = len(params.get("iterations") or {})
    return setting


# ---------------------------------------------------------------------------------------------- runs


def load_runs(folder: Path = RUNS_DIR) -> list[dict]:
    """Every run file, in name order."""
    runs = []
    for path in sorted(Path(folder).glob("*.json")):
        run = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(run, dict) or not {"params", "metrics"} <= set(run):
            raise SystemExit(f"{path} is not a run file (no params and metrics): write run files with "
                             "`python -m study.export_runs`")
        run.setdefault("name", path.stem)
        for key, value in ADDED_PARAMS.items():
            *sections, last = key.split(".")
            section = run["params"]
            for name in sections:
                section = section.setdefault(name, {})
            section.setdefault(last, value)
        runs.append(run)
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
    parts = [f"init {BASELINE_NAMES.get(init, init)}" if init != "none" else "init none"]
    if idc.get("method", "partition") == "kmeans":
        parts.append(f"IDC K-means ({idc.get('kmeans_clusters')} clusters)")
    else:
        parts.append(f"K={idc.get('k', 1)}")
    annotator = idc.get("first_round_model", "current")
    if annotator not in (None, "current"):
        parts.append(f"round 1 mined by {annotator}")
    limit = (params.get("loop") or {}).get("max_iterations", "all")
    if limit not in ("all", None):
        parts.append(f"at most {limit} iterations")
    return "InfoCSE (" + ", ".join(parts) + ")"


def rounds_summary(metrics: dict, up_to: int) -> dict:
    """Pairs, their mean token Jaccard, mean batch size and training seconds over the rounds that
    made the model (iterations 0..up_to that trained)."""
    pairs, trains = iteration_metrics(metrics, "pairs"), iteration_metrics(metrics, "train")
    rounds = [t for t in range(up_to + 1) if trains.get(t, {}).get("skipped") is False]
    counts = [pairs.get(t, {}).get("pairs", 0) for t in rounds]
    jaccard = [(c, pairs.get(t, {}).get("mean_token_jaccard")) for t, c in zip(rounds, counts)]
    weighted = [c for c, j in jaccard if j is not None]
    batches = sum(trains[t].get("steps", 0) for t in rounds)
    used = sum(trains[t].get("pairs_used", 0) for t in rounds)
    return {"pairs": sum(counts),
            "token_jaccard": sum(c * j for c, j in jaccard if j is not None) / sum(weighted) if sum(weighted) else None,
            "mean_batch": used / batches if batches else None,
            "train_seconds": sum(trains[t].get("seconds", 0.0) for t in rounds)}


def run_rows(run: dict) -> list[dict]:
    """The rows one run contributes: its iteration 0 and, if the loop ran, the model validation chose."""
    params, metrics = run["params"], run["metrics"]
    states = iteration_metrics(metrics, "retrieval")
    if 0 not in states:
        return []
    init = (params.get("init") or {}).get("method", "none")
    metric = (params.get("evaluate") or {}).get("metric", "mrr@10")
    base = {"corpus": (params.get("corpus") or {}).get("source", "bbc"), "seed": params.get("seed"),
            "run": run["name"], "commit": (run.get("commit") or "")[:7], "ran_at": run.get("ran_at") or "",
            "evaluation": canonical(evaluation_of(params, metrics)), "setting": canonical(setting_of(params)),
            "setting_params": setting_of(params), "val_metric": metric}
    rows = [{**base, "method": BASELINE_NAMES.get(init, init), "val": states[0].get("val", {}),
             "test": states[0].get("test", {}), "best_iteration": 0, **rounds_summary(metrics, 0)}]
    ran = [t for t, state in states.items() if t > 0 and not state.get("stopped") and state.get("val")]
    best = (metrics.get("metrics/best.json") or {}).get("iteration")
    if ran and best in states:
        rows.append({**base, "method": infocse_label(params), "val": states[best].get("val", {}),
                     "test": states[best].get("test", {}), "best_iteration": best, "iterations_run": len(ran),
                     **rounds_summary(metrics, best),
                     "curve": [(t, states[t]["val"].get(metric)) for t in sorted(states)
                               if not states[t].get("stopped") and states[t].get("val")]})
    return rows


KEY = ["corpus", "evaluation", "setting", "method", "seed"]  # one row per key: the newest run's


def collect(runs: list[dict]) -> tuple[list[dict], list[tuple[str, str]]]:
    """The rows of every run, one per KEY (the newest run's), in KEY order, each with the seed model and
    InfoCSE it is paired with (same seed): `seed_ref` is the seed model of the same run, else of the same
    setting, else of any run with the same corpus and evaluation; `infocse_ref` is InfoCSE of the same
    setting. Also the (dropped run, kept run) pairs."""
    every = [row for run in runs for row in run_rows(run)]
    if not every:
        return [], []
    frame = pd.DataFrame([{name: row[name] for name in [*KEY, "run", "ran_at"]} for row in every])  # the index: every
    frame = frame.sort_values(["ran_at", "run"], ascending=False, kind="stable")
    duplicate = frame.duplicated(KEY)
    frame, older = frame[~duplicate].sort_values(KEY, kind="stable"), frame[duplicate]
    dropped = older[[*KEY, "run"]].merge(frame[[*KEY, "run"]], on=KEY, suffixes=("", "_kept"))

    numbered = frame.reset_index(names="row")
    seed_models = numbered.merge(frame[frame["method"] == SEED_MODEL].reset_index(names="ref"),
                                 on=["corpus", "evaluation", "seed"], suffixes=("", "_ref"))
    seed_models = seed_models.assign(other_run=seed_models["run_ref"] != seed_models["run"],
                                     other_setting=seed_models["setting_ref"] != seed_models["setting"])
    seed_ref = (seed_models.sort_values(["other_run", "other_setting", "setting_ref", "run_ref"], kind="stable")
                .drop_duplicates("row").set_index("row")["ref"])
    infocse_ref = numbered.merge(frame[frame["method"] == REFERENCE].reset_index(names="ref"),
                                 on=["corpus", "evaluation", "setting", "seed"]).set_index("row")["ref"]
    for i in frame.index:
        every[i]["seed_ref"] = every[seed_ref[i]] if i in seed_ref.index else None
        every[i]["infocse_ref"] = every[infocse_ref[i]] if i in infocse_ref.index else None
    return [every[i] for i in frame.index], sorted(set(zip(dropped["run"], dropped["run_kept"])))


def delta(row: dict, reference: str, split: str, metric: str) -> float | None:
    other = row.get(reference)
    if other is None or other is row or metric not in row[split] or metric not in other[split]:
        return None
    return row[split][metric] - other[split][metric]


def deltas(group: list[dict], reference: str, split: str, metric: str) -> list[float]:
    return [d for d in (delta(row, reference, split, metric) for row in group) if d is not None]


# ------------------------------------------------------------------------------------------ labels


def value_key(value) -> tuple:
    return (0, value, "") if isinstance(value, (int, float)) and not isinstance(value, bool) else (1, 0, str(value))


def varying_keys(settings: list[dict], always: tuple[str, ...] = ()) -> list[str]:
    """Keys whose value differs between `settings` (and the `always` ones), in a stable order."""
    keys = sorted({k for s in settings for k in s})
    varying = [k for k in keys if len({canonical(s.get(k)) for s in settings}) > 1 and k not in always]
    return [k for k in always if any(k in s for s in settings)] + varying


def label(values: dict, keys: list[str]) -> str:
    return ", ".join(f"{k}={values.get(k, '–')}" for k in keys) or "default"


def method_order(method: str) -> tuple:
    return method != SEED_MODEL, method == REFERENCE, method.startswith("InfoCSE"), method


def mean_sd(values: list[float | None], digits: int = 3) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def mean_of(values: list[float | None], digits: int) -> str:
    """The mean alone, for counts and seconds."""
    values = [v for v in values if v is not None]
    return f"{statistics.mean(values):.{digits}f}" if values else "–"


def fmt(value, digits: int = 3, sign: bool = False) -> str:
    if value is None:
        return "–"
    return f"{value:+.{digits}f}" if sign else f"{value:.{digits}f}"


def interval_cells(values: list[float]) -> list[str]:
    """[mean difference with its 95% t-interval and n, verdict]; dashes when there is nothing to pair."""
    if not values:
        return ["–", "–"]
    interval = t_interval(values)
    return [format_interval(interval), verdict(interval)]


# ------------------------------------------------------------------------------------------ tables


def means_table(group: list[dict], metric: str) -> str:
    records = []
    for method in sorted({r["method"] for r in group}, key=method_order):
        mine = sorted((r for r in group if r["method"] == method), key=lambda r: r["seed"])
        records.append({
            "method": method, "n (seeds)": f"{len(mine)} ({', '.join(str(r['seed']) for r in mine)})",
            f"val {metric}": mean_sd([r["val"].get(metric) for r in mine]),
            **{f"test {m}": mean_sd([r["test"].get(m) for r in mine]) for m in TEST_METRICS},
            "pairs": mean_of([r["pairs"] for r in mine], 0), "mean batch": mean_of([r["mean_batch"] for r in mine], 1),
            "token Jaccard": mean_sd([r["token_jaccard"] for r in mine]),
            "train s": mean_of([r["train_seconds"] for r in mine], 0)})
    return markdown_table(pd.DataFrame(records))


def differences_table(group: list[dict]) -> str:
    columns, records = ["method"], []
    for name in ("seed model", "InfoCSE"):
        for metric in DELTA_METRICS:
            columns += [f"Δ test {metric} vs {name}", "verdict"]
    for method in sorted({r["method"] for r in group} - {SEED_MODEL}, key=method_order):
        mine = [r for r in group if r["method"] == method]
        records.append([method, *(cell for reference in ("seed_ref", "infocse_ref") for metric in DELTA_METRICS
                                   for cell in interval_cells(deltas(mine, reference, "test", metric)))])
    return markdown_table(pd.DataFrame(records, columns=columns))


def per_run_table(group: list[dict], metric: str) -> str:
    records = []
    for row in sorted(group, key=lambda r: (method_order(r["method"]), r["seed"])):
        seed_ref = row["seed_ref"]
        records.append({
            "method": row["method"], "seed": str(row["seed"]), "run": row["run"], "commit": row["commit"] or "–",
            "best iteration": str(row["best_iteration"]), f"val {metric}": fmt(row["val"].get(metric)),
            "test recall@1": fmt(row["test"].get("recall@1")), "test mrr@10": fmt(row["test"].get("mrr@10")),
            "Δ recall@1 vs seed model": fmt(delta(row, "seed_ref", "test", "recall@1"), sign=True),
            "Δ mrr@10 vs seed model": fmt(delta(row, "seed_ref", "test", "mrr@10"), sign=True),
            "seed model from": "–" if seed_ref is None or seed_ref is row else
            ("this run" if seed_ref["run"] == row["run"] else seed_ref["run"]),
            "pairs": str(row["pairs"]), "mean batch": fmt(row["mean_batch"], 1),
            "train s": fmt(row["train_seconds"], 0)})
    return markdown_table(pd.DataFrame(records))


def sweep_table(rows: list[dict], keys: list[str], metric: str) -> str:
    """One row per (setting, method): n and the paired 95% intervals, to choose a setting by val."""
    columns = ["setting", "method", "n", f"val {metric}", f"Δ val {metric} vs seed model",
               "Δ test recall@1 vs seed model", "verdict", "Δ test recall@1 vs InfoCSE", "verdict", "pairs", "mean batch"]
    records = []
    for setting in sorted({r["setting"] for r in rows}, key=lambda s: setting_order(s, keys)):
        group = [r for r in rows if r["setting"] == setting and r["method"] != SEED_MODEL]
        for method in sorted({r["method"] for r in group}, key=method_order):
            mine = [r for r in group if r["method"] == method]
            val = deltas(mine, "seed_ref", "val", metric)
            records.append([label(json.loads(setting), keys), method, str(len(mine)),
                            mean_sd([r["val"].get(metric) for r in mine]),
                            format_interval(t_interval(val)) if val else "–",
                            *interval_cells(deltas(mine, "seed_ref", "test", "recall@1")),
                            *interval_cells(deltas(mine, "infocse_ref", "test", "recall@1")),
                            mean_of([r["pairs"] for r in mine], 0), mean_of([r["mean_batch"] for r in mine], 1)])
    if not records:
        return "No trained model in these runs."
    return markdown_table(pd.DataFrame(records, columns=columns))


def choice_seeds(seeds_of: dict[str, set]) -> set:
    """The most seeds that at least two settings share (the smallest seeds first on a tie): the
    choice is paired over them, so a setting that has run more seeds cannot tip it, and a setting
    still short of them waits outside the choice instead of shrinking it."""
    shared = [a & b for a, b in itertools.combinations(seeds_of.values(), 2)]
    return max(shared, key=lambda seeds: (len(seeds), [-seed for seed in sorted(seeds)]))


def chosen_setting(rows: list[dict], keys: list[str], metric: str) -> list[str]:
    """The InfoCSE setting with the best mean validation metric over the seeds the settings in the
    choice share (paired, so no setting is favoured by an easier split), and at it InfoCSE vs the
    seed model and neighbour pairs vs InfoCSE on test. Settings run at fewer seeds are listed beside it with
    their paired lead. Test numbers are reported, never used to choose. Means get four decimals so
    that a close choice shows how close it was."""
    infocse = [r for r in rows if r["method"] == REFERENCE]
    settings = sorted({r["setting"] for r in infocse}, key=lambda s: setting_order(s, keys))
    if len(settings) < 2:
        return []
    seeds_of = {s: {r["seed"] for r in infocse if r["setting"] == s} for s in settings}
    seeds = sorted(choice_seeds(seeds_of))
    if not seeds:
        return ["Setting chosen by validation: none yet (no seed has an InfoCSE run at two settings)."]
    in_choice = [s for s in settings if seeds_of[s] >= set(seeds)]
    waiting = [s for s in settings if s not in in_choice]
    val_of = {(r["setting"], r["seed"]): r["val"][metric] for r in infocse}
    mean_val = {s: statistics.mean(val_of[s, seed] for seed in seeds) for s in in_choice}
    best = max(in_choice, key=lambda s: mean_val[s])  # the first in setting order on a tie
    named = lambda s: label(json.loads(s), keys)  # noqa: E731

    def lead(s: str, over: list) -> str:  # the chosen setting's paired val lead over s, and whether it excludes 0
        interval = t_interval([val_of[best, seed] - val_of[s, seed] for seed in over])
        return f"lead {format_interval(interval, 4)}, {verdict(interval)}"

    others = "; ".join(f"{named(s)}: {mean_val[s]:.4f}, {lead(s, seeds)}" for s in in_choice if s != best)
    lines = [f"Setting chosen by validation: **{named(best)}**, InfoCSE's mean val {metric} "
             f"{mean_val[best]:.4f} over seeds {', '.join(map(str, seeds))} (the seeds every setting in the choice "
             f"has run, n = {len(seeds)}; others, with the chosen setting's paired val lead and its 95% t-interval: "
             f"{others})."]
    if len(seeds) < 2:
        lines[0] += " With one seed this is provisional, not yet a basis for a default."
    at_best = [r for r in rows if r["setting"] == best]
    mine = [r for r in at_best if r["method"] == REFERENCE]
    lines.append(f"At it, on test (95% t-interval over seeds): InfoCSE minus the seed model, recall@1 "
                 f"{format_interval(t_interval(deltas(mine, 'seed_ref', 'test', 'recall@1')))}, mrr@10 "
                 f"{format_interval(t_interval(deltas(mine, 'seed_ref', 'test', 'mrr@10')))}")
    neighbour_rows = [r for r in at_best if r["method"] == NEIGHBOURS]
    neighbours = deltas(neighbour_rows, "infocse_ref", "test", "recall@1")
    lines[-1] += (f"; {NEIGHBOURS} minus InfoCSE, recall@1 {format_interval(t_interval(neighbours))}." if neighbours
                  else f"; no {NEIGHBOURS} run at this setting.")
    if waiting:
        def paired(s: str) -> str:
            shared = sorted(seeds_of[s] & seeds_of[best])
            if not shared:
                return f"{named(s)}: no seed shared with the chosen setting"
            mean = lambda setting: statistics.mean(val_of[setting, seed] for seed in shared)  # noqa: E731
            return (f"{named(s)}: seeds {', '.join(map(str, shared))}, {mean(s):.4f} against the chosen setting's "
                    f"{mean(best):.4f} there, {lead(s, shared)}")
        lines.append("Not yet in the choice, run at fewer seeds (the chosen setting's paired val lead over "
                     f"the seeds both have run): {'; '.join(paired(s) for s in waiting)}.")
    return [" ".join(lines), ""]


def setting_order(setting: str, keys: list[str]) -> list:
    values = json.loads(setting)
    return [value_key(values.get(k)) for k in keys] + [(1, 0, setting)]


# ------------------------------------------------------------------------------------------ report

def corpus_sections(rows: list[dict]) -> list[dict]:
    """Per corpus and evaluation: its title, seeds, budget sweep and choice, and per setting its tables."""
    sections = []
    for corpus in sorted({r["corpus"] for r in rows}):
        mine = [r for r in rows if r["corpus"] == corpus]
        evaluations = sorted({r["evaluation"] for r in mine})
        eval_keys = varying_keys([json.loads(e) for e in evaluations])
        for evaluation in evaluations:
            group_rows = [r for r in mine if r["evaluation"] == evaluation]
            metric = group_rows[0]["val_metric"]
            title = f"## Corpus: {corpus}"
            if len(evaluations) > 1:
                title += f" ({label(json.loads(evaluation), eval_keys)})"
            keys = varying_keys([r["setting_params"] for r in group_rows], ALWAYS_SHOWN)
            settings = sorted({r["setting"] for r in group_rows}, key=lambda s: setting_order(s, keys))
            seeds = sorted({r["seed"] for r in group_rows if r["method"] == SEED_MODEL})
            chosen = chosen_setting(group_rows, keys, metric)
            sections.append({
                "title": title, "name": corpus, "metric": metric, "sweep": sweep_table(group_rows, keys, metric),
                "seeds": f"{len(seeds)} (seeds {', '.join(map(str, seeds)) or '–'})",
                "chosen": chosen[0] if chosen else "",
                "settings": [{"label": label(json.loads(setting), keys),
                              "means": means_table([r for r in group_rows if r["setting"] == setting], metric),
                              "differences": differences_table([r for r in group_rows if r["setting"] == setting]),
                              "per_run": per_run_table([r for r in group_rows if r["setting"] == setting], metric)}
                             for setting in settings]})
    return sections


def render(runs: list[dict]) -> str:
    if not runs:
        return render_template("comparison.md", runs_dir=RUNS_DIR, run_files=0)
    rows, dropped = collect(runs)
    return render_template(
        "comparison.md", runs_dir=RUNS_DIR, run_files=len(runs), rows=len(rows), reference=REFERENCE,
        commits=", ".join(sorted({r["commit"] for r in rows if r["commit"]})) or "–",
        dropped="; ".join(f"{old} (kept {new})" for old, new in dropped), corpora=corpus_sections(rows))


def plot_convergence(runs: list[dict], path: Path = PLOT) -> None:
    """Validation metric per iteration, mean over runs: one panel per corpus, one line per
    (setting, InfoCSE variant)."""
    rows = collect(runs)[0] if runs else []
    curves = [r for r in rows if r.get("curve")]
    corpora = sorted({r["corpus"] for r in curves})
    lines_of = {corpus: len({(r["evaluation"], r["setting"], r["method"]) for r in curves if r["corpus"] == corpus})
                for corpus in corpora}
    # one panel per corpus, stacked, each with its legend below it: the labels are long, the curves many
    heights = [3.4 + 0.13 * lines_of.get(corpus, 0) for corpus in corpora] or [3.0]
    figure = Figure(figsize=(11, sum(heights)))
    axes = figure.subplots(max(1, len(corpora)), 1, squeeze=False, gridspec_kw={"height_ratios": heights})[:, 0]
    if not corpora:
        axes[0].text(0.5, 0.5, "no runs with InfoCSE iterations yet", ha="center", va="center")
        axes[0].set_axis_off()
    for axis, corpus in zip(axes, corpora):
        mine = [r for r in curves if r["corpus"] == corpus]
        keys = varying_keys([r["setting_params"] for r in mine], ALWAYS_SHOWN)
        evaluation_keys = varying_keys([json.loads(r["evaluation"]) for r in mine])  # e.g. a mix, a precision
        widest = 0
        for evaluation, setting, method in sorted({(r["evaluation"], r["setting"], r["method"]) for r in mine}):
            lines = [dict(r["curve"]) for r in mine if (r["evaluation"], r["setting"], r["method"]) ==
                     (evaluation, setting, method)]
            steps = sorted({t for curve in lines for t in curve})
            means = [statistics.mean(c[t] for c in lines if c.get(t) is not None) for t in steps]
            parts = [label(json.loads(evaluation), evaluation_keys)] if evaluation_keys else []
            name = ", ".join([*parts, label(json.loads(setting), keys).replace("budget.", "")])
            axis.plot(steps, means, marker="o", label=f"{method}, {name} (n={len(lines)})")
            widest = max(widest, len(f"{method}, {name} (n={len(lines)})"))
        figure.set_figwidth(max(figure.get_figwidth(), 0.05 * widest + 1.5))  # the legend's longest label fits
        axis.set_title(f"{corpus}: validation {mine[0]['val_metric']} per iteration (mean over runs)", fontsize=9)
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.set_xlabel("iteration (0 = f_0)")
        axis.set_ylabel(f"val {mine[0]['val_metric']}")
        axis.legend(fontsize=6, loc="upper left", bbox_to_anchor=(0.0, -0.32), frameon=False)
    save_figure(figure, path)


def main() -> None:
    runs = load_runs()
    write_text(REPORT, render(runs))
    plot_convergence(runs, PLOT)
    print(f"wrote {REPORT} and {PLOT} from {len(runs)} run file(s) in {RUNS_DIR}/")


if __name__ == "__main__":
    main()

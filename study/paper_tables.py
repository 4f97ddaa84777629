"""The paper's Tables 1-3 and its claims with a verdict each, study/reports/paper_tables.md and
study/reports/paper_tables.png, from committed run files.

    python -m study.make_reports           # every cross-run report, this one included
    python -m study.paper_tables           # this report alone

It reads only `study/runs/*.json`, through the readers of the comparison and few-shot reports
(study/compare_experiments.py, study/compare_fewshot.py), so it groups, dedupes and pairs runs
as they do: runs are pooled only within one corpus, evaluation protocol and setting (every training
param), so runs of older code, whose params differ, never mix with newer ones.

The paper's tables hold the pair budget and the loop fixed (TABLE_DEFAULTS, the CPU defaults of
params.yaml). Per corpus (and per mix of topics) a table uses one group of runs at those defaults:
the newest of the seed model's published weights, unless the newest of its fp16-rounded weights (GPU
runs) covers more of the tables; the other groups are listed, never pooled. A study varies its own
params from that group: the convergence runs their iterations and patience, the InfoCSE++ control
its fine-tuning epochs. Every cell shows its n; a cell without runs says "not run".

Each claim of the paper is one or more comparisons on test Recall@1, paired by seed with a t-based
95% interval; `claim_verdict` turns each interval into holds / not shown / contradicted (or not run)
and `combined_verdict` joins them. Nothing here reads test numbers to choose anything: the best
baseline of the few-shot table is chosen on fine-tuned validation (study/compare_fewshot.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from infocse.io import write_text
from infocse.methods import METHODS
from infocse.reporting import format_interval, markdown_table, save_figure, t_interval
from study import compare_experiments as zero_shot
from study import compare_fewshot as few_shot
from study.compare_experiments import (BASELINE_NAMES, NEIGHBOURS, REFERENCE, RUNS_DIR, SEED_MODEL,
                                         TEXT_SHUFFLE_CUTOFF, canonical, infocse_label, iteration_metrics,
                                         load_runs, mean_sd)
from study.plan import GPU_SEED_MODEL
from study.template import render_template

REPORT = Path("study/reports/paper_tables.md")
PLOT = Path("study/reports/paper_tables.png")

# params.yaml's CPU defaults of what the tables hold fixed (dotted as in compare_experiments.setting_of;
# "iterations" is the length of the iteration chain). A key a group's params lack does not exclude it.
# The precision that ran (compare_experiments.ran_precision) is not a params.yaml value: fp32, that of every
# run behind the tables so far; CPU runs in bf16 (`auto` with bf16 units) are set beside their fp32 twins
# in study/reports/precision.md, and GPU runs (`auto`: "bf16+fp16") are in study/reports/comparison.md alone.
TABLE_DEFAULTS = {"seed_model": "all-MiniLM-L6-v2", "budget.max_pairs": 2560, "budget.max_pairs_per_document": 20,
                  "iterations": 2, "loop.patience": 1, "finetune.epochs": 3, "precision": "fp32"}
# The seed model's published weights, and the same rounded to fp16 (and upcast to fp32), which GPU runs start
# from (study/gpu_runs.py: the published weights do not fit its bundle). Runs of the two are never pooled;
# a corpus's tables use one group, preferring the published weights unless the other covers more.
SEED_MODEL_WEIGHTS = (TABLE_DEFAULTS["seed_model"], GPU_SEED_MODEL)
CONVERGENCE_KEYS = ("iterations", "loop.patience")
CONTROL_KEYS = ("finetune.epochs",)
LARGER_MODEL = "all-mpnet-base-v2"  # the model a user would pick instead: 5x larger, used as it is
CORPORA = ("manpages", "bbc")  # always in the tables, "not run" where they have no runs
CORPUS_NAMES = {"manpages": "man pages", "bbc": "BBC News"}

SAME_SENTENCE = tuple(m.display for m in METHODS.values() if m.pairs == "same sentence")  # two views of one sentence
DIFFERENT_SENTENCE = tuple(m.display for m in METHODS.values() if m.pairs == "different sentences")  # of one document
BASELINES = (*SAME_SENTENCE, *DIFFERENT_SENTENCE)
# (the initialization alone: one round of that baseline, InfoCSE started from it)
INITIALIZATIONS = tuple((BASELINE_NAMES[method], infocse_label({"init": {"method": method}}))
                        for method in ("neighbours", "simcse", "ict"))
KMEANS = infocse_label({"idc": {"method": "kmeans", "kmeans_clusters": 10}})
K_VARIANTS = tuple(infocse_label({"idc": {"k": k}}) for k in (1, 2, 3))
SBERT_ROUND1 = infocse_label({"idc": {"first_round_model": LARGER_MODEL}})
PLANNED_BUDGETS = ("100", "300", "all")  # the few-shot label budgets of the plan, shown even before they run
PLANNED_ROUNDS = 3  # InfoCSE++ rounds
PLANNED_ITERATIONS = 3  # InfoCSE iterations of the convergence study
PLANNED_MIXES = (("manpages", 3, "interleaved"), ("manpages", 3, "concatenated"), ("bbc", 3, "interleaved"))
MIXED_METHODS = ("SimCSE", NEIGHBOURS, REFERENCE)  # SimCSE: its pairs are right however documents mix
PRECISIONS = {"pair_source_precision": "from one source", "pair_category_precision": "from one category"}

CLAIM_METRIC = "recall@1"
TABLE1_METRICS = ("recall@1", "recall@5", "mrr@10")
METRIC_NAMES = {"recall@1": "R@1", "recall@5": "R@5", "mrr@10": "MRR@10"}
NOT_RUN = "not run"
HOLDS, NOT_SHOWN, CONTRADICTED = "holds", "not shown", "contradicted"
BEATS, CLOSE = "beats", "close"  # the two kinds of claim: A - B > 0, and |A - B| below CLOSE_MARGIN
CLOSE_MARGIN = 0.02  # test R@1; the difference below which two methods count as the same
PRESET_SEEDS = (0, 1, 2)  # the seeds every comparison was planned at, before any run was looked at


# ------------------------------------------------------------------------------------------ verdicts


def claim_verdict(interval: dict, kind: str = BEATS) -> str:
    """What one comparison (first minus second) says about its claim, from its 95% interval alone:
    BEATS holds above 0 and is contradicted below 0; CLOSE holds inside (-CLOSE_MARGIN, +CLOSE_MARGIN)
    and is contradicted wholly outside it. No run: not run; one run has no interval: not shown."""
    if interval["n"] == 0:
        return NOT_RUN
    low, high = interval["low"], interval["high"]
    if low is None:
        return NOT_SHOWN
    if kind == BEATS:
        return HOLDS if low > 0 else CONTRADICTED if high < 0 else NOT_SHOWN
    if -CLOSE_MARGIN < low and high < CLOSE_MARGIN:
        return HOLDS
    return CONTRADICTED if low >= CLOSE_MARGIN or high <= -CLOSE_MARGIN else NOT_SHOWN


def combined_verdict(verdicts: list[str]) -> str:
    """A claim made of several comparisons holds only if every one holds; one contradiction
    contradicts it; with none run it is not run; anything else is not shown."""
    if all(verdict == NOT_RUN for verdict in verdicts):
        return NOT_RUN
    if CONTRADICTED in verdicts:
        return CONTRADICTED
    return HOLDS if all(verdict == HOLDS for verdict in verdicts) else NOT_SHOWN


def at_preset_seeds(interval: dict) -> dict:
    """The interval over the pre-set seeds alone, from the per-seed differences it was made of."""
    if "by_seed" not in interval:  # not made by seed (an empty placeholder)
        return interval
    differences = interval["by_seed"]
    return t_interval([differences[seed] for seed in sorted(differences) if seed in PRESET_SEEDS])


# ------------------------------------------------------------------------------------------ pairing


def by_seed(items: list[dict], metric: str = CLAIM_METRIC) -> dict:
    """{seed: test metric}; within one group a seed has one item (the readers dedupe)."""
    return {item["seed"]: item["test"][metric] for item in items if metric in item.get("test", {})}


def minus(first: dict, second: dict) -> dict:
    """Per-seed differences over the seeds both have: the same label split and test queries."""
    return {seed: first[seed] - second[seed] for seed in sorted(first.keys() & second.keys())}


def interval_of(differences: dict) -> dict:
    """The 95% t-interval over every seed, keeping the per-seed differences (`at_preset_seeds`)."""
    return {**t_interval([differences[seed] for seed in sorted(differences)]), "by_seed": differences}


def paired(first: list[dict], second: list[dict], metric: str = CLAIM_METRIC) -> dict:
    """First minus second on test `metric`, paired by seed, with its 95% t-interval and n."""
    return interval_of(minus(by_seed(first, metric), by_seed(second, metric)))


def gap_change(first_in_a, second_in_a, first_in_b, second_in_b) -> dict:
    """How much larger first minus second is in setting a (the small budget, the mixed corpus) than in
    setting b (the large budget, the unmixed corpus), per seed."""
    return interval_of(minus(minus(by_seed(first_in_a), by_seed(second_in_a)),
                             minus(by_seed(first_in_b), by_seed(second_in_b))))


def vs_seed_model(mine: list[dict], metric: str = CLAIM_METRIC) -> dict:
    """A zero-shot row minus the seed model it was paired with (compare_experiments.collect), by seed: a claim
    on it is decided at the pre-set seeds, as any other."""
    differences = {row["seed"]: zero_shot.delta(row, "seed_ref", "test", metric) for row in mine}
    return interval_of({seed: value for seed, value in differences.items() if value is not None})


# ------------------------------------------------------------------------------------------ groups


def grouped(items: list[dict]) -> dict[tuple, list[dict]]:
    """{(corpus, evaluation, setting): items}: the readers' rows or cells, by what may be pooled."""
    groups = {}
    for item in items:
        groups.setdefault((item["corpus"], item["evaluation"], item["setting"]), []).append(item)
    return groups


def group_params(key: tuple, items: list[dict]) -> dict:
    return {**json.loads(key[1]), **items[0]["setting_params"]}


def seed_model_of(key: tuple) -> str:
    return json.loads(key[1]).get("seed_model", TABLE_DEFAULTS["seed_model"])


def at_defaults(params: dict) -> bool:
    return (params.get("seed_model", TABLE_DEFAULTS["seed_model"]) in SEED_MODEL_WEIGHTS
            and all(params.get(name, value) == value for name, value in TABLE_DEFAULTS.items() if name != "seed_model"))


def variant_of(key: tuple) -> tuple:
    """(corpus, mixed sources, order): a mixed-topic corpus is its own column of the tables."""
    evaluation = json.loads(key[1])
    sources = evaluation.get("corpus.mix.sources") or 1
    return key[0], sources, evaluation.get("corpus.mix.order") if sources > 1 else None


def variant_name(variant: tuple) -> str:
    corpus, sources, order = variant
    name = CORPUS_NAMES.get(corpus, corpus)
    return name if sources == 1 else f"{name}, mixed: {sources} sources, {order}"


def coverage(items: list[dict]) -> int:
    """Cells of the tables a group holds at seeds 0-2: (method or few-shot start, label budget, seed)."""
    return len({(item.get("method", item.get("start")), item.get("budget"), item["seed"])
                for item in items if item.get("seed") in (0, 1, 2)})


def newest_groups(groups: dict[tuple, list[dict]], eligible) -> tuple[dict, dict]:
    """Per corpus variant, the group the tables use, of the eligible groups at TABLE_DEFAULTS: the newest
    (by its latest run) of the seed model's published weights, unless the newest of its fp16-rounded
    weights (GPU runs) covers more of the tables; and, per variant, the others, left out rather than pooled."""
    candidates = {}
    for key, items in groups.items():
        if eligible(items) and at_defaults(group_params(key, items)):
            candidates.setdefault(variant_of(key), []).append(key)
    newest = lambda key: (max(item["ran_at"] for item in groups[key]), key)  # noqa: E731
    chosen = {}
    for variant, keys in candidates.items():
        by_weights = {}
        for key in keys:
            by_weights.setdefault(seed_model_of(key), []).append(key)
        published, rounded = (max(by_weights.get(w, []), key=newest, default=None) for w in SEED_MODEL_WEIGHTS)
        use_rounded = rounded and (published is None or
                                   coverage(groups[rounded]) > coverage(groups[published]))
        chosen[variant] = rounded if use_rounded else published
    older = {variant: sorted(set(keys) - {chosen[variant]}, key=newest, reverse=True)
             for variant, keys in candidates.items()}
    return chosen, older


def study_variants(groups: dict[tuple, list[dict]], key: tuple, keys: tuple[str, ...]) -> list[tuple]:
    """Groups of the same corpus and evaluation whose setting differs from `key`'s only in `keys`."""
    def rest(params: dict) -> dict:
        return {name: value for name, value in params.items() if name not in keys}

    base = rest(groups[key][0]["setting_params"])
    return sorted(other for other, items in groups.items()
                  if other[:2] == key[:2] and rest(items[0]["setting_params"]) == base)


def shown_variants(chosen: dict, mixed: bool) -> list[tuple]:
    """The paper's corpora first (present or not), then other corpora and, if `mixed`, the mixes run."""
    planned = [(corpus, 1, None) for corpus in CORPORA]
    found = sorted(v for v in chosen if v not in planned and (mixed or v[1] == 1))
    return planned + found


def of(items: list[dict], method: str, field: str = "method") -> list[dict]:
    return [item for item in items if item[field] == method]


# ------------------------------------------------------------------------------------------ cells


def seeds_cell(items: list[dict]) -> str:
    seeds = sorted(item["seed"] for item in items)
    return f"{len(seeds)} ({', '.join(map(str, seeds))})" if seeds else NOT_RUN


def interval_cell(interval: dict) -> str:
    """`mean [low, high] (n = k)`; "–" when the reference has no run at these seeds."""
    return format_interval(interval) if interval["n"] else "–"


def scores_cell(items: list[dict]) -> str:
    """Few-shot: test R@1 / MRR@10, mean ± sd (n)."""
    return few_shot.cell_text(items) if items else NOT_RUN


def score_record(corpus: str, label: str, mine: list[dict], metrics: tuple[str, ...], intervals: list[str]) -> list:
    if not mine:
        return [corpus, label, NOT_RUN, *[NOT_RUN] * (len(metrics) + len(intervals))]
    return [corpus, label, seeds_cell(mine), *(mean_sd([r["test"].get(m) for r in mine]) for m in metrics), *intervals]


# ------------------------------------------------------------------------------------------ tables


def table1(rows: list[dict], zero_groups: dict, chosen: dict) -> str:
    """Zero-shot: the seed model, the baselines, InfoCSE and the larger model, per corpus variant."""
    columns = ["corpus", "model", "n (seeds)", *(f"test {METRIC_NAMES[m]}" for m in TABLE1_METRICS),
               *(f"Δ {METRIC_NAMES[m]} vs seed model" for m in TABLE1_METRICS)]
    records = []
    for variant in shown_variants(chosen, mixed=True):
        key = chosen.get(variant)
        group = zero_groups[key] if key else []
        name = variant_name(variant)
        records.append(score_record(name, SEED_MODEL, of(group, SEED_MODEL), TABLE1_METRICS, ["–"] * 3))
        for method in (*BASELINES, REFERENCE):
            mine = of(group, method)
            records.append(score_record(name, method, mine, TABLE1_METRICS,
                                        [interval_cell(vs_seed_model(mine, m)) for m in TABLE1_METRICS]))
        if variant[1] == 1:
            larger = larger_model_rows(rows, key) if key else []
            records.append(score_record(name, f"{LARGER_MODEL} (no training)", larger, TABLE1_METRICS,
                                        [interval_cell(paired(larger, of(group, SEED_MODEL), m))
                                         for m in TABLE1_METRICS]))
    return markdown_table(pd.DataFrame(records, columns=columns))


def round_precisions(row: dict, runs_by_name: dict, field: str) -> list[float]:
    """The share of right pairs (`field` of pairs.json) in each pair table that trained the row's model,
    round 1 first: a baseline's one table (iteration 0); every table InfoCSE mined, the rounds after the
    chosen one included (a better model mining better pairs is the question); none for the seed model."""
    if row["method"] == SEED_MODEL:
        return []
    pairs = iteration_metrics(runs_by_name[row["run"]]["metrics"], "pairs")
    mined = [t for t in sorted(pairs) if row["method"].startswith("InfoCSE") or t == 0]
    return [pairs[t][field] for t in mined if pairs[t].get(field) is not None]


def mixed_table(zero_groups: dict, chosen: dict, unmixed_of: dict, runs_by_name: dict) -> str:
    """Documents that mix topics: each method against the seed model, against InfoCSE and against
    itself on the unmixed corpus (same seeds, so the same label split and test queries), and the share
    of its pairs whose sentences come from one source (one category), round by round."""
    variants = [v for v in chosen if v[1] > 1]
    variants = [*PLANNED_MIXES, *sorted(v for v in variants if v not in PLANNED_MIXES)]
    groups = {variant: zero_groups[chosen[variant]] if variant in chosen else [] for variant in variants}
    unmixed = {variant: unmixed_of.get(variant, []) for variant in variants}
    precisions = {(variant, row["run"], row["method"], field): round_precisions(row, runs_by_name, field)
                  for variant, group in groups.items() for row in group for field in PRECISIONS}
    rounds = max([TABLE_DEFAULTS["iterations"], *map(len, precisions.values())])
    columns = ["corpus", "model", "n (seeds)", "test R@1", "test MRR@10", "Δ R@1 vs seed model",
               "Δ MRR@10 vs seed model", "Δ R@1: InfoCSE − this", "Δ R@1 vs itself unmixed",
               *(f"pairs {what}, round {r}" for what in PRECISIONS.values() for r in range(1, rounds + 1))]
    records = []
    for variant, group in groups.items():
        for method in (SEED_MODEL, *MIXED_METHODS):
            mine = of(group, method)
            if not mine:
                records.append([variant_name(variant), method, *[NOT_RUN] * (len(columns) - 2)])
                continue
            shares = [[precisions[variant, row["run"], method, field] for row in mine] for field in PRECISIONS]
            records.append([
                variant_name(variant), method, seeds_cell(mine),
                *(mean_sd([row["test"].get(m) for row in mine]) for m in ("recall@1", "mrr@10")),
                *(["–", "–"] if method == SEED_MODEL else
                  [interval_cell(vs_seed_model(mine, m)) for m in ("recall@1", "mrr@10")]),
                "–" if method == REFERENCE else interval_cell(paired(of(group, REFERENCE), mine)),
                interval_cell(paired(mine, of(unmixed[variant], method))),
                *(mean_sd([share[r] for share in field_shares if len(share) > r])
                  for field_shares in shares for r in range(rounds))])
    return markdown_table(pd.DataFrame(records, columns=columns))


def unmixed_counterpart(zero_groups: dict, key: tuple) -> list[dict]:
    """The rows of the unmixed corpus that a mixed group is paired with: the same evaluation but the mix
    (so the same seed model, splits and test queries), at the same setting; none if not run."""
    evaluation = {**json.loads(key[1]), "corpus.mix.sources": 1, "corpus.mix.order": "interleaved"}
    return zero_groups.get((key[0], canonical(evaluation), key[2]), [])


def larger_model_rows(rows: list[dict], key: tuple) -> list[dict]:
    """The larger model scored as it is: seed-model rows of runs whose evaluation differs from the
    table's only in the seed model, at the same setting (same splits, same test queries)."""
    evaluation = canonical({**json.loads(key[1]), "seed_model": LARGER_MODEL})
    return [r for r in rows if (r["corpus"], r["evaluation"], r["setting"]) == (key[0], evaluation, key[2])
            and r["method"] == SEED_MODEL]


def from_larger_model(zero_groups: dict, key: tuple | None) -> list[dict]:
    """Runs from the larger model as the seed model (InfoCSE, one round of neighbour pairs, the model as it
    is): the group whose evaluation differs from the table's only in the seed model, at the same setting."""
    if key is None:
        return []
    return zero_groups.get((key[0], canonical({**json.loads(key[1]), "seed_model": LARGER_MODEL}), key[2]), [])


def fewshot_budgets(fewshot_groups: dict, chosen: dict) -> list[str]:
    found = {c["budget"] for key in chosen.values() for c in fewshot_groups[key]}
    return sorted(found | set(PLANNED_BUDGETS), key=few_shot.budget_order)


def table2(fewshot_groups: dict, chosen: dict, budgets: list[str]) -> str:
    """Few-shot: test R@1 / MRR@10 after fine-tuning, per start, label budget and corpus."""
    records = []
    for variant in shown_variants(chosen, mixed=False):
        group = fewshot_groups[chosen[variant]] if variant in chosen else []
        baseline = few_shot.best_baseline(group)
        for start, label in ((SEED_MODEL, SEED_MODEL),
                             (baseline, f"best baseline by fine-tuned val: {baseline or NOT_RUN}"),
                             ("InfoCSE", "InfoCSE"), ("InfoCSE++", "InfoCSE++ (round chosen by fine-tuned val)")):
            mine = of(group, start, "start") if start else []
            records.append([variant_name(variant), label,
                            *(scores_cell(of(mine, budget, "budget")) for budget in budgets)])
    return markdown_table(pd.DataFrame(records, columns=["corpus", "start", *(f"{b} labels" for b in budgets)]))


def plusplus_round(cells: list[dict], number: int) -> list[dict]:
    """Each InfoCSE++ run's fine-tuned scores after round `number`, where that round ran."""
    return [{"seed": c["seed"], "budget": c["budget"], "test": point["test"]}
            for c in cells for point in c.get("curve", []) if point["round"] == number]


def rounds_of(cells: list[dict]) -> list[int]:
    """InfoCSE++ rounds after the first: those of the plan, or more where runs went further."""
    ran = {point["round"] for c in cells for point in c.get("curve", [])}
    return list(range(2, max(ran | {PLANNED_ROUNDS}) + 1))


def control_cells(fewshot_groups: dict, key: tuple | None, epochs: int) -> list[dict]:
    """InfoCSE fine-tuned once for `epochs` epochs: the group that differs only in the epochs."""
    if key is None:
        return []
    return [c for other in study_variants(fewshot_groups, key, CONTROL_KEYS)
            if fewshot_groups[other][0]["setting_params"].get("finetune.epochs") == epochs
            for c in of(fewshot_groups[other], "InfoCSE", "start")]


def epochs_of(cells: list[dict]) -> int:
    """The fine-tuning epochs of a few-shot group (one fine-tuning, one round of InfoCSE++)."""
    return cells[0]["setting_params"]["finetune.epochs"] if cells else TABLE_DEFAULTS["finetune.epochs"]


def table3_plusplus(fewshot_groups: dict, chosen: dict, budgets: list[str]) -> str:
    """InfoCSE++ round by round beside its control: InfoCSE fine-tuned as many epochs in one go."""
    records = []
    for variant in shown_variants(chosen, mixed=False):
        key = chosen.get(variant)
        group = fewshot_groups[key] if key else []
        epochs = epochs_of(group)
        plusplus = of(group, "InfoCSE++", "start")
        entries = [(f"InfoCSE, fine-tuned once ({epochs} epochs)", of(group, "InfoCSE", "start"))]
        for number in rounds_of(plusplus):
            entries += [(f"InfoCSE++ after round {number} ({number} fine-tunings of {epochs} epochs)",
                         plusplus_round(plusplus, number)),
                        (f"control: InfoCSE fine-tuned once for {number * epochs} epochs",
                         control_cells(fewshot_groups, key, number * epochs))]
        entries.append(("InfoCSE++ (round chosen by fine-tuned val)", plusplus))
        records += [[variant_name(variant), label, *(scores_cell(of(mine, budget, "budget")) for budget in budgets)]
                    for label, mine in entries]
    return markdown_table(pd.DataFrame(records, columns=["corpus", "model", *(f"{b} labels" for b in budgets)]))


def study_table(groups_by_variant: dict[tuple, list[dict]], entries: list[tuple[str, list[str | None]]],
                columns: list[str], names: dict[str, str] | None = None) -> str:
    """One row per (corpus, model): n, test R@1 and MRR@10, and test R@1 minus each reference
    (SEED_MODEL: the seed model it was paired with; None: no comparison); `names` relabels methods."""
    records = []
    for variant, group in groups_by_variant.items():
        for method, references in entries:
            mine = of(group, method)
            intervals = [interval_cell(vs_seed_model(mine) if ref == SEED_MODEL else paired(mine, of(group, ref)))
                         if ref else "–" for ref in references]
            records.append(score_record(variant_name(variant), (names or {}).get(method, method), mine,
                                        ("recall@1", "mrr@10"), intervals))
    return markdown_table(pd.DataFrame(records, columns=["corpus", "model", "n (seeds)", "test R@1", "test MRR@10",
                                                         *columns]))


def iteration_items(reference_rows: list[dict], runs_by_name: dict) -> dict[int, list[dict]]:
    """{t: [{seed, val, test}]} of every iteration that ran in these InfoCSE runs."""
    found = {}
    for row in reference_rows:
        states = iteration_metrics(runs_by_name[row["run"]]["metrics"], "retrieval")
        for t, state in sorted(states.items()):
            if not state.get("stopped") and state.get("val") and state.get("test"):
                found.setdefault(t, []).append({"seed": row["seed"], "val": state["val"], "test": state["test"]})
    return found


def convergence_groups(zero_groups: dict, key: tuple | None) -> list[tuple]:
    """The table's group and those that differ from it only in the number of iterations and the
    patience, fewest iterations first."""
    if key is None:
        return []
    return sorted(study_variants(zero_groups, key, CONVERGENCE_KEYS),
                  key=lambda k: (zero_groups[k][0]["setting_params"].get("iterations", 0), k))


def table3_convergence(zero_groups: dict, chosen: dict, runs_by_name: dict) -> str:
    """InfoCSE iteration by iteration, per setting of the convergence study: the planned
    iterations are shown even where a setting stops earlier."""
    records = []
    for variant in shown_variants(chosen, mixed=False):
        keys = convergence_groups(zero_groups, chosen.get(variant)) or [None]
        for key in keys:
            group = zero_groups[key] if key else []
            params = group[0]["setting_params"] if group else TABLE_DEFAULTS
            setting = f"{params['iterations']} iterations, loop.patience {params['loop.patience']}"
            by_t = iteration_items(of(group, REFERENCE), runs_by_name)
            for t in range(max([PLANNED_ITERATIONS, *by_t]) + 1):
                mine = by_t.get(t, [])
                step = interval_cell(paired(mine, by_t.get(t - 1, []))) if t else "–"
                label = "Iter-0 (seed model)" if t == 0 else f"Iter-{t}"
                if not mine:
                    records.append([variant_name(variant), setting, label, *[NOT_RUN] * 5])
                    continue
                records.append([variant_name(variant), setting, label, seeds_cell(mine),
                                mean_sd([item["val"].get("mrr@10") for item in mine]),
                                mean_sd([item["test"].get("recall@1") for item in mine]),
                                mean_sd([item["test"].get("mrr@10") for item in mine]), step])
    return markdown_table(pd.DataFrame(records, columns=["corpus", "setting", "iteration", "n (seeds)", "val MRR@10",
                                                         "test R@1", "test MRR@10", "Δ test R@1 vs previous"]))


# ------------------------------------------------------------------------------------------ claims


def claim(text: str, corpus: str, parts: list[tuple[str, dict]], kind: str = BEATS) -> dict:
    return {"claim": text, "corpus": corpus, "kind": kind, "parts": parts}


def zero_shot_claims(variant: tuple, group: list[dict], mixed: dict[tuple, list[dict]],
                     unmixed: dict[tuple, list[dict]], larger: list[dict], from_larger: list[dict]) -> list[dict]:
    """The diverse-topics claims read the interleaved mixes only, where neighbouring sentences come from
    different sources; in a concatenated mix they mostly do not, so it is a control, shown in its table.
    Each mix is compared with its own unmixed counterpart (`unmixed`: same seed model and splits)."""
    name = variant_name(variant)
    infocse = of(group, REFERENCE)
    diverse = {v: rows for v, rows in mixed.items() if v[0] == variant[0] and v[2] == "interleaved"}
    mixed_parts = [(f"InfoCSE − {NEIGHBOURS}, {variant_name(v)}", paired(of(rows, REFERENCE), of(rows, NEIGHBOURS)))
                   for v, rows in diverse.items()]
    cost_parts = [(f"(InfoCSE − {NEIGHBOURS}) on {variant_name(v)} minus on {name}",
                   gap_change(of(rows, REFERENCE), of(rows, NEIGHBOURS), of(unmixed[v], REFERENCE),
                              of(unmixed[v], NEIGHBOURS)))
                  for v, rows in diverse.items()]
    return [
        claim("InfoCSE beats every baseline zero-shot", name,
              [(f"InfoCSE − {b}", paired(infocse, of(group, b))) for b in BASELINES]),
        claim("Same-sentence views (SimCSE, Mirror-BERT, ConSERT: here text shuffle + cutoff) trail "
              "different-sentence methods (ICT, CONPONO: here neighbour pairs)", name,
              [(f"{d} − {s}", paired(of(group, d), of(group, s))) for d in DIFFERENT_SENTENCE for s in SAME_SENTENCE]),
        claim("CONPONO (here neighbour pairs) is limited on documents with diverse topics: InfoCSE beats it on "
              "documents that interleave topics", name,
              mixed_parts or [(f"InfoCSE − {NEIGHBOURS}, mixed-topic documents", t_interval([]))]),
        claim("Mixing topics costs CONPONO (here neighbour pairs) more than it costs InfoCSE", name,
              cost_parts or [(f"(InfoCSE − {NEIGHBOURS}) mixed minus unmixed", t_interval([]))]),
        claim(f"Not the paper's, a user's: InfoCSE on the seed model beats {LARGER_MODEL} used as it is", name,
              [(f"InfoCSE − {LARGER_MODEL}", paired(infocse, larger))]),
        claim(f"Not the paper's, a user's: InfoCSE from {LARGER_MODEL} beats {LARGER_MODEL} used as it is", name,
              [(f"InfoCSE from {LARGER_MODEL} − {LARGER_MODEL}", vs_seed_model(of(from_larger, REFERENCE)))]),
        claim(f"Not the paper's, a user's: InfoCSE from {LARGER_MODEL} beats one round of {NEIGHBOURS} from it",
              name, [(f"InfoCSE − {NEIGHBOURS}, both from {LARGER_MODEL}",
                      paired(of(from_larger, REFERENCE), of(from_larger, NEIGHBOURS)))]),
    ]


def fewshot_claims(variant: tuple, fewshot_groups: dict, key: tuple | None) -> list[dict]:
    """The few-shot claims on the group `key` (None: not run). The smallest and largest budgets
    are those of the plan unless runs went beyond them."""
    name = variant_name(variant)
    group = fewshot_groups[key] if key else []
    budgets = sorted({c["budget"] for c in group} | set(PLANNED_BUDGETS), key=few_shot.budget_order)
    baseline = few_shot.best_baseline(group)
    rivals = [(SEED_MODEL, SEED_MODEL), (baseline, f"best baseline ({baseline or 'none run'})")]

    def at(start: str | None, budget: str) -> list[dict]:
        return [c for c in group if c["start"] == start and c["budget"] == budget] if start else []

    small, large = budgets[0], budgets[-1]
    plusplus = of(group, "InfoCSE++", "start")
    epochs = epochs_of(group)
    return [
        claim("Fine-tuned InfoCSE is the strongest few-shot", name,
              [(f"InfoCSE − {label}, {budget} labels", paired(at("InfoCSE", budget), at(start, budget)))
               for budget in budgets for start, label in rivals]),
        claim("The few-shot gaps shrink with more labels", name,
              [(f"(InfoCSE − {label}) at {small} minus at {large} labels",
                gap_change(at("InfoCSE", small), at(start, small), at("InfoCSE", large), at(start, large)))
               for start, label in rivals]),
        claim("InfoCSE++ beats fine-tuned InfoCSE at the smallest budget", name,
              [(f"InfoCSE++ − InfoCSE, {small} labels", paired(at("InfoCSE++", small), at("InfoCSE", small)))]),
        claim("InfoCSE++'s gain over fine-tuned InfoCSE is larger at small budgets", name,
              [(f"(InfoCSE++ − InfoCSE) at {small} minus at {large} labels",
                gap_change(at("InfoCSE++", small), at("InfoCSE", small),
                           at("InfoCSE++", large), at("InfoCSE", large)))]),
    ] + [
        claim(f"InfoCSE++ beats InfoCSE fine-tuned for as many epochs (the control), {size} budget", name,
              [(f"InfoCSE++ after round {number} − InfoCSE fine-tuned {number * epochs} epochs, {budget} labels",
                paired(of(plusplus_round(plusplus, number), budget, "budget"),
                       of(control_cells(fewshot_groups, key, number * epochs), budget, "budget")))
               for number in rounds_of(plusplus)])
        for size, budget in (("smallest", small), ("largest", large))
    ]


def study_claims(variant: tuple, group: list[dict], convergence: dict[int, list[dict]]) -> list[dict]:
    name = variant_name(variant)
    infocse = of(group, REFERENCE)
    return [
        claim("Partition IDC beats IDC by global K-means", name,
              [(f"InfoCSE − {KMEANS}", paired(infocse, of(group, KMEANS)))]),
        claim(f"InfoCSE converges within 2 rounds: Iter-3 within ±{CLOSE_MARGIN} of Iter-2", name,
              [("Iter-3 − Iter-2", paired(convergence.get(3, []), convergence.get(2, [])))], CLOSE),
        claim("InfoCSE improves on its initialization", name,
              [(f"InfoCSE from {alone} − {alone} alone", paired(of(group, started), of(group, alone)))
               for alone, started in INITIALIZATIONS]),
        claim(f"Initialization robust: InfoCSE from each initialization ends within ±{CLOSE_MARGIN} of InfoCSE "
              "from the seed model", name,
              [(f"InfoCSE from {alone} − InfoCSE", paired(of(group, started), infocse))
               for alone, started in INITIALIZATIONS], CLOSE),
        claim(f"The SBERT annotator ({LARGER_MODEL} mining round 1) helps", name,
              [("InfoCSE with SBERT round 1 − InfoCSE", paired(of(group, SBERT_ROUND1), infocse))]),
    ]


def part_text(label: str, interval: dict, kind: str, several: bool) -> str:
    """The comparison at the pre-set seeds (its verdict's evidence), then any follow-up seeds beside it."""
    preset = at_preset_seeds(interval)
    if interval["n"] == 0:
        return f"{label}: {NOT_RUN}"
    text = f"{label}: {format_interval(preset) if preset['n'] else NOT_RUN}"
    if several:
        text += f", {claim_verdict(preset, kind)}"
    if interval["n"] > preset["n"]:
        text += f" (follow-up, seeds added after that look: {format_interval(interval)})"
    return text


def claims_table(claims: list[dict]) -> str:
    records = []
    for item in claims:
        parts = item["parts"]
        verdict = combined_verdict([claim_verdict(at_preset_seeds(interval), item["kind"]) for _, interval in parts])
        evidence = [part_text(label, interval, item["kind"], len(parts) > 1) for label, interval in parts]
        records.append([item["claim"], item["corpus"], verdict, "; ".join(evidence)])
    return markdown_table(pd.DataFrame(records, columns=["claim", "corpus", "verdict", "evidence"]))


# ------------------------------------------------------------------------------------------ report

def sources(label: str, chosen: dict, older: dict, groups: dict, runs_by_name: dict,
            variants: list[tuple]) -> list[str]:
    """Which runs a table rests on, per corpus (their commits, seed model and how they ran), and the
    other groups at the same defaults, left out."""
    def described(key: tuple) -> str:
        names = sorted({item["run"] for item in groups[key]})
        commits = sorted({(runs_by_name[name].get("commit") or "")[:7] for name in names} - {""})
        ran_by = sorted({runs_by_name[name].get("source") or "unrecorded" for name in names})
        return (f"{len(names)} run(s) at commit(s) {', '.join(commits) or '–'} (seed model {seed_model_of(key)}; "
                f"{', '.join(ran_by)})")

    lines = []
    for variant in variants:
        if variant not in chosen:
            lines.append(f"- {label}, {variant_name(variant)}: no runs at the defaults.")
            continue
        line = f"- {label}, {variant_name(variant)}: {described(chosen[variant])}"
        if older[variant]:
            line += "; left out, other groups at the same defaults: " + "; ".join(map(described, older[variant]))
        lines.append(line + ".")
    return lines


def render(runs: list[dict]) -> str:
    rows = zero_shot.collect(runs)[0]
    cells = few_shot.collect(runs)[0].to_dict("records")
    runs_by_name = {run["name"]: run for run in runs}
    zero_groups, fewshot_groups = grouped(rows), grouped(cells)
    chosen, older = newest_groups(zero_groups, lambda items: any(r["method"] != SEED_MODEL for r in items))
    chosen_fs, older_fs = newest_groups(fewshot_groups, lambda items: True)
    budgets = fewshot_budgets(fewshot_groups, chosen_fs)
    unmixed = shown_variants(chosen, mixed=False)
    unmixed_fs = shown_variants(chosen_fs, mixed=False)
    group_of = {variant: zero_groups[chosen[variant]] if variant in chosen else [] for variant in unmixed}
    mixed = {variant: zero_groups[key] for variant, key in sorted(chosen.items()) if variant[1] > 1}
    unmixed_of = {variant: unmixed_counterpart(zero_groups, chosen[variant]) for variant in mixed}
    from_larger = {variant: from_larger_model(zero_groups, chosen.get(variant)) for variant in unmixed}

    claims = []
    for variant in unmixed:
        convergence_keys = [k for k in convergence_groups(zero_groups, chosen.get(variant))
                            if zero_groups[k][0]["setting_params"].get("iterations", 0) >= PLANNED_ITERATIONS]
        convergence = (iteration_items(of(zero_groups[convergence_keys[-1]], REFERENCE), runs_by_name)
                       if convergence_keys else {})
        larger = larger_model_rows(rows, chosen[variant]) if variant in chosen else []
        claims += zero_shot_claims(variant, group_of[variant], mixed, unmixed_of, larger, from_larger[variant])
        claims += fewshot_claims(variant, fewshot_groups, chosen_fs.get(variant))
        claims += study_claims(variant, group_of[variant], convergence)
    order = {text: i for i, text in enumerate(dict.fromkeys(item["claim"] for item in claims))}
    claims.sort(key=lambda item: order[item["claim"]])  # one claim's corpora together

    inits = [entry for alone, started in INITIALIZATIONS
             for entry in ((alone, [SEED_MODEL, None, None]), (started, [SEED_MODEL, REFERENCE, alone]))]
    return render_template(
        "paper_tables.md", runs_dir=RUNS_DIR, run_files=len(runs), d=TABLE_DEFAULTS,
        rounded_weights=SEED_MODEL_WEIGHTS[1],
        shuffle_cutoff=TEXT_SHUFFLE_CUTOFF, neighbours=NEIGHBOURS, larger=LARGER_MODEL, margin=CLOSE_MARGIN,
        preset_seeds=", ".join(map(str, PRESET_SEEDS)),
        table1=table1(rows, zero_groups, chosen),
        weights="; ".join(f"{variant_name(v)}: {seed_model_of(chosen[v])}"
                          for v in shown_variants(chosen, mixed=True) if v in chosen),
        mixed_table=mixed_table(zero_groups, chosen, unmixed_of, runs_by_name),
        table2=table2(fewshot_groups, chosen_fs, budgets),
        plusplus_table=table3_plusplus(fewshot_groups, chosen_fs, budgets),
        kmeans_table=study_table(group_of, [(REFERENCE, [SEED_MODEL, None]), (KMEANS, [SEED_MODEL, REFERENCE])],
                                 ["Δ R@1 vs seed model", "Δ R@1 vs partition IDC (K=1)"]),
        k_table=study_table(group_of, [(K_VARIANTS[0], [SEED_MODEL, None])] + [(k, [SEED_MODEL, K_VARIANTS[0]])
                                                                            for k in K_VARIANTS[1:]],
                            ["Δ R@1 vs seed model", "Δ R@1 vs K=1"]),
        init_table=study_table(group_of, [(REFERENCE, [SEED_MODEL, None, None]), *inits],
                               ["Δ R@1 vs seed model", "Δ R@1 vs InfoCSE from the seed model",
                                "Δ R@1 vs its initialization"]),
        sbert_table=study_table(group_of, [(REFERENCE, [SEED_MODEL, None]), (SBERT_ROUND1, [SEED_MODEL, REFERENCE])],
                                ["Δ R@1 vs seed model", "Δ R@1 vs InfoCSE"]),
        larger_table=study_table(from_larger, [(SEED_MODEL, [None, None]), (NEIGHBOURS, [SEED_MODEL, None]),
                                               (REFERENCE, [SEED_MODEL, NEIGHBOURS])],
                                 [f"Δ R@1 vs {LARGER_MODEL} as it is", f"Δ R@1 vs {NEIGHBOURS} from it"],
                                 {SEED_MODEL: f"{LARGER_MODEL}, as it is",
                                  NEIGHBOURS: f"{NEIGHBOURS} from {LARGER_MODEL}",
                                  REFERENCE: f"InfoCSE from {LARGER_MODEL}"}),
        convergence_table=table3_convergence(zero_groups, chosen, runs_by_name),
        claims_table=claims_table(claims),
        sources=[*sources("Zero-shot (Table 1, Table 3 studies)", chosen, older, zero_groups, runs_by_name,
                          shown_variants(chosen, mixed=True)),
                 *sources("Few-shot (Table 2, InfoCSE++)", chosen_fs, older_fs, fewshot_groups, runs_by_name,
                          unmixed_fs)])


def plot_fewshot(runs: list[dict], path: Path = PLOT) -> None:
    """Table 2 as lines: test R@1 after fine-tuning per label budget, one panel per corpus."""
    fewshot_groups = grouped(few_shot.collect(runs)[0].to_dict("records"))
    chosen = newest_groups(fewshot_groups, lambda items: True)[0]
    variants = shown_variants(chosen, mixed=False)
    budgets = fewshot_budgets(fewshot_groups, chosen)
    figure = Figure(figsize=(5.5 * len(variants), 4.8))
    for axis, variant in zip(figure.subplots(1, len(variants), squeeze=False)[0], variants):
        group = fewshot_groups[chosen[variant]] if variant in chosen else []
        starts = (SEED_MODEL, few_shot.best_baseline(group), "InfoCSE", "InfoCSE++")
        for offset, start in zip((-0.09, -0.03, 0.03, 0.09), starts):
            points = [(i, of(of(group, start, "start"), budget, "budget")) for i, budget in enumerate(budgets)]
            points = [(i, t_interval(list(by_seed(items).values()))) for i, items in points if items]
            bounds = [(iv["mean"], iv["low"] if iv["low"] is not None else iv["mean"],
                       iv["high"] if iv["high"] is not None else iv["mean"]) for _, iv in points]
            if start and points:  # error bars: the 95% t-interval of the mean (none for one run)
                axis.errorbar([i + offset for i, _ in points], [iv["mean"] for _, iv in points], capsize=3, marker="o",
                              yerr=[[mean - low for mean, low, _ in bounds], [high - mean for mean, _, high in bounds]],
                              label=f"{start} (n = {', '.join(str(iv['n']) for _, iv in points)})")
        axis.set_xticks(range(len(budgets)), [f"{b} labels" for b in budgets])
        axis.set_ylabel("test R@1 after fine-tuning\n(mean over seeds, 95% t-interval)")
        axis.set_title(variant_name(variant), fontsize=9)
        if axis.get_legend_handles_labels()[0]:  # below the axis, where it covers no point
            axis.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2, frameon=False)
        else:
            axis.text(0.5, 0.5, "no few-shot runs yet", ha="center", va="center", transform=axis.transAxes)
    save_figure(figure, path)


def main() -> None:
    runs = load_runs()
    write_text(REPORT, render(runs))
    plot_fewshot(runs, PLOT)
    print(f"wrote {REPORT} and {PLOT} from {len(runs)} run file(s) in {RUNS_DIR}/")


if __name__ == "__main__":
    main()

"""The comparison report (study/compare_experiments.py) from hand-made run files: rows per run,
grouping by corpus / setting / method, dedupe, deltas paired by seed with t-intervals checked
against scipy, the budget sweep table, byte-identical output, and the report with no runs."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from conftest import repo_params
from pipeline_helpers import deep_merge
from scipy import stats

from study import compare_experiments as compare


def state(r1: float, val_mrr: float = 0.5, stopped: bool = False) -> dict:
    if stopped:
        return {"stopped": True}
    return {"stopped": False, "val": {"recall@1": r1, "mrr@10": val_mrr},
            "test": {"recall@1": r1, "recall@5": r1, "recall@10": r1, "mrr@10": r1 + 0.1}}


def make_run(name: str, seed: int, init: str, states: list[dict], best: int, corpus: str = "bbc",
             ran_at: str = "2030-01-01T00:00:00", pairs: int = 2560, precision: str = "fp32", **overrides) -> dict:
    """A run file as study/export_runs.py writes it: full params, metrics per iteration (each
    evaluate stage records the precision it ran in)."""
    metrics = {f"metrics/iterations/iter-{t}/retrieval.json": s for t, s in enumerate(states)}
    for t, s in enumerate(states):
        metrics[f"metrics/iterations/iter-{t}/evaluate.json"] = {"seconds": 10.0, "precision": precision}
        trained = (t == 0 and init != "none") or (t > 0 and not s["stopped"])
        metrics[f"metrics/iterations/iter-{t}/train.json"] = (
            {"skipped": False, "seconds": 100.0, "steps": 80, "pairs_used": pairs - 1} if trained
            else {"skipped": True, "seconds": 0.1})
        metrics[f"metrics/iterations/iter-{t}/pairs.json"] = (
            {"pairs": pairs, "mean_token_jaccard": 0.1 * (t + 1)} if trained else {"method": init})
    metrics["metrics/best.json"] = {"iteration": best}
    params = deep_merge(repo_params(), {"seed": seed, "corpus": {"source": corpus}, "init": {"method": init},
                                        **overrides})
    return {"name": name, "commit": "c" * 40, "ran_at": ran_at, "params": params, "metrics": metrics}


def write_runs(folder, runs: list[dict]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for run in runs:
        (folder / f"{run['name']}.json").write_text(json.dumps(run, sort_keys=True, indent=1))


def lines_starting(text: str, prefix: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(prefix)]


def cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def difference_rows(text: str, method: str) -> list[str]:
    """The method's rows in the tables of paired differences (the only ones with intervals)."""
    return [line for line in lines_starting(text, f"| {method} ") if "(n = " in line]


def test_a_loop_run_gives_a_seed_row_and_the_chosen_model():
    run = make_run("r", 0, "none", [state(0.60), state(0.62, 0.6), state(0.61, 0.55)], best=1)
    seed_row, infocse = compare.run_rows(run)
    assert seed_row["method"] == "seed model" and seed_row["test"]["recall@1"] == 0.60 and seed_row["pairs"] == 0
    assert infocse["method"] == compare.REFERENCE and infocse["test"]["recall@1"] == 0.62
    assert infocse["pairs"] == 2560 and infocse["train_seconds"] == 100.0  # only the rounds up to the chosen one
    assert infocse["mean_batch"] == pytest.approx(2559 / 80)
    assert infocse["curve"] == [(0, 0.5), (1, 0.6), (2, 0.55)]


def test_a_baseline_run_is_one_row_named_after_its_method():
    rows = compare.run_rows(make_run("r", 1, "neighbours", [state(0.65), state(0, stopped=True)], best=0,
                                     loop={"max_iterations": 0}))
    assert [row["method"] for row in rows] == ["neighbour pairs (CONPONO-style)"]
    assert rows[0]["pairs"] == 2560 and rows[0]["token_jaccard"] == pytest.approx(0.1)


def test_budget_is_a_setting_seed_and_device_are_not():
    base = repo_params()
    other_budget = deep_merge(base, {"budget": {"max_pairs": "all", "max_pairs_per_document": 10}})
    elsewhere = deep_merge(base, {"seed": 3, "device": "cuda", "train": {"devices": 2}, "engine": {"name": "ray"}})
    assert compare.setting_of(base) != compare.setting_of(other_budget)
    assert compare.setting_of(base) == compare.setting_of(elsewhere)
    assert compare.setting_of(base)["budget.max_pairs"] == 2560
    # a param added later counts as a setting without any change here
    assert "train.new_knob" in compare.setting_of(deep_merge(base, {"train": {"new_knob": 1}}))


def test_the_precision_is_what_the_stages_recorded_and_never_assumed():
    run = make_run("r", 0, "none", [state(0.60), state(0.62)], best=1, precision="bf16")
    assert compare.ran_precision(run["metrics"]) == "bf16"
    # before embed and evaluate recorded it, train.json alone did
    legacy = {"metrics/iterations/iter-1/train.json": {"precision": "fp32"}, "metrics/best.json": {"iteration": 1}}
    assert compare.ran_precision(legacy) == "fp32"
    assert compare.ran_precision({"metrics/iterations/iter-0/retrieval.json": {}}) == "unrecorded"
    mixed = {"metrics/iterations/iter-0/evaluate.json": {"precision": "fp32"},
             "metrics/iterations/iter-1/train.json": {"precision": "bf16"}}
    assert compare.ran_precision(mixed) == "bf16+fp32"
    # fine-tuning in another precision than the self-supervised stages splits the run too
    finetuned = {**legacy, "metrics/finetuned/f0.json": {"precision": "bf16"},
                 "metrics/finetuned/round-2.json": {"precision": "bf16+fp32"}}
    assert compare.ran_precision(finetuned) == "bf16+fp32"
    assert compare.ran_precision({**legacy, "metrics/finetuned/f0.json": {"precision": "fp32"}}) == "fp32"


def test_runs_in_other_precisions_are_never_pooled_deduped_or_paired_and_the_params_do_not_split_them():
    fp32 = make_run("fp32", 0, "none", [state(0.60), state(0.62)], best=1, ran_at="2030-01-01T00:00:00")
    bf16 = make_run("bf16", 0, "none", [state(0.61), state(0.64)], best=1, ran_at="2030-02-01T00:00:00",
                    precision="bf16")
    explicit = make_run("explicit", 1, "none", [state(0.50), state(0.55)], best=1,
                        train={"precision": "fp32"}, embed={"precision": "fp32"}, evaluate={"precision": "fp32"})
    rows, dropped = compare.collect([fp32, bf16, explicit])
    assert dropped == [] and len(rows) == 6
    by_run = {(r["run"], r["method"]): r for r in rows}
    assert by_run["bf16", compare.REFERENCE]["seed_ref"]["run"] == "bf16"
    assert by_run["fp32", compare.REFERENCE]["seed_ref"]["run"] == "fp32"
    assert by_run["bf16", "seed model"]["evaluation"] != by_run["fp32", "seed model"]["evaluation"]
    # `fp32` set in params, run in fp32, is the same evaluation and setting as `auto` that ran in fp32
    assert (by_run["explicit", "seed model"]["evaluation"], by_run["explicit", "seed model"]["setting"]) == \
        (by_run["fp32", "seed model"]["evaluation"], by_run["fp32", "seed model"]["setting"])
    assert "precision=bf16" in compare.render([fp32, bf16])


def test_newest_run_wins_per_setting_method_and_seed():
    newest = make_run("new", 0, "none", [state(0.60), state(0.62)], best=1, ran_at="2030-02-01T00:00:00")
    older = make_run("old", 0, "none", [state(0.50), state(0.52)], best=1, ran_at="2030-01-01T00:00:00")
    other_budget = make_run("cheap", 0, "none", [state(0.60), state(0.70)], best=1, budget={"max_pairs": 10})
    rows, dropped = compare.collect([newest, older, other_budget])
    assert sorted((r["run"], r["method"]) for r in rows) == [
        ("cheap", compare.REFERENCE), ("cheap", "seed model"), ("new", compare.REFERENCE), ("new", "seed model")]
    assert dropped == [("old", "new")]


def test_paired_differences_use_the_t_interval_over_seeds():
    """SimCSE minus the seed model of the same seed: +0.10, +0.06, +0.09 -> mean and interval as
    scipy.stats.t.interval gives them; the seed models differ from seed to seed, the pairing removes it."""
    runs, gains = [], [0.10, 0.06, 0.09]
    for seed, (start, gain) in enumerate(zip([0.60, 0.66, 0.55], gains)):
        runs.append(make_run(f"i{seed}", seed, "none", [state(start)], best=0))
        runs.append(make_run(f"s{seed}", seed, "simcse", [state(start + gain)], best=0, loop={"max_iterations": 0}))
    text = compare.render(runs)
    low, high = stats.t.interval(0.95, 2, loc=np.mean(gains), scale=stats.sem(gains))
    expected = f"+{np.mean(gains):.3f} [{low:+.3f}, {high:+.3f}] (n = 3)"
    (simcse,) = difference_rows(text, "SimCSE")
    assert cells(simcse)[1:3] == [expected, "higher (95% CI above 0)"], simcse
    per_run = [cells(line) for line in lines_starting(text, "| SimCSE ") if cells(line)[2].startswith("s")]
    assert [(row[1], row[2], row[8]) for row in per_run] == [("0", "s0", "+0.100"), ("1", "s1", "+0.060"),
                                                             ("2", "s2", "+0.090")]


def test_a_mean_beyond_two_standard_errors_is_not_called_higher_at_n_3():
    """+0.01, +0.03, +0.05: mean 0.03 > 2 SE (0.023), yet the 95% t-interval contains 0."""
    runs = []
    for seed, gain in enumerate([0.01, 0.03, 0.05]):
        runs.append(make_run(f"i{seed}", seed, "none", [state(0.6)], best=0))
        runs.append(make_run(f"c{seed}", seed, "neighbours", [state(0.6 + gain)], best=0, loop={"max_iterations": 0}))
    (conpono,) = difference_rows(compare.render(runs), "neighbour pairs (CONPONO-style)")
    assert cells(conpono)[2] == "no difference shown (95% CI contains 0)", conpono


def test_methods_are_compared_with_infocse_of_the_same_setting_and_seed():
    runs = [make_run(f"i{seed}", seed, "none", [state(0.5), state(0.60 + 0.01 * seed)], best=1) for seed in range(3)]
    runs += [make_run(f"c{seed}", seed, "neighbours", [state(0.55 + 0.02 * seed)], best=0, loop={"max_iterations": 0})
             for seed in range(3)]
    rows, _ = compare.collect(runs)
    conpono = [r for r in rows if r["method"] == "neighbour pairs (CONPONO-style)"]
    assert [round(compare.delta(r, "infocse_ref", "test", "recall@1"), 6) for r in conpono] == [-0.05, -0.04, -0.03]
    assert [compare.delta(r, "seed_ref", "test", "recall@1") for r in conpono] == pytest.approx([0.05, 0.07, 0.09])


def test_budget_sweep_table_has_one_row_per_setting_and_method():
    runs = []
    budgets = {"": {}, "-all20": {"budget": {"max_pairs": "all", "max_pairs_per_document": 20}},
               "-all10": {"budget": {"max_pairs": "all", "max_pairs_per_document": 10}}}
    for suffix, budget in budgets.items():
        for seed in range(3):
            runs.append(make_run(f"man-infocse{suffix}-s{seed}", seed, "none", [state(0.5), state(0.55)], best=1,
                                 corpus="manpages", **budget))
            runs.append(make_run(f"man-conpono{suffix}-s{seed}", seed, "neighbours", [state(0.56)], best=0,
                                 corpus="manpages", loop={"max_iterations": 0}, **budget))
    text = compare.render(runs)
    sweep = text.split("### Budget sweep: manpages")[1].split("###")[0]
    rows = lines_starting(sweep, "| budget.")
    assert [cells(row)[0:3] for row in rows] == [
        ["budget.max_pairs_per_document=10, budget.max_pairs=all", "neighbour pairs (CONPONO-style)", "3"],
        ["budget.max_pairs_per_document=10, budget.max_pairs=all", compare.REFERENCE, "3"],
        ["budget.max_pairs_per_document=20, budget.max_pairs=2560", "neighbour pairs (CONPONO-style)", "3"],
        ["budget.max_pairs_per_document=20, budget.max_pairs=2560", compare.REFERENCE, "3"],
        ["budget.max_pairs_per_document=20, budget.max_pairs=all", "neighbour pairs (CONPONO-style)", "3"],
        ["budget.max_pairs_per_document=20, budget.max_pairs=all", compare.REFERENCE, "3"]]
    # CONPONO vs InfoCSE of the same setting: +0.01 in every seed (sd 0: a zero-width interval)
    assert cells(rows[0])[7] == "+0.010 [+0.010, +0.010] (n = 3)"
    # every setting has its own means and per-run tables
    assert text.count("### manpages, setting: ") == 3


def test_one_run_shows_n_1_and_no_interval():
    runs = [make_run("i0", 0, "none", [state(0.5)], best=0),
            make_run("m0", 0, "mirror", [state(0.4)], best=0, loop={"max_iterations": 0})]
    (mirror,) = difference_rows(compare.render(runs), "Mirror-BERT")
    assert cells(mirror)[1:3] == ["-0.100 (n = 1)", "one run (n = 1): no interval"]


def test_reports_are_identical_bytes_on_a_rerun(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_runs(tmp_path / "study/runs", [
        make_run(f"i{seed}", seed, "none", [state(0.5 + seed / 50), state(0.55, 0.6)], best=1) for seed in range(2)])
    compare.main()
    first = {p: (tmp_path / p).read_bytes() for p in ("study/reports/comparison.md", "study/reports/convergence.png")}
    compare.main()
    assert {p: (tmp_path / p).read_bytes() for p in first} == first
    assert "InfoCSE (init none, K=1)" in first["study/reports/comparison.md"].decode()


def test_no_run_files_still_writes_a_report_that_says_so(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    compare.main()
    text = (tmp_path / "study/reports/comparison.md").read_text()
    assert "No runs yet" in text and (tmp_path / "study/reports/convergence.png").stat().st_size > 0


def test_a_file_that_is_not_a_run_file_is_one_clear_error(tmp_path):
    (tmp_path / "x.json").write_text(json.dumps({"hello": 1}))
    with pytest.raises(SystemExit, match="not a run file"):
        compare.load_runs(tmp_path)


def test_a_run_file_older_than_a_param_pools_with_runs_that_keep_its_default_only(tmp_path):
    older = make_run("old", 0, "none", [state(0.5)], best=0)
    del older["params"]["loop"]["validate_on"]  # made before the param existed: the loop validated on val
    same = make_run("val", 0, "neighbours", [state(0.6)], best=0, loop={"validate_on": "val"})
    other = make_run("pool", 0, "neighbours", [state(0.7)], best=0, loop={"validate_on": "fewshot+val"})
    write_runs(tmp_path, [older, same, other])
    rows, _ = compare.collect(compare.load_runs(tmp_path))
    setting = {row["run"]: row["setting"] for row in rows}
    assert setting["old"] == setting["val"] != setting["pool"]
    assert [row["method"] for row in rows if row["setting"] == setting["old"]] == ["neighbour pairs (CONPONO-style)",
                                                                              "seed model"]


def test_render_does_not_change_the_runs():
    runs = [make_run("i0", 0, "none", [state(0.5), state(0.6)], best=1)]
    before = copy.deepcopy(runs)
    compare.render(runs)
    assert runs == before


def chosen_line(text: str) -> str:
    (line,) = lines_starting(text.split("### Budget sweep: manpages")[1].split("###")[0], "Setting chosen by validation")
    return line


def sweep_run(name: str, seed: int, test_r1: float, val_mrr: float, budget: dict, init: str = "none") -> dict:
    """A man-pages run whose chosen model has this test recall@1 and val mrr@10; the seed model's
    test recall@1 is 0.5 and its val mrr@10 0.5."""
    if init == "none":
        return make_run(name, seed, init, [state(0.5), state(test_r1, val_mrr)], best=1, corpus="manpages", **budget)
    return make_run(name, seed, init, [state(test_r1, val_mrr)], best=0, corpus="manpages",
                    loop={"max_iterations": 0}, **budget)


ALL10 = {"budget": {"max_pairs": "all", "max_pairs_per_document": 10}}
ALL20 = {"budget": {"max_pairs": "all", "max_pairs_per_document": 20}}


def test_the_setting_is_chosen_by_validation_over_shared_seeds_never_by_test():
    runs = []
    for seed in range(2):
        # all10 wins on validation (0.70 vs 0.60 and 0.62), all20 on test (0.80 vs 0.55)
        runs.append(sweep_run(f"man-infocse-all10-s{seed}", seed, 0.55 + 0.01 * seed, 0.70, ALL10))
        runs.append(sweep_run(f"man-infocse-all20-s{seed}", seed, 0.80, 0.60 + 0.02 * seed, ALL20))
        runs.append(sweep_run(f"man-conpono-all10-s{seed}", seed, 0.60 + 0.03 * seed, 0.60, ALL10, init="neighbours"))
    # a third seed at all20 only, with a val that would lift all20's mean above all10's: not shared, not counted
    runs.append(sweep_run("man-infocse-all20-s2", 2, 0.80, 0.99, ALL20))
    line = chosen_line(compare.render(runs))
    assert "**budget.max_pairs_per_document=10, budget.max_pairs=all**" in line
    assert "mrr@10 0.7000 over seeds 0, 1 (the seeds every setting in the choice has run, n = 2;" in line
    # all10's val lead over all20, paired by seed: +0.10 and +0.08, checked against scipy
    half = stats.t.ppf(0.975, 1) * np.std([0.10, 0.08], ddof=1) / np.sqrt(2)
    assert (f"budget.max_pairs_per_document=20, budget.max_pairs=all: 0.6100, lead "
            f"+0.0900 [{0.09 - half:+.4f}, {0.09 + half:+.4f}] (n = 2), no difference shown (95% CI contains 0))") in line
    assert "provisional" not in line
    # InfoCSE minus the seed model at all10: +0.05 and +0.06 over two seeds, checked against scipy
    gains = np.array([0.05, 0.06])
    half = stats.t.ppf(0.975, 1) * gains.std(ddof=1) / np.sqrt(2)
    assert f"recall@1 +0.055 [{0.055 - half:+.3f}, {0.055 + half:+.3f}] (n = 2)" in line
    # CONPONO minus InfoCSE at all10: +0.05 and +0.07
    half = stats.t.ppf(0.975, 1) * np.std([0.05, 0.07], ddof=1) / np.sqrt(2)
    assert f"neighbour pairs (CONPONO-style) minus InfoCSE, recall@1 +0.060 [{0.060 - half:+.3f}, {0.060 + half:+.3f}] (n = 2)" in line


ALL40 = {"budget": {"max_pairs": "all", "max_pairs_per_document": 40}}


def test_a_setting_run_at_fewer_seeds_waits_beside_the_choice_instead_of_shrinking_it():
    runs = [run for seed in range(3)
            for run in (sweep_run(f"man-infocse-all10-s{seed}", seed, 0.6, 0.70 + 0.01 * seed, ALL10),
                        sweep_run(f"man-infocse-all20-s{seed}", seed, 0.6, 0.68, ALL20))]
    # all40 at seed 0 only, ahead of both there: over seed 0 alone it would be chosen
    runs.append(sweep_run("man-infocse-all40-s0", 0, 0.6, 0.75, ALL40))
    line = chosen_line(compare.render(runs))
    assert "**budget.max_pairs_per_document=10, budget.max_pairs=all**" in line
    assert "mrr@10 0.7100 over seeds 0, 1, 2 (the seeds every setting in the choice has run, n = 3;" in line
    assert "provisional" not in line
    assert line.endswith("Not yet in the choice, run at fewer seeds (the chosen setting's paired val lead over the "
                         "seeds both have run): budget.max_pairs_per_document=40, budget.max_pairs=all: seeds 0, "
                         "0.7500 against the chosen setting's 0.7000 there, lead -0.0500 (n = 1), one run (n = 1): "
                         "no interval.")


def test_the_lead_is_called_higher_only_when_its_interval_excludes_0():
    leads = [0.010, 0.012, 0.011]  # all10 ahead of all20 at every seed, by about the same
    runs = [run for seed, lead in enumerate(leads)
            for run in (sweep_run(f"man-infocse-all10-s{seed}", seed, 0.6, 0.70 + lead, ALL10),
                        sweep_run(f"man-infocse-all20-s{seed}", seed, 0.6, 0.70, ALL20))]
    line = chosen_line(compare.render(runs))
    assert "**budget.max_pairs_per_document=10, budget.max_pairs=all**" in line
    half = stats.t.ppf(0.975, 2) * np.std(leads, ddof=1) / np.sqrt(3)
    assert f"lead +0.0110 [{0.011 - half:+.4f}, {0.011 + half:+.4f}] (n = 3), higher (95% CI above 0))" in line
    runs[-2] = sweep_run("man-infocse-all10-s2", 2, 0.6, 0.69, ALL10)  # one seed where all20 leads
    line = chosen_line(compare.render(runs))
    assert "**budget.max_pairs_per_document=10, budget.max_pairs=all**" in line
    assert "(n = 3), no difference shown (95% CI contains 0))" in line


def test_no_choice_until_a_seed_has_run_every_setting_and_one_seed_is_provisional():
    runs = [sweep_run("man-infocse-all10-s0", 0, 0.6, 0.7, ALL10), sweep_run("man-infocse-all20-s1", 1, 0.6, 0.7, ALL20)]
    assert chosen_line(compare.render(runs)).startswith("Setting chosen by validation: none yet")
    runs.append(sweep_run("man-infocse-all20-s0", 0, 0.6, 0.65, ALL20))
    line = chosen_line(compare.render(runs))
    assert "**budget.max_pairs_per_document=10, budget.max_pairs=all**" in line and "provisional" in line
    assert line.endswith("no neighbour pairs (CONPONO-style) run at this setting.")

"""The comparison report (scripts/compare_experiments.py) on a hand-made `dvc exp show --json`:
rows per run, grouping and dedupe, the protocol filter, deltas paired by seed, verdicts."""

from __future__ import annotations

import copy

import pytest

from scripts.compare_experiments import collect, delta_verdict, render, run_rows

PROTOCOL = {"budget": {"max_pairs_per_document": 20, "max_pairs": 2560}, "train": {"batch_size": 32},
            "evaluate": {"metric": "mrr@10"}, "split": {"fewshot": 0.4, "val": 0.2, "test": 0.4},
            "seed_model": "all-MiniLM-L6-v2"}


def state(r1: float, val_mrr: float = 0.5, stopped: bool = False) -> dict:
    if stopped:
        return {"stopped": True}
    return {"stopped": False, "val": {"recall@1": r1, "mrr@10": val_mrr},
            "test": {"recall@1": r1, "recall@5": r1, "recall@10": r1, "mrr@10": r1 + 0.1}}


def run_data(seed: int, init: str, states: list[dict], best: int, corpus: str = "bbc", **params) -> dict:
    metrics = {f"metrics/iterations/iter-{t}/retrieval.json": {"data": s} for t, s in enumerate(states)}
    metrics["metrics/iterations/iter-0/pairs.json"] = {"data": {"method": init}}
    metrics["metrics/corpus.json"] = {"data": {"manpages_version": "6.03-2"} if corpus == "manpages" else {}}
    for t, s in enumerate(states):
        trained = (t == 0 and init != "none") or (t > 0 and not s["stopped"])
        metrics[f"metrics/iterations/iter-{t}/train.json"] = {"data": {"skipped": not trained, "seconds": 100.0}}
        if trained:
            metrics[f"metrics/iterations/iter-{t}/pairs.json"] = {"data": {"pairs": 2560, "mean_token_jaccard": 0.1 * (t + 1),
                                                                       **({"method": init} if t == 0 else {})}}
    metrics["metrics/best.json"] = {"data": {"iteration": best}}
    all_params = {**copy.deepcopy(PROTOCOL), "seed": seed, "corpus": {"source": corpus}, "init": {"method": init},
                  "idc": {"method": "partition", "k": 1, "first_round_annotator": "current"}, **params}
    return {"params": {"params.yaml": {"data": all_params}}, "metrics": metrics}


def show_of(*runs: tuple[str, dict]) -> list[dict]:
    """One commit whose experiments are `runs` (name, data); the commit's own run is the first."""
    (head_name, head), *experiments = runs
    return [{"rev": "workspace", "data": head},
            {"rev": "a" * 40, "name": head_name, "data": head,
             "experiments": [{"name": name, "revs": [{"rev": "b" * 40, "name": name, "data": data}]}
                             for name, data in experiments]}]


def test_a_loop_run_gives_a_seed_row_and_the_chosen_model():
    data = run_data(0, "none", [state(0.60), state(0.62, 0.6), state(0.61, 0.55)], best=1)
    seed_row, infocse = run_rows({"name": "r", "params": data["params"]["params.yaml"]["data"],
                                  "metrics": {p: v["data"] for p, v in data["metrics"].items()}})
    assert seed_row["method"] == "seed model" and seed_row["test"]["recall@1"] == 0.60 and seed_row["pairs"] == 0
    assert infocse["method"] == "InfoCSE (init none, K=1)" and infocse["test"]["recall@1"] == 0.62
    assert infocse["pairs"] == 2560 and infocse["train_seconds"] == 100.0  # only the rounds up to the chosen one
    assert infocse["curve"] == [(0, 0.5), (1, 0.6), (2, 0.55)]


def test_a_baseline_run_is_one_row_named_after_its_annotator():
    data = run_data(1, "conpono", [state(0.65), state(0, stopped=True)], best=0)
    rows = run_rows({"name": "r", "params": data["params"]["params.yaml"]["data"],
                     "metrics": {p: v["data"] for p, v in data["metrics"].items()}})
    assert [row["method"] for row in rows] == ["CONPONO"]
    assert rows[0]["pairs"] == 2560 and rows[0]["token_jaccard"] == pytest.approx(0.1)


def test_collect_dedupes_by_corpus_method_seed_and_drops_other_protocols():
    newest = run_data(0, "none", [state(0.60), state(0.62)], best=1)
    older_same_seed = run_data(0, "none", [state(0.50), state(0.52)], best=1)
    other_budget = run_data(1, "simcse", [state(0.9)], best=0, budget={"max_pairs_per_document": 20, "max_pairs": 10})
    rows = collect(show_of(("head", newest), ("old", older_same_seed), ("cheap", other_budget)),
                   {**PROTOCOL, "seed": 0})
    assert sorted((row["method"], row["seed"], row["test"]["recall@1"]) for row in rows) == [
        ("InfoCSE (init none, K=1)", 0, 0.62), ("seed model", 0, 0.60)]


def test_old_runs_with_the_budget_under_idc_count_as_the_same_protocol():
    old = run_data(2, "none", [state(0.6), state(0.7)], best=1)
    params = old["params"]["params.yaml"]["data"]
    params.pop("budget")
    params.pop("init")
    params["idc"] = {"k": 1, "max_pairs_per_document": 20, "max_pairs": 2560}
    rows = collect(show_of(("old", old)), PROTOCOL)
    assert [row["method"] for row in rows] == ["seed model", "InfoCSE (init none, K=1)"]


@pytest.mark.parametrize("deltas, verdict", [
    ([0.02, 0.03, 0.025], "higher, beyond the spread"),
    ([0.02, -0.03, 0.01], "within the spread"),
    ([-0.02, -0.03, -0.025], "lower, beyond the spread"),
    ([0.05, 0.06], "n=2: too few runs to tell"),
])
def test_delta_verdict(deltas, verdict):
    assert delta_verdict(deltas)[1] == verdict


def test_render_pairs_deltas_by_seed():
    """Δ is taken against the seed model of the same seed: 0.70-0.60 and 0.72-0.66 -> +0.080 ± 0.028."""
    runs = [("s0", run_data(0, "none", [state(0.60)], best=0)), ("s1", run_data(1, "none", [state(0.66)], best=0)),
            ("b0", run_data(0, "simcse", [state(0.70)], best=0)), ("b1", run_data(1, "simcse", [state(0.72)], best=0))]
    text = render(collect(show_of(*runs), PROTOCOL), {**PROTOCOL, "seed": 0})
    simcse = next(line for line in text.splitlines() if line.startswith("| SimCSE"))
    assert "+0.080 ± 0.028 (2/2 > 0)" in simcse and "n=2: too few runs to tell" in simcse
    assert "| 2 (0, 1) |" in simcse


def test_train_devices_is_not_part_of_the_protocol():
    run = run_data(0, "none", [state(0.6)], best=0)
    current = {**PROTOCOL, "train": {**PROTOCOL["train"], "devices": 1}}
    assert [row["method"] for row in collect(show_of(("r", run)), current)] == ["seed model"]


def test_a_queued_experiment_showing_its_parents_metrics_is_left_out():
    """DVC shows a queued or running experiment with the metrics of the commit it came from."""
    finished = run_data(0, "none", [state(0.6)], best=0, corpus="manpages")
    stale = run_data(0, "none", [state(0.9)], best=0)  # the parent's BBC metrics, not simcse on manpages
    stale["params"]["params.yaml"]["data"].update({"init": {"method": "simcse"}, "corpus": {"source": "manpages"}})
    rows = collect(show_of(("done", finished), ("queued", stale)), PROTOCOL)
    assert [(row["method"], row["test"]["recall@1"]) for row in rows] == [("seed model", 0.6)]


def test_methods_are_also_compared_with_infocse_paired_by_seed():
    runs = [(f"i{seed}", run_data(seed, "none", [state(0.5), state(0.60 + 0.01 * seed)], best=1)) for seed in range(3)]
    runs += [(f"c{seed}", run_data(seed, "conpono", [state(0.55 + 0.01 * seed)], best=0)) for seed in range(3)]
    text = render(collect(show_of(*runs), PROTOCOL), {**PROTOCOL, "seed": 0})
    conpono = [line for line in text.splitlines() if line.startswith("| CONPONO |")][-1]
    assert conpono.startswith("| CONPONO | -0.050 ± 0.000 (0/3 > 0) | lower, beyond the spread |"), conpono

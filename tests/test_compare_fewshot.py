"""The few-shot report (scripts/compare_fewshot.py) on a hand-made `dvc exp show --json`: which
run gives which starting point, the best baseline picked by validation, cells per label budget."""

from __future__ import annotations

from test_compare_experiments import PROTOCOL, show_of

from scripts.compare_fewshot import best_baseline, collect, render

FINETUNE = {"source": "fewshot", "learning_rate": 2e-5}


def scores(r1: float, val_mrr: float) -> dict:
    return {"val": {"mrr@10": val_mrr, "recall@1": r1}, "test": {"recall@1": r1, "mrr@10": r1 + 0.1}}


def run(seed: int, labels, init: str = "none", max_iterations="all", max_rounds: int = 1, f0=None, best=None,
        plusplus=None) -> dict:
    metrics = {"metrics/best.json": {"data": {"iteration": 0}},
               "metrics/iterations/iter-0/pairs.json": {"data": {"method": init}}}
    for path, value in (("f0", f0), ("best", best)):
        if value:
            metrics[f"metrics/finetuned/{path}.json"] = {"data": value}
    if plusplus:  # as `dvc exp show` gives them: the curve's list is dropped, the round files stay
        metrics["metrics/plusplus.json"] = {"data": plusplus}
        metrics["metrics/finetuned/round-2.json"] = {"data": {**plusplus, "round": 2, "stopped": False}}
        metrics["metrics/finetuned/round-3.json"] = {"data": {"round": 3, "stopped": True}}
    params = {**PROTOCOL, "seed": seed, "corpus": {"source": "bbc"}, "init": {"method": init},
              "loop": {"max_iterations": max_iterations}, "finetune": {**FINETUNE, "labels": labels},
              "plusplus": {"max_rounds": max_rounds}}
    return {"params": {"params.yaml": {"data": params}}, "metrics": metrics}


def test_starting_points_budgets_and_the_best_baseline_by_validation():
    runs = [
        ("s0", run(0, 100, f0=scores(0.50, 0.5), best=scores(0.52, 0.5), plusplus=scores(0.55, 0.6), max_rounds=3)),
        ("s1", run(1, 100, f0=scores(0.54, 0.5), best=scores(0.56, 0.5))),
        ("s0-300", run(0, 300, f0=scores(0.60, 0.5), best=scores(0.61, 0.5))),
        # SimCSE is better on test, CONPONO on validation: the report must pick CONPONO
        ("simcse", run(0, 100, init="simcse", max_iterations=0, f0=scores(0.90, 0.40))),
        ("conpono", run(0, 100, init="conpono", max_iterations=0, f0=scores(0.45, 0.70))),
    ]
    current = {**PROTOCOL, "finetune": {**FINETUNE, "labels": 300}}
    cells = collect(show_of(*runs), current)
    assert best_baseline(cells, "bbc") == "CONPONO"
    text = render(cells)
    row = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines() if line.startswith("| ")}
    assert "0.520 ± 0.028 / 0.620 ± 0.028 (n=2)" in row["seed model"]  # seeds 0 and 1 at 100 labels
    assert "0.610 / 0.710 (n=1)" in row["InfoCSE"]
    assert "0.550 / 0.650 (n=1)" in row["InfoCSE++"]
    assert "best baseline: CONPONO" in row and "SimCSE" not in text
    assert "| start | 100 labels | 300 labels |" in text


def test_the_best_baseline_is_scored_on_the_budgets_and_seeds_every_candidate_has():
    current = {**PROTOCOL, "finetune": {**FINETUNE, "labels": 300}}
    # ICT's one run at "all" labels scores higher than anything at 100 labels, but CONPONO and ICT
    # share only seed 0 at 100 labels, where CONPONO is better
    shared = [("c0", run(0, 100, init="conpono", max_iterations=0, f0=scores(0.5, 0.60))),
              ("c1", run(1, 100, init="conpono", max_iterations=0, f0=scores(0.5, 0.50))),
              ("i0", run(0, 100, init="ict", max_iterations=0, f0=scores(0.5, 0.55))),
              ("i-all", run(0, "all", init="ict", max_iterations=0, f0=scores(0.5, 0.95)))]
    assert best_baseline(collect(show_of(*shared), current), "bbc") == "CONPONO"
    # no shared run: the baseline run at more budgets and seeds is the candidate
    apart = [("c0", run(0, 100, init="conpono", max_iterations=0, f0=scores(0.5, 0.60))),
             ("c1", run(1, 100, init="conpono", max_iterations=0, f0=scores(0.5, 0.60))),
             ("m", run(0, 300, init="mirror", max_iterations=0, f0=scores(0.5, 0.90)))]
    assert best_baseline(collect(show_of(*apart), current), "bbc") == "CONPONO"
    assert best_baseline(collect(show_of(*apart[2:]), current), "bbc") == "Mirror-BERT"
    # the report has no column for the budget only the baseline left out was run with
    assert "| start | 100 labels |\n" in render(collect(show_of(*apart), current))


def test_other_fine_tuning_protocols_are_left_out():
    other = run(0, 100, f0=scores(0.5, 0.5), best=scores(0.5, 0.5))
    other["params"]["params.yaml"]["data"]["finetune"]["learning_rate"] = 1.0
    assert collect(show_of(("x", other)), {**PROTOCOL, "finetune": {**FINETUNE, "labels": 100}}) == []


def test_paired_differences_by_seed_with_a_verdict():
    """InfoCSE - seed model per seed at 100 labels: +0.02, +0.03, +0.04 -> beyond the spread; at 300
    labels one run only -> too few runs to tell."""
    runs = [(f"s{seed}", run(seed, 100, f0=scores(0.50 + seed / 100, 0.5), best=scores(0.52 + 2 * seed / 100, 0.5)))
            for seed in range(3)]
    runs.append(("s0-300", run(0, 300, f0=scores(0.60, 0.5), best=scores(0.58, 0.5))))
    text = render(collect(show_of(*runs), {**PROTOCOL, "finetune": {**FINETUNE, "labels": 100}}))
    recall, mrr = [line for line in text.splitlines() if line.startswith("| InfoCSE − seed model")]
    assert "+0.030 ± 0.010 (3/3 > 0): higher, beyond the spread" in recall
    assert "-0.020 (0/1 > 0): n=1: too few runs to tell" in recall
    assert "+0.030 ± 0.010 (3/3 > 0): higher, beyond the spread" in mrr  # scores(): MRR = R@1 + 0.1


def test_plusplus_curve_from_the_round_files():
    """Round 1 = finetune@best, round 2 ran, round 3 was skipped by the stop rule."""
    cells = collect(show_of(("s0", run(0, 100, f0=scores(0.5, 0.5), best=scores(0.52, 0.5), plusplus=scores(0.55, 0.6),
                                       max_rounds=3))), {**PROTOCOL, "finetune": {**FINETUNE, "labels": 100}})
    (plusplus,) = [c for c in cells if c["start"] == "InfoCSE++"]
    assert [(p["round"], p["val"]["mrr@10"]) for p in plusplus["curve"]] == [(1, 0.5), (2, 0.6)]

"""The bf16-against-fp32 report (study/precision_parity.py) from hand-made run files: each bf16
row paired with the fp32 row of the same setting, method and seed, differences checked against
scipy's t-interval, unmatched runs left out."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from test_compare_experiments import cells, make_run, state

from study import compare_experiments as compare
from study import precision_parity as parity


def infocse(seed: int, seed_r1: float, r1: float, precision: str, **overrides) -> dict:
    return make_run(f"{precision}-s{seed}", seed, "none", [state(seed_r1), state(r1, 0.6)], best=1,
                    precision=precision, **overrides)


def row_of(text: str, method: str) -> list[str]:
    section = text.split("## Paired differences", 1)[1].split("\n## ", 1)[0]
    (line,) = [line for line in section.splitlines() if line.startswith("| bbc ") and f"| {method} " in line]
    return cells(line)


def test_each_bf16_row_is_paired_with_its_fp32_twin_by_seed():
    fp32 = [infocse(seed, 0.50 + 0.01 * seed, 0.60 + 0.02 * seed, "fp32") for seed in range(3)]
    bf16 = [infocse(seed, 0.50 + 0.01 * seed, r1, "bf16") for seed, r1 in enumerate([0.61, 0.61, 0.66])]
    unmatched = infocse(0, 0.5, 0.9, "bf16", budget={"max_pairs": 10})  # no fp32 run of its setting
    text = parity.render(fp32 + bf16 + [unmatched])
    differences = np.array([0.61, 0.61, 0.66]) - np.array([0.60, 0.62, 0.64])
    low, high = stats.t.interval(0.95, 2, loc=differences.mean(), scale=stats.sem(differences))
    row = row_of(text, compare.REFERENCE)
    assert row[3] == "3 (0, 1, 2)"
    assert row[6] == f"{differences.mean():+.4f} [{low:+.4f}, {high:+.4f}] (n = 3)"  # Δ test recall@1
    assert row_of(text, "seed model")[6] == "+0.0000 [+0.0000, +0.0000] (n = 3)"  # same seed-model scores
    assert "bf16-s0" in text and "max_pairs=10" not in text  # the unmatched run has no row


def test_twins_of_two_evaluations_are_never_pooled():
    """Seed 0 evaluated at two sequence lengths: two rows of n = 1, not one row of a seed counted twice."""
    runs = [infocse(0, 0.5, r1, precision) for precision, r1 in (("fp32", 0.60), ("bf16", 0.62))]
    for precision, r1 in (("fp32", 0.70), ("bf16", 0.66)):
        runs.append(infocse(0, 0.5, r1, precision, evaluate={"max_seq_length": 64}))
        runs[-1]["name"] += "-64"
    section = parity.render(runs).split("## Paired differences", 1)[1].split("\n## ", 1)[0]
    rows = [cells(line) for line in section.splitlines() if f"| {compare.REFERENCE} " in line]
    assert [(row[1].split(",")[0], row[3], row[6]) for row in rows] == [
        ("evaluate.max_seq_length=256", "1 (0)", "+0.0200 (n = 1)"), ("evaluate.max_seq_length=64", "1 (0)", "-0.0400 (n = 1)")]


def test_no_twins_say_so():
    assert "No bf16 run has an fp32 twin yet." in parity.render([infocse(0, 0.5, 0.6, "bf16")])
    assert "No bf16 run has an fp32 twin yet." in parity.render([])


@pytest.mark.parametrize("recorded", [True, False])
def test_only_bf16_rows_are_the_reduced_side(recorded):
    """A newer fp32 run, or one that recorded no precision at all, is no bf16 twin."""
    other = make_run("other", 0, "none", [state(0.5), state(0.7)], best=1, ran_at="2031-01-01T00:00:00")
    if not recorded:
        other["metrics"] = {name: {k: v for k, v in values.items() if k != "precision"}
                            for name, values in other["metrics"].items()}
        assert compare.ran_precision(other["metrics"]) == "unrecorded"
    assert "No bf16 run has an fp32 twin yet." in parity.render([infocse(0, 0.5, 0.6, "fp32"), other])

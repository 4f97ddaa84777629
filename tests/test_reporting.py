"""infocse.reporting: the per-query paired bootstrap against a hand-written resampling and on a
known distribution, the across-run t-interval against its formula, and the verdict worded from
the interval only."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from infocse.reporting import format_interval, paired_bootstrap, t_interval, verdict


def direct_bootstrap(differences: np.ndarray, samples: int, seed: int) -> tuple[float, float, float]:
    """Resample the queries with replacement `samples` times (the same generator and draws), take
    each resample's mean, and read the 2.5th and 97.5th percentiles."""
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, len(differences), size=(samples, len(differences)))
    means = differences[rows].mean(axis=1)
    return float(differences.mean()), float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def per_query_differences(queries: int, seed: int) -> np.ndarray:
    """Model minus reference per query, as recall@1 gives them: -1, 0 or +1."""
    rng = np.random.default_rng(seed)
    model, reference = rng.random(queries) < 0.62, rng.random(queries) < 0.58
    return model.astype(float) - reference.astype(float)


@pytest.mark.parametrize("queries, samples, seed", [(40, 2000, 7), (836, 500, 0)])
def test_the_bootstrap_is_the_direct_percentile_resampling(queries, samples, seed):
    differences = per_query_differences(queries, seed + 1)
    assert paired_bootstrap(differences, samples, seed) == pytest.approx(
        direct_bootstrap(differences, samples, seed), abs=1e-12)


def test_the_same_seed_gives_the_same_interval_and_another_seed_another():
    differences = per_query_differences(200, 3)
    assert paired_bootstrap(differences, 1000, 5) == paired_bootstrap(differences, 1000, 5)
    assert paired_bootstrap(differences, 1000, 5) != paired_bootstrap(differences, 1000, 6)


def test_identical_models_give_a_zero_width_interval_at_zero():
    assert paired_bootstrap(np.zeros(50), 1000, 0) == (0.0, 0.0, 0.0)
    assert paired_bootstrap(np.full(50, 0.25), 1000, 0) == (0.25, 0.25, 0.25)


def test_the_interval_covers_the_true_mean_about_95_percent_of_the_time():
    """Differences drawn from a known distribution (mean 0.04): a 95% interval should miss the
    true mean in about 5% of 250 experiments (percentile intervals run a little narrow)."""
    rng = np.random.default_rng(11)
    covered = 0
    for trial in range(250):
        differences = rng.normal(0.04, 0.5, size=60)
        _, low, high = paired_bootstrap(differences, 1000, trial)
        covered += low <= 0.04 <= high
    assert 0.90 <= covered / 250 <= 0.98, covered / 250


def test_t_interval_is_the_t_distribution_interval():
    values = [0.02, 0.03, 0.025, 0.01]
    interval = t_interval(values)
    low, high = stats.t.interval(0.95, len(values) - 1, loc=np.mean(values), scale=stats.sem(values))
    assert interval["n"] == 4 and interval["mean"] == pytest.approx(np.mean(values))
    assert (interval["low"], interval["high"]) == pytest.approx((low, high))
    assert interval["sd"] == pytest.approx(np.std(values, ddof=1))


def test_t_interval_by_hand_at_n_3():
    """0.02, 0.03, 0.025: mean 0.025, sd 0.005, t(0.975, 2) = 4.3027 -> half-width 0.01242."""
    interval = t_interval([0.02, 0.03, 0.025])
    assert interval["low"] == pytest.approx(0.025 - 4.302653 * 0.005 / 3 ** 0.5, abs=1e-7)
    assert interval["high"] == pytest.approx(0.025 + 4.302653 * 0.005 / 3 ** 0.5, abs=1e-7)


def test_one_run_has_no_interval():
    assert t_interval([0.05]) == {"n": 1, "mean": 0.05, "sd": None, "low": None, "high": None}
    assert verdict(t_interval([0.05])) == "one run (n = 1): no interval"
    assert format_interval(t_interval([0.05])) == "+0.050 (n = 1)"


@pytest.mark.parametrize("values, expected", [
    ([0.02, 0.03, 0.025], "higher (95% CI above 0)"),
    ([-0.02, -0.03, -0.025], "lower (95% CI below 0)"),
    ([0.02, -0.03, 0.01], "no difference shown (95% CI contains 0)"),
    # mean 0.03 is more than two standard errors (2 x 0.0115) from 0, but n = 3 leaves 2 degrees
    # of freedom: the 95% t-interval [-0.020, +0.080] contains 0
    ([0.01, 0.03, 0.05], "no difference shown (95% CI contains 0)"),
])
def test_verdict_follows_the_interval(values, expected):
    assert verdict(t_interval(values)) == expected


def test_format_interval_shows_mean_bounds_and_n():
    assert format_interval(t_interval([0.01, 0.03, 0.05])) == "+0.030 [-0.020, +0.080] (n = 3)"

"""Reporting: paired intervals, Markdown tables and plots, for the run report and the
cross-run comparisons in `scripts/`.

Two kinds of interval, each saying what it is about:
- per query (one run): the paired bootstrap of the mean per-query difference between two models
  on the same test queries (`scipy.stats.bootstrap`, percentile, 95%);
- across runs (several seeds): the mean paired difference with a t-based 95% interval over runs
  (`scipy.stats.t`), n shown; a verdict is only "higher"/"lower" when the interval excludes 0.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from scipy import stats

from infocse.io import atomic_output


def paired_bootstrap(differences: np.ndarray, samples: int, seed: int) -> tuple[float, float, float]:
    """Mean of the per-query differences (model - reference) and its 95% percentile bootstrap
    interval: queries are resampled with both models' scores together."""
    differences = np.asarray(differences, dtype=float)
    if len(differences) < 2 or np.all(differences == differences[0]):
        value = float(differences.mean()) if len(differences) else float("nan")
        return value, value, value
    result = stats.bootstrap((differences,), np.mean, n_resamples=samples, confidence_level=0.95,
                             method="percentile", rng=np.random.default_rng(seed))
    return float(differences.mean()), float(result.confidence_interval.low), float(result.confidence_interval.high)


def t_interval(differences: list[float] | np.ndarray, confidence: float = 0.95) -> dict:
    """Mean of paired differences over runs, its t-based interval, sd and n (None bounds for n < 2)."""
    values = np.asarray(differences, dtype=float)
    n = len(values)
    mean = float(values.mean()) if n else float("nan")
    if n < 2:
        return {"n": n, "mean": mean, "sd": None, "low": None, "high": None}
    sd = float(values.std(ddof=1))
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1) * sd / np.sqrt(n))
    return {"n": n, "mean": mean, "sd": sd, "low": mean - half, "high": mean + half}


def verdict(interval: dict) -> str:
    """'higher' / 'lower' only when the 95% interval excludes 0; else 'no difference shown'."""
    if interval["low"] is None:
        return f"one run (n = {interval['n']}): no interval"
    if interval["low"] > 0:
        return "higher (95% CI above 0)"
    if interval["high"] < 0:
        return "lower (95% CI below 0)"
    return "no difference shown (95% CI contains 0)"


def format_interval(interval: dict, digits: int = 3) -> str:
    """`+0.046 [+0.013, +0.079] (n = 3)`: mean paired difference and its 95% t-interval."""
    if interval["low"] is None:
        return f"{interval['mean']:+.{digits}f} (n = {interval['n']})"
    return (f"{interval['mean']:+.{digits}f} [{interval['low']:+.{digits}f}, {interval['high']:+.{digits}f}] "
            f"(n = {interval['n']})")


def markdown_table(frame: pd.DataFrame) -> str:
    """A GitHub Markdown table of `frame` (strings as they are; format numbers before)."""
    return frame.to_markdown(index=False, disable_numparse=True)


def new_figure(width: float = 6, height: float = 4) -> tuple[Figure, object]:
    """A figure with one axis, without pyplot (no GUI backend, no global state)."""
    figure = Figure(figsize=(width, height))
    return figure, figure.add_subplot()


def save_figure(figure: Figure, path: Path | str) -> None:
    """PNG without the Software stamp, so the same data give the same bytes."""
    figure.tight_layout()
    with atomic_output(path) as tmp:
        figure.savefig(tmp, format="png", dpi=100, metadata={"Software": None})

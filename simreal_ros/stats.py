"""Statistics shared by evaluation, screening and benchmarks."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np


def wilson_interval(successes: int, trials: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (95% by default).

    Better behaved than the normal approximation at the small counts and extreme rates
    that screening and real evaluations produce.
    """
    if trials <= 0:
        return 0.0, 1.0
    if not 0 <= successes <= trials:
        raise ValueError(f"successes={successes} must be between 0 and trials={trials}.")
    rate = successes / trials
    denominator = 1.0 + z * z / trials
    centre = (rate + z * z / (2 * trials)) / denominator
    half_width = z * math.sqrt(rate * (1 - rate) / trials + z * z / (4 * trials * trials))
    half_width /= denominator
    # The ends are exact: rounding must neither exclude the observed rate nor leave [0, 1].
    low = 0.0 if successes == 0 else min(max(0.0, centre - half_width), rate)
    high = 1.0 if successes == trials else max(min(1.0, centre + half_width), rate)
    return low, high


def percentile(values, q: float) -> float:
    """Percentile (0..100) by linear interpolation; NaN for no values."""
    data = sorted(values)
    if not data:
        return float("nan")
    position = (len(data) - 1) * q / 100.0
    lower = math.floor(position)
    upper = min(lower + 1, len(data) - 1)
    weight = position - lower
    return data[lower] * (1 - weight) + data[upper] * weight


# ---------------------------------------------------------------- few-seed benchmarks
# Benchmarks compare a handful of training seeds, so intervals come from resampling the
# seeds (no normality assumption) and times-to-target from a censoring-aware estimator.
def _percentile_interval(stats: np.ndarray, level: float) -> tuple[float, float]:
    """Percentile interval that tolerates infinite statistics (e.g. a ratio over 0):
    np.percentile interpolates inf - inf to NaN, which would hide an unbounded end."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level={level} must lie strictly between 0 and 1.")
    data = np.sort(stats[~np.isnan(stats)])
    if len(data) == 0:
        return float("nan"), float("nan")

    def at(q: float) -> float:
        position = (len(data) - 1) * q
        lower = math.floor(position)
        upper = min(lower + 1, len(data) - 1)
        a, b = float(data[lower]), float(data[upper])
        return a if a == b else a + (b - a) * (position - lower)

    tail = (1.0 - level) / 2.0
    return at(tail), at(1.0 - tail)


def bootstrap_ci(
    values,
    statistic: Callable[[np.ndarray], float] = np.mean,
    resamples: int = 10000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``statistic`` over the rows of ``values``.

    Rows (axis 0) are the independent units, e.g. training seeds; a 2-D array keeps each
    row's columns together, which is how paired comparisons resample. A fixed ``seed``
    makes the interval reproducible. NaN ends for no values.
    """
    data = np.asarray(values, dtype=np.float64)
    if data.shape[0] == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    index = rng.integers(0, data.shape[0], size=(int(resamples), data.shape[0]))
    if statistic is np.mean and data.ndim == 1:  # the common case, vectorised
        stats = data[index].mean(axis=1)
    else:
        stats = np.asarray([statistic(data[row]) for row in index], dtype=np.float64)
    return _percentile_interval(stats, level)


def paired_bootstrap_ci(
    first,
    second,
    statistic: Callable[[np.ndarray, np.ndarray], float] | None = None,
    resamples: int = 10000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float]:
    """Bootstrap interval of a statistic of two paired samples (default: the mean of
    ``first - second``). A resample draws whole pairs (the same rows of both), so effects
    shared by a pair, e.g. a training seed's start states, cancel."""
    a = np.asarray(first, dtype=np.float64)
    b = np.asarray(second, dtype=np.float64)
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"paired samples differ in length: {a.shape[0]} vs {b.shape[0]}.")
    if statistic is None:
        return bootstrap_ci(a - b, np.mean, resamples, seed, level)
    if a.shape[0] == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    index = rng.integers(0, a.shape[0], size=(int(resamples), a.shape[0]))
    stats = np.asarray([statistic(a[row], b[row]) for row in index], dtype=np.float64)
    return _percentile_interval(stats, level)


def kaplan_meier(times, censored) -> tuple[np.ndarray, np.ndarray]:
    """Kaplan-Meier estimate of P(T > t): the event times and the survival just after each.

    At a tie, events come before censorings (the usual convention): a unit censored at t
    was still at risk at t.
    """
    t = np.asarray(times, dtype=np.float64)
    c = np.asarray(censored, dtype=bool)
    if t.shape != c.shape:
        raise ValueError(f"times {t.shape} and censored {c.shape} differ in shape.")
    if np.any(t < 0) or not np.all(np.isfinite(t)):
        raise ValueError("times must be finite and non-negative.")
    event_times = np.unique(t[~c])
    survival = np.empty(len(event_times))
    s = 1.0
    for i, time in enumerate(event_times):
        at_risk = int(np.sum(t >= time))
        events = int(np.sum((t == time) & ~c))
        s *= 1.0 - events / at_risk
        survival[i] = s
    return event_times, survival


def restricted_mean_time(times, censored, horizon: float) -> float:
    """Restricted mean time to event up to ``horizon``: the area under the Kaplan-Meier
    curve from 0 to ``horizon``.

    Without censoring it equals the plain mean of min(time, horizon). A unit censored
    before the event happened only says "later than its time"; the KM curve then stays
    above 0, so with censoring at the horizon the result is a lower bound on the
    unrestricted mean. NaN for no units.
    """
    t = np.asarray(times, dtype=np.float64)
    if t.size == 0:
        return float("nan")
    if horizon < 0:
        raise ValueError(f"horizon={horizon} must be non-negative.")
    event_times, survival = kaplan_meier(t, censored)
    area, previous_time, previous_s = 0.0, 0.0, 1.0
    for time, s in zip(event_times, survival, strict=True):
        if time >= horizon:
            break
        area += previous_s * (time - previous_time)
        previous_time, previous_s = time, s
    return float(area + previous_s * (horizon - previous_time))


def restricted_mean_rows(rows, horizon: float) -> float:
    """``restricted_mean_time`` of [time, censored (0/1)] rows: one array per unit, so a
    bootstrap resamples a unit's time and censoring together."""
    rows = np.asarray(rows, np.float64).reshape(-1, 2)
    return restricted_mean_time(rows[:, 0], rows[:, 1] > 0.5, horizon)


def ratio(numerator: float, denominator: float) -> float:
    """numerator / denominator; inf over 0 (NaN for 0 / 0), so a bootstrap keeps the end."""
    if denominator > 0:
        return numerator / denominator
    return float("inf") if numerator > 0 else float("nan")


def censored_ratio_verdict(
    ratio_ci, numerator_censored: int, denominator_censored: int, target: float,
    names: tuple[str, str] = ("numerator", "denominator"),
) -> tuple[str, str]:  # fmt: skip
    """(verdict, note) for "a ratio of restricted mean times >= ``target`` at its CI's
    lower bound".

    A censored unit's true time lies beyond the horizon, so its side's restricted mean
    understates its mean: the numerator censored makes the ratio a lower bound, the
    denominator censored an upper bound, both censored no bound at all.
    """
    low, high = ratio_ci
    top, bottom = names
    if np.isnan(low) or np.isnan(high):
        return "not measured", "no ratio (neither arm needed any episodes)"
    if numerator_censored and denominator_censored:
        return "not measured (censored)", "both arms censored: the ratio is no bound either way"
    if denominator_censored:
        note = f"{bottom} censored: the ratio is an upper bound"
        return ("not met" if high < target else "not measured (censored)"), note
    if numerator_censored:
        note = f"{top} censored: the ratio is a lower bound"
        return ("met" if low >= target else "not measured (censored)"), note
    note = "no seed censored: the ratio is measured"
    return ("met" if low >= target else "not met"), note


def censored_time_below_verdict(time_ci, censored: int, limit: float) -> str:
    """Verdict for "the restricted mean time is below ``limit``" from its CI; censored
    units make the restricted mean a lower bound on the time needed."""
    low, high = time_ci
    if not censored:
        return "met" if high < limit else "not met"
    return "not met" if low >= limit else "not measured (censored)"


def normalised_auc(episodes, success_rates, budget: float) -> float:
    """Area under a success-vs-episodes step function over [0, budget], divided by it.

    Each evaluated rate holds from its episode count until the next evaluation (the last
    one until ``budget``); evaluations past the budget are ignored. 1.0 means 100% from
    the start. The first evaluation must be at episode 0 (the untrained policy).
    """
    x = np.asarray(episodes, dtype=np.float64)
    y = np.asarray(success_rates, dtype=np.float64)
    if x.shape != y.shape or x.size == 0:
        raise ValueError("episodes and success_rates need the same, non-zero length.")
    if budget <= 0:
        raise ValueError(f"budget={budget} must be positive.")
    if x[0] != 0:
        raise ValueError(f"the first evaluation is at episode {x[0]:g}; it must be at 0.")
    if np.any(np.diff(x) < 0):
        raise ValueError("episodes must be non-decreasing.")
    ends = np.minimum(np.append(x[1:], budget), budget)
    starts = np.minimum(x, budget)
    return float(np.sum(y * (ends - starts)) / budget)


def rank_correlation(x, y) -> float:
    """Spearman's rho: the Pearson correlation of the ranks (ties share their mean rank);
    0 when either series is constant."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    if len(x) != len(y) or len(x) < 2:
        raise ValueError("rank correlation needs two equally long series of >= 2 values.")
    rx, ry = _mean_ranks(x), _mean_ranks(y)
    if rx.std() == 0 or ry.std() == 0:
        return 0.0
    return float(np.corrcoef(rx, ry)[0, 1])


def _mean_ranks(values: np.ndarray) -> np.ndarray:
    """0-based ranks, tied values averaged."""
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    first = np.cumsum(counts) - counts  # rank of each distinct value's first occurrence
    return (first + (counts - 1) / 2.0)[inverse]

"""Statistics shared by evaluation, screening and benchmarks."""

from __future__ import annotations

import math


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

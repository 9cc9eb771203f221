"""The search: the replay error of candidate dynamics over episodes, in coordinates where
each parameter's bounds are a box, and a CMA-ES run on it."""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Mapping, Sequence

import cma
import numpy as np

from simreal_ros.sysid.parameters import DEFAULT_PARAMETERS, LATENCY, FitParameter
from simreal_ros.sysid.simulate import ReplaySimulator


def _matches(pattern: str, nominal: Mapping[str, float]) -> list[str]:
    if pattern == LATENCY:
        return [LATENCY]
    alternatives = pattern.split("|")
    names = [n for n in nominal if any(fnmatch.fnmatchcase(n, a) for a in alternatives)]
    if not names:
        raise ValueError(
            f"parameter {pattern!r} matches no dynamics parameter; known: {', '.join(nominal)}."
        )
    return names


class _Objective:
    """x (search coordinates) -> candidate dynamics; the mean error over episodes."""

    def __init__(self, simulator: ReplaySimulator, parameters: Sequence[FitParameter]) -> None:
        self.simulator = simulator
        self.parameters = list(parameters)
        self.nominal = dict(simulator.reference.nominal_dynamics)
        for p in self.parameters:  # any body, geom or joint of the model, not only defaults
            wildcard = any(ch in p.pattern for ch in "*?[|")
            if not (p.is_latency or wildcard or p.pattern in self.nominal):
                self.nominal.update(simulator.reference.get_dynamics([p.pattern]))
        self.names = [_matches(p.pattern, self.nominal) for p in self.parameters]
        self.evaluations = 0

    # Coordinates: log-factor scaled to [0, 10] (scale), or steps (latency).
    def to_x(self, factors: Sequence[float]) -> np.ndarray:
        out = []
        for p, f in zip(self.parameters, factors, strict=True):
            if p.is_latency:
                out.append(float(f))
            else:
                out.append(10.0 * (math.log(f) - math.log(p.low)) / math.log(p.high / p.low))
        return np.array(out)

    def factors(self, x: Sequence[float]) -> list[float]:
        out = []
        for p, v in zip(self.parameters, x, strict=True):
            if p.is_latency:
                out.append(float(min(max(round(v), p.low), p.high)))
            else:
                u = min(max(v, 0.0), 10.0) / 10.0
                out.append(math.exp(math.log(p.low) + u * math.log(p.high / p.low)))
        return out

    def candidate(self, factors: Sequence[float]) -> dict[str, float]:
        values: dict[str, float] = {}
        for p, names, f in zip(self.parameters, self.names, factors, strict=True):
            if p.is_latency:
                values[LATENCY] = float(f)
            else:
                values.update({n: self.nominal[n] * f for n in names})
        return values

    def bounds(self) -> tuple[list[float], list[float]]:
        low = [p.low if p.is_latency else 0.0 for p in self.parameters]
        high = [p.high if p.is_latency else 10.0 for p in self.parameters]
        return low, high

    def per_episode(self, factor_sets: Sequence[Sequence[float]], episodes) -> np.ndarray:
        """(candidates, episodes) losses."""
        candidates = [self.candidate(f) for f in factor_sets]
        self.evaluations += len(candidates)
        errors = self.simulator.errors(candidates, episodes)
        return np.array([[e.loss for e in row] for row in errors])

    def residuals(self, factor_sets: Sequence[Sequence[float]], episodes) -> np.ndarray:
        """(candidates, residuals): the scaled segment residuals (``segment_residuals``)."""
        candidates = [self.candidate(f) for f in factor_sets]
        self.evaluations += len(candidates)
        return self.simulator.segment_residuals(candidates, episodes)

    def per_segment(self, factor_sets: Sequence[Sequence[float]], episodes) -> np.ndarray:
        """(candidates, segments) losses."""
        candidates = [self.candidate(f) for f in factor_sets]
        self.evaluations += len(candidates)
        return self.simulator.segment_losses(candidates, episodes)


def _nominal_factors(parameters: Sequence[FitParameter], nominal_latency: float) -> list[float]:
    return [
        min(max(nominal_latency, p.low), p.high) if p.is_latency else min(max(1.0, p.low), p.high)
        for p in parameters
    ]


def search_budget(evaluations: int, parameters: Sequence[FitParameter]) -> int:
    """Replays for a search of ``parameters``: ``evaluations`` is the budget of the grouped
    default model (7 parameters); it grows in proportion to the parameter count, since the
    replays a search needs to settle grow with the dimension (a per-joint model stopped on
    a slope with the grouped model's budget)."""
    return round(evaluations * max(1.0, len(parameters) / len(DEFAULT_PARAMETERS)))


def _run_cma(objective, x0, episodes, weights, settings, seed, budget, from_nominal):
    low, high = objective.bounds()
    # In the [0, 10] coordinates: a fifth of each log range from nominal; a resample
    # restarts near the estimate, wide enough to leave a flat direction.
    sigma = 2.0 if from_nominal else 1.0
    # The latency's coordinate is in steps, the others in [0, 10]: the same relative step.
    stds = [(p.high - p.low) / 10.0 if p.is_latency else 1.0 for p in objective.parameters]
    integer = [i for i, p in enumerate(objective.parameters) if p.is_latency]
    options = {
        "bounds": [low, high],
        "popsize": settings.population,
        "maxfevals": budget,
        "seed": seed + 1,
        "verbose": -9,
        "CMA_stds": stds,
        "tolfun": 1e-5,
        "tolx": 1e-4,
    }
    if integer:
        options["integer_variables"] = integer
    strategy = cma.CMAEvolutionStrategy(list(x0), sigma, options)
    # The start counts: a warm start is never returned worse than it began.
    best_x = np.asarray(x0, dtype=float)
    best_loss = float(objective.per_episode([objective.factors(best_x)], episodes)[0] @ weights)
    while not strategy.stop():
        xs = strategy.ask()
        losses = objective.per_episode([objective.factors(x) for x in xs], episodes) @ weights
        losses = np.where(np.isfinite(losses), losses, 1e12)
        strategy.tell(xs, losses.tolist())
        i = int(np.argmin(losses))
        if losses[i] < best_loss:
            best_x, best_loss = np.asarray(xs[i], dtype=float), float(losses[i])
    return objective.factors(best_x), best_loss


def split_holdout(count: int, holdout: int) -> tuple[list[int], list[int]]:
    """Every k-th episode held out (deterministic, spread over the recording order)."""
    holdout = max(0, min(holdout, count - 1))
    if holdout == 0:
        return list(range(count)), []
    held = sorted({round(i * count / holdout + count / (2 * holdout)) % count
                   for i in range(holdout)})  # fmt: skip
    return [i for i in range(count) if i not in held], held

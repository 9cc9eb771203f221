"""Around the search's best point: the quadratic model of the error (a probe either side
per parameter, a corner per coupled pair), its flat directions, and the local moves that
polish the estimate (least squares, ``_refine``; a compass search, ``_settle``)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Mapping, Sequence

import numpy as np
from scipy.optimize import least_squares

from simreal_ros.sysid.parameters import LATENCY
from simreal_ros.sysid.search import search_budget


def _is_contact(pattern: str) -> bool:
    return pattern.startswith(("mass.cube", "friction."))


def _coupled(objective, i: int, j: int) -> bool:
    """Pairs checked jointly: the contact parameters among themselves (mass against
    friction), a gain or the hand's mass against the latency (each makes the arm lag its
    commands), a gain against the same joints' damping."""
    a, b = objective.parameters[i].pattern, objective.parameters[j].pattern
    if _is_contact(a) and _is_contact(b):
        return True
    kinds = {a.split(".")[0], b.split(".")[0]}
    if LATENCY in (a, b):
        return "gain" in kinds or "mass.tool" in (a, b)
    if "mass.tool" in (a, b):  # the hand's mass loads every joint, against gain and damping
        return bool(kinds & {"gain", "damping"})
    if kinds == {"gain", "damping"}:
        joints = [{n.split(".", 1)[1] for n in objective.names[k]} for k in (i, j)]
        return bool(joints[0] & joints[1])
    return False


def _moved(objective, factors, offsets: Mapping[int, float]) -> list[float]:
    """``factors`` moved by ``offsets`` in local coordinates (log factor, or steps)."""
    out = list(factors)
    for i, offset in offsets.items():
        if objective.parameters[i].is_latency:
            out[i] = float(out[i] + offset)
        else:
            out[i] = float(out[i] * math.exp(offset))
    return out


@dataclasses.dataclass
class _LocalModel:
    h: np.ndarray  # probe size per parameter (log factor, or steps)
    sides: list[tuple[float, float]]
    pairs: list[tuple[int, int]]
    losses: np.ndarray  # (points, segments)
    center: np.ndarray  # (segments,) at the estimate
    grad: np.ndarray  # (segments, P)
    hess: np.ndarray  # (segments, P, P)


def _local_model(objective, estimate, fit, settings) -> _LocalModel:
    """Per-segment quadratic model of the error around ``estimate``: a probe either side
    per parameter (one-sided at the latency's floor), one corner per coupled pair."""
    count = len(objective.parameters)
    h = _probe_sizes(objective, settings)
    sides = _probe_sides(objective, estimate, h)
    points = [list(estimate)]
    for i in range(count):
        points += [_moved(objective, estimate, {i: sides[i][0]}),
                   _moved(objective, estimate, {i: sides[i][1]})]  # fmt: skip
    pairs = [
        (i, j) for i in range(count) for j in range(i + 1, count) if _coupled(objective, i, j)
    ]
    for i, j in pairs:
        points.append(_moved(objective, estimate, {i: sides[i][1], j: sides[j][1]}))
    losses = objective.per_segment(points, fit)  # (points, segments)
    losses = np.where(np.isfinite(losses), losses, 1e12)
    center = losses[0]
    segments = losses.shape[1]
    grad = np.zeros((segments, count))
    hess = np.zeros((segments, count, count))
    for i in range(count):
        a, b = sides[i]
        da, db = losses[1 + 2 * i] - center, losses[2 + 2 * i] - center
        hess[:, i, i] = 2 * (db / b - da / a) / (b - a)
        grad[:, i] = da / a - 0.5 * hess[:, i, i] * a
    for k, (i, j) in enumerate(pairs):
        ci, cj = sides[i][1], sides[j][1]
        dc = losses[1 + 2 * count + k] - center
        rest = dc - grad[:, i] * ci - grad[:, j] * cj
        rest -= 0.5 * (hess[:, i, i] * ci**2 + hess[:, j, j] * cj**2)
        hess[:, i, j] = hess[:, j, i] = rest / (ci * cj)
    return _LocalModel(h, sides, pairs, losses, center, grad, hess)


def _newton_subset(full_h: np.ndarray, candidates: list[int], h: np.ndarray) -> list[int]:
    """The parameters among ``candidates`` (positive curvature) whose Hessian is positive
    definite: the one moving most along a direction without a minimum is dropped first."""
    kept = [i for i in candidates if full_h[i, i] > 0]
    while kept:
        direction = _flat_direction(full_h, kept, h)
        if direction is None:
            break
        kept.pop(int(np.argmax(np.abs(direction))))
    return kept


def _flat_direction(full_h: np.ndarray, kept: list[int], h: np.ndarray) -> np.ndarray | None:
    """The direction without a minimum among ``kept`` (None when there is none), in probe
    units (``h``: ×1.25, 2 steps), so a latency in steps and a factor in log space compare
    at the resolution asked of each, and the parameter that moves most along it is the one
    the data constrain least. (Scaling by each one's own curvature instead would make a
    well-fixed parameter coupled to two loose ones look the loosest.)"""
    value, direction = _flattest(full_h, kept, h)
    return direction if value <= 0 else None


def looser_of_pair(full_h: np.ndarray, i: int, j: int, h: np.ndarray) -> int:
    """Of a pair the data fix only in combination, the one that moves most (in probe
    units) along the pair's flattest direction. Only it is left without a value: the
    other is then judged by how far it follows it (``partners_of_dropped``), so a gain
    that trades with a damping the data leave loose keeps a range, not the prior's."""
    _, direction = _flattest(full_h, [i, j], h)
    return (i, j)[int(np.argmax(np.abs(direction)))]


def _flattest(full_h: np.ndarray, kept: list[int], h: np.ndarray) -> tuple[float, np.ndarray]:
    """The smallest curvature among ``kept`` in probe units and its direction (see
    ``_flat_direction``)."""
    scale = h[kept]
    values, vectors = np.linalg.eigh(full_h[np.ix_(kept, kept)] * np.outer(scale, scale))
    return float(values[0]), vectors[:, 0]


def _probe_sides(objective, estimate, h: np.ndarray) -> list[tuple[float, float]]:
    """The two probe offsets per parameter: ±h, or two steps up at the latency's floor."""
    sides = []
    for i, p in enumerate(objective.parameters):
        if p.is_latency and estimate[i] - h[i] < p.low:
            sides.append((h[i], 2 * h[i]))
        else:
            sides.append((-h[i], h[i]))
    return sides


def _probe_sizes(objective, settings) -> np.ndarray:
    return np.array(
        [settings.probe_steps if p.is_latency else math.log(settings.probe_factor)
         for p in objective.parameters]
    )  # fmt: skip


# The central-difference half step of the least-squares Jacobian, in log(factor) (the
# latency: in units of LATENCY_UNIT steps). Wide on purpose: through contact the replay
# error is rough at small scales, and a 1% step gave a Jacobian whose Gauss-Newton step
# pointed a fifth of the way to the minimum (a 10% span pointed at it).
REFINE_STEP = 0.05
LATENCY_UNIT = 10.0
# A Jacobian column this small against the largest is a parameter the replay does not see.
INERT_COLUMN = 1e-9


def _refine_iterations(settings, parameters, free: int) -> int:
    """Least-squares iterations within the replays a search of ``parameters`` would get
    (``search_budget``), at most ``refine_iterations``: a small budget stays small."""
    budget = search_budget(settings.evaluations_per_restart, parameters)
    return max(1, min(settings.refine_iterations, budget // (2 * free + 1)))


def _refine(objective, estimate, fit, settings, held: Collection[int] = ()) -> list[float]:
    """Trust-region least squares (scipy's ``least_squares``) on every scaled residual of
    the fit segments, over the scale factors in log(factor) and the latency in steps (a
    fractional latency blends the two whole ones, ``ReplaySimulator._controls``), within
    their bounds; the latency is then rounded to whole steps, as the arm has it, and the
    others refitted there. Parameters in ``held`` (indices) keep their values.

    Why: a search that samples the error (CMA-ES) and a compass search at probe resolution
    both stall in a narrow valley: coupled gains, damping and latency, where no move of
    one parameter by a probe improves while a joint move does. A Gauss-Newton step sees
    the valley's direction from the residuals' Jacobian (one batched replay of 2 P
    candidates per iteration); a whole-step latency would hide the gain-latency trade-off
    from it."""
    if settings.refine_iterations <= 0:
        return list(estimate)
    params = objective.parameters
    free = [i for i in range(len(params)) if i not in held]
    if not free:
        return list(estimate)

    def to_x(factors: Sequence[float], indices: list[int]) -> np.ndarray:
        return np.array([
            factors[i] / LATENCY_UNIT if params[i].is_latency else math.log(factors[i])
            for i in indices
        ])  # fmt: skip

    def solve(start: Sequence[float], indices: list[int], iterations: int) -> list[float]:
        low = to_x([p.low for p in params], indices)
        high = to_x([p.high for p in params], indices)

        def factors_at(x: np.ndarray) -> list[float]:
            out = list(start)
            for k, i in enumerate(indices):
                out[i] = float(x[k] * LATENCY_UNIT if params[i].is_latency else math.exp(x[k]))
            return out

        def residual(x: np.ndarray) -> np.ndarray:
            return objective.residuals([factors_at(x)], fit)[0]

        # Parameters whose first Jacobian column is zero do not touch the replay here (a
        # cube the arm never reaches): later iterations skip their 2 replays each.
        inert: set[int] | None = None  # known after the first Jacobian

        def jacobian(x: np.ndarray) -> np.ndarray:
            nonlocal inert
            up = np.minimum(x + REFINE_STEP, high)
            down = np.maximum(x - REFINE_STEP, low)
            active = [k for k in range(len(indices)) if not inert or k not in inert]
            moved = []
            for k in active:
                for end in (up, down):
                    y = x.copy()
                    y[k] = end[k]
                    moved.append(factors_at(y))
            rows = objective.residuals(moved, fit)
            columns = (rows[0::2] - rows[1::2]) / (up - down)[active, None]
            out = np.zeros((rows.shape[1], len(indices)))
            out[:, active] = columns.T
            if inert is None:
                norms = np.linalg.norm(out, axis=0)
                inert = set(np.flatnonzero(norms <= INERT_COLUMN * max(norms.max(), 1e-300)))
            return out

        x0 = np.clip(to_x(start, indices), low + 1e-9, high - 1e-9)
        solution = least_squares(
            residual, x0, jac=jacobian, bounds=(low, high), method="trf",
            max_nfev=iterations, xtol=1e-4, ftol=1e-3,
        )  # fmt: skip
        return factors_at(solution.x)

    iterations = _refine_iterations(settings, params, len(free))
    estimate = solve(estimate, free, iterations)
    lag = next((i for i in free if params[i].is_latency), None)
    if lag is None:
        return estimate
    p = params[lag]
    estimate[lag] = float(min(max(round(estimate[lag]), p.low), p.high))
    rest = [i for i in free if i != lag]
    if rest:
        estimate = solve(estimate, rest, max(1, iterations // 3))
    return estimate


def _settle(objective, estimate, fit, settings, held: Collection[int] = ()) -> list[float]:
    """A compass search at probe resolution from the search's best point: while moving one
    parameter by one probe (×1.25, 2 steps) lowers the mean fit error by at least
    ``min_relative_increase``, take the best such move (at most ``settle_moves``). A
    CMA-ES search of many parameters can stop on a slope within its budget; 2 P + 1 replays
    per move bring it to where no single probe improves, which the identifiability check
    then requires of every fit it gives values from."""
    estimate = list(estimate)
    h = _probe_sizes(objective, settings)
    for _ in range(settings.settle_moves):
        moves = []
        for i, side in enumerate(_probe_sides(objective, estimate, h)):
            if i in held:
                continue
            for offset in side:
                moved = _moved(objective, estimate, {i: offset})
                p = objective.parameters[i]
                if p.low <= moved[i] <= p.high:
                    moves.append(moved)
        losses = objective.per_segment([estimate, *moves], fit)
        mean = np.where(np.isfinite(losses), losses, 1e12).mean(axis=1)
        best = int(np.argmin(mean[1:]))
        if not mean[1 + best] < mean[0] * (1 - settings.min_relative_increase):
            break
        estimate = moves[best]
    return estimate

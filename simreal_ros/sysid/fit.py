"""Fit the simulator's dynamics to recorded episodes: CMA-ES over a bounded parameterisation.

``identify(episodes, parameters=DEFAULT_PARAMETERS, ...) -> SysidResult``

Parameterisation (``FitParameter``): each entry is a name or pattern of the profile
vocabulary (``simreal_ros.sim.physics``). A scale entry (``gain.*``, ``mass.cube``, ...)
is one factor on the nominal value of every parameter it matches, searched in log space
between its bounds; ``latency_steps`` is a whole number of physics steps. The default
groups the per-joint gains and dampings into one factor each (seven numbers in all),
which ten short episodes determine; ``per_joint_parameters`` gives one factor per joint.

Search: CMA-ES (the ``cma`` package) on the trajectory error of ``ReplaySimulator``,
averaged over the fit episodes, with the bounds as box constraints and the latency as an
integer variable. Restart 0 fits all fit episodes from the nominal model, restart 1 from
a random point of the box (two parameters that trade against each other land elsewhere
on their ridge); each further restart fits a bootstrap resample of the episodes from the
estimate with half the step size. Every restart is then judged on all fit episodes: the
best is the estimate, and the spread of those within ``restart_tolerance`` of its error
measures what the data leave open (the uncertainty).

Identifiability, per parameter, at the estimate: moving it by ``probe_factor`` (latency:
``probe_steps``) either way must raise the error of the fit episodes, paired per episode,
with the 95% bootstrap lower bound above zero and by at least ``min_relative_increase``
of the error; and the restarts must agree within ``probe_factor`` squared. A parameter
that fails either is reported unidentifiable, with no value. The measurement noise is
estimated from the residuals at the estimate (``noise_estimate``), its uncertainty from a
bootstrap over episodes.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import cma
import numpy as np

from simreal_ros.robot.description import RobotDescription
from simreal_ros.stats import bootstrap_ci
from simreal_ros.sysid.recording import ReplayEpisode
from simreal_ros.sysid.simulate import ReplaySimulator, noise_estimate

LATENCY = "latency_steps"


@dataclasses.dataclass(frozen=True)
class FitParameter:
    """A searched quantity: a factor on matching nominal values, or the latency in steps."""

    pattern: str
    low: float
    high: float

    @property
    def is_latency(self) -> bool:
        return self.pattern == LATENCY

    def __post_init__(self) -> None:
        if not self.low < self.high:
            raise ValueError(f"{self.pattern}: bounds [{self.low}, {self.high}] are empty.")
        if not self.is_latency and self.low <= 0:
            raise ValueError(f"{self.pattern}: a scale factor's lower bound must be > 0.")


# Bounds are wide on purpose: the gap to identify lies outside the training randomisation.
DEFAULT_PARAMETERS = (
    FitParameter("gain.*", 0.05, 5.0),
    FitParameter("damping.*", 0.1, 10.0),
    FitParameter("mass.cube", 0.2, 5.0),
    FitParameter("mass.tool", 0.2, 5.0),
    FitParameter("friction.cube_geom", 0.2, 5.0),
    FitParameter("friction.table", 0.2, 5.0),
    FitParameter(LATENCY, 0.0, 50.0),
)


def per_joint_parameters(joint_names: Sequence[str]) -> tuple[FitParameter, ...]:
    """The default set with one gain and one damping factor per joint."""
    out = []
    for p in DEFAULT_PARAMETERS:
        if p.pattern in ("gain.*", "damping.*"):
            kind = p.pattern.split(".")[0]
            out += [FitParameter(f"{kind}.{j}", p.low, p.high) for j in joint_names]
        else:
            out.append(p)
    return tuple(out)


def parse_parameters(text: str) -> tuple[FitParameter, ...]:
    """``"gain.*=0.05:5,latency_steps=0:50"``; a bare name takes the default's bounds."""
    defaults = {p.pattern.split(".")[0]: p for p in DEFAULT_PARAMETERS}
    out = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, _, bounds = item.partition("=")
        kind = name.split(".")[0]
        if bounds:
            try:
                low, high = (float(v) for v in bounds.split(":"))
            except ValueError as error:
                raise ValueError(f"parameter {item!r}: give bounds as low:high.") from error
        elif kind in defaults:
            low, high = defaults[kind].low, defaults[kind].high
        else:
            raise ValueError(
                f"parameter {name!r}: no default bounds; use gain.*, damping.*, mass.*, "
                "friction.* or latency_steps, or give name=low:high."
            )
        out.append(FitParameter(name, low, high))
    if not out:
        raise ValueError("no parameters to fit.")
    return tuple(out)


@dataclasses.dataclass
class FitSettings:
    restarts: int = 3  # restart 0 on all fit episodes, the others on bootstrap resamples
    evaluations_per_restart: int = 300  # restart 0, from the nominal model
    evaluations_resample: int = 150  # each bootstrap restart (the third on), from the estimate
    restart_tolerance: float = 0.1  # restarts within this share of the best error count
    population: int = 10
    probe_factor: float = 1.25
    probe_steps: int = 2
    min_relative_increase: float = 0.01
    threads: int = 2
    seed: int = 0


@dataclasses.dataclass
class ParameterEstimate:
    pattern: str
    names: list[str]  # the vocabulary names it sets
    identifiable: bool
    value: float | None  # factor on nominal (latency: steps); None when unidentifiable
    std: float  # restarts' spread: of log(factor), or of steps
    restart_values: list[float]
    low: float
    high: float
    probe_increase: list[float]  # relative error increase at (down, up) probes
    reason: str = ""

    def absolute(self, nominal: Mapping[str, float]) -> dict[str, float]:
        if self.value is None:
            return {}
        if self.pattern == LATENCY:
            return {LATENCY: float(self.value)}
        return {n: nominal[n] * self.value for n in self.names}


@dataclasses.dataclass
class ErrorReport:
    loss: float
    joint_rms: float
    object_rms: float
    episodes: int


@dataclasses.dataclass
class SysidResult:
    parameters: list[ParameterEstimate]
    obs_noise: float
    obs_noise_ci: tuple[float, float]
    fit_sources: list[str]
    holdout_sources: list[str]
    before: dict[str, ErrorReport]  # "fit", "holdout": nominal model
    after: dict[str, ErrorReport]  # identified model
    evaluations: int
    seconds: float
    settings: dict[str, Any]
    nominal: dict[str, float]

    def values(self) -> dict[str, float]:
        """Absolute values of the identified parameters (the vocabulary's names)."""
        return absolute_values(self.parameters, self.nominal)

    def unidentifiable(self) -> list[str]:
        return [p.pattern for p in self.parameters if not p.identifiable]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _matches(pattern: str, nominal: Mapping[str, float]) -> list[str]:
    if pattern == LATENCY:
        return [LATENCY]
    names = [n for n in nominal if fnmatch.fnmatchcase(n, pattern)]
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
            wildcard = any(ch in p.pattern for ch in "*?[")
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


def _nominal_factors(parameters: Sequence[FitParameter], nominal_latency: float) -> list[float]:
    return [
        min(max(nominal_latency, p.low), p.high) if p.is_latency else min(max(1.0, p.low), p.high)
        for p in parameters
    ]


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
    best_x, best_loss = np.asarray(x0, dtype=float), math.inf
    while not strategy.stop():
        xs = strategy.ask()
        losses = objective.per_episode([objective.factors(x) for x in xs], episodes) @ weights
        losses = np.where(np.isfinite(losses), losses, 1e12)
        strategy.tell(xs, losses.tolist())
        i = int(np.argmin(losses))
        if losses[i] < best_loss:
            best_x, best_loss = np.asarray(xs[i], dtype=float), float(losses[i])
    return objective.factors(best_x), best_loss


def _report(simulator: ReplaySimulator, values: Mapping[str, float], episodes) -> ErrorReport:
    if not episodes:
        return ErrorReport(float("nan"), float("nan"), float("nan"), 0)
    errors = simulator.errors([values], episodes)[0]
    objects = [e.object_rms for e in errors if np.isfinite(e.object_rms)]
    return ErrorReport(
        loss=float(np.mean([e.loss for e in errors])),
        joint_rms=float(np.sqrt(np.mean([e.joint_rms**2 for e in errors]))),
        object_rms=float(np.sqrt(np.mean(np.square(objects)))) if objects else float("nan"),
        episodes=len(errors),
    )


def split_holdout(count: int, holdout: int) -> tuple[list[int], list[int]]:
    """Every k-th episode held out (deterministic, spread over the recording order)."""
    holdout = max(0, min(holdout, count - 1))
    if holdout == 0:
        return list(range(count)), []
    held = sorted({round(i * count / holdout + count / (2 * holdout)) % count
                   for i in range(holdout)})  # fmt: skip
    return [i for i in range(count) if i not in held], held


def identify(
    episodes: Sequence[ReplayEpisode],
    parameters: Sequence[FitParameter] = DEFAULT_PARAMETERS,
    holdout: int = 2,
    settings: FitSettings | None = None,
    robot: RobotDescription | None = None,
    progress=None,
    simulator: ReplaySimulator | None = None,
) -> SysidResult:
    """Identify ``parameters`` from ``episodes``; ``holdout`` episodes only evaluate."""
    settings = settings or FitSettings()
    started = time.monotonic()
    simulator = simulator or ReplaySimulator(episodes, robot, threads=settings.threads)
    objective = _Objective(simulator, parameters)
    nominal = objective.nominal
    fit, held = split_holdout(len(episodes), holdout)
    rng = np.random.default_rng(settings.seed)
    start = _nominal_factors(parameters, nominal.get(LATENCY, 0.0))
    restarts: list[list[float]] = []
    low, high = (np.array(b, dtype=float) for b in objective.bounds())
    for r in range(max(1, settings.restarts)):
        counts = np.ones(len(fit))
        if r == 0:
            x0 = objective.to_x(start)
        elif r == 1:  # anywhere in the box: finds a ridge of equally good values
            x0 = rng.uniform(low + 0.1 * (high - low), high - 0.1 * (high - low))
        else:
            counts = np.bincount(rng.integers(0, len(fit), len(fit)), minlength=len(fit))
            x0 = objective.to_x(restarts[0])
        weights = counts / counts.sum()
        budget = settings.evaluations_per_restart if r <= 1 else settings.evaluations_resample
        factors, loss = _run_cma(
            objective, x0, fit, weights, settings, settings.seed + r, budget, r <= 1
        )
        restarts.append(factors)
        if progress:
            progress(f"restart {r + 1}/{settings.restarts}: error {loss:.4f}, "
                     f"{objective.evaluations} replays so far")  # fmt: skip
    # Every restart judged on all fit episodes: the best is the estimate; the spread counts
    # only restarts about as good (one that did not converge says nothing about the data).
    per_episode = objective.per_episode(restarts, fit)
    full = per_episode.mean(axis=1)
    best = int(np.argmin(full))
    estimate = restarts[best]
    restarts = [
        f for f, e in zip(restarts, full, strict=True)
        if e <= full[best] * (1 + settings.restart_tolerance)
    ]  # fmt: skip
    estimates = _identifiability(objective, estimate, per_episode[best], restarts, fit, settings)
    identified = absolute_values(estimates, nominal)
    residuals = [simulator.residuals(identified, i) for i in fit]
    noise = noise_estimate(residuals)
    noise_ci = _noise_ci(residuals, rng)
    return SysidResult(
        parameters=estimates,
        obs_noise=noise,
        obs_noise_ci=noise_ci,
        fit_sources=[episodes[i].source for i in fit],
        holdout_sources=[episodes[i].source for i in held],
        before={k: _report(simulator, {}, v) for k, v in (("fit", fit), ("holdout", held))},
        after={k: _report(simulator, identified, v) for k, v in (("fit", fit), ("holdout", held))},
        evaluations=objective.evaluations,
        seconds=time.monotonic() - started,
        settings=dataclasses.asdict(settings)
        | {"parameters": [dataclasses.asdict(p) for p in parameters], "holdout": holdout},
        nominal=nominal,
    )


def absolute_values(
    estimates: Sequence[ParameterEstimate], nominal: Mapping[str, float]
) -> dict[str, float]:
    """The identified model: identified values by name; the unidentifiable stay nominal."""
    values: dict[str, float] = {}
    for p in estimates:
        values.update(p.absolute(nominal))
    return values


def _identifiability(
    objective, estimate, at_estimate, restarts, fit, settings
) -> list[ParameterEstimate]:
    """``at_estimate``: the estimate's error on each fit episode."""
    probes, where = [], []
    for i, p in enumerate(objective.parameters):
        for direction in (-1, 1):
            factors = list(estimate)
            if p.is_latency:
                factors[i] = float(max(0.0, estimate[i] + direction * settings.probe_steps))
            else:
                factors[i] = estimate[i] * settings.probe_factor**direction
            probes.append(factors)
            where.append(i)
    probe_losses = objective.per_episode(probes, fit)
    base = float(np.mean(at_estimate))
    out = []
    for i, p in enumerate(objective.parameters):
        increases, significant = [], True
        for row in np.flatnonzero(np.array(where) == i):
            delta = probe_losses[row] - at_estimate
            increases.append(float(np.mean(delta) / max(base, 1e-12)))
            low, _ = bootstrap_ci(delta, seed=settings.seed + int(row))
            if not (low > 0 and np.mean(delta) >= settings.min_relative_increase * base):
                significant = False
        values = [r[i] for r in restarts]
        if p.is_latency:
            spread_ok = max(values) - min(values) <= 2 * settings.probe_steps
            std = float(np.std(values))
        else:
            logs = np.log(values)
            spread_ok = float(np.exp(logs.max() - logs.min())) <= settings.probe_factor**2
            std = float(np.std(logs))
        reasons = []
        if not significant:
            probe = (
                f"±{settings.probe_steps} steps"
                if p.is_latency
                else f"×{settings.probe_factor:.2f}"
            )
            reasons.append(
                f"moving it by {probe} does not change the trajectory error reliably in "
                "both directions"
            )
        if not spread_ok:
            reasons.append(f"restarts disagree ({', '.join(f'{v:.3g}' for v in values)})")
        identifiable = significant and spread_ok
        out.append(
            ParameterEstimate(
                pattern=p.pattern,
                names=objective.names[i],
                identifiable=identifiable,
                value=float(estimate[i]) if identifiable else None,
                std=std,
                restart_values=[float(v) for v in values],
                low=p.low,
                high=p.high,
                probe_increase=increases,
                reason="; ".join(reasons),
            )
        )
    return out


def _noise_ci(residuals, rng) -> tuple[float, float]:
    if len(residuals) < 2:
        return (float("nan"), float("nan"))
    draws = []
    for _ in range(200):
        pick = rng.integers(0, len(residuals), len(residuals))
        draws.append(noise_estimate([residuals[i] for i in pick]))
    return (float(np.percentile(draws, 2.5)), float(np.percentile(draws, 97.5)))

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
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import cma
import numpy as np
from scipy.optimize import least_squares
from scipy.stats import norm, wilcoxon

from simreal_ros.robot.description_record import RobotDescription
from simreal_ros.sim.physics import friction_floor
from simreal_ros.sysid.recording import ReplayEpisode
from simreal_ros.sysid.simulate import (
    DEFAULT_SEGMENT_TICKS,
    ReplaySimulator,
    noise_estimate,
    object_travel,
)

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


# The cube's contact with the table, as one factor on both geoms' frictions. MuJoCo gives a
# contact the larger of its two geoms' frictions, so the data see only that pair's friction:
# fitted apart, the two trade along a kinked valley (a table at x1.98 standing in for a
# cube at x1.6) and neither gets a value. Scaled together, the pair's friction is exactly
# the factor times its nominal, smooth; the finger's higher friction keeps deciding its own
# contact with the cube below x1.67.
CONTACT_FRICTION = "friction.cube_geom|friction.table"

# Bounds are wide on purpose: the gap to identify lies outside the training randomisation.
DEFAULT_PARAMETERS = (
    FitParameter("gain.*", 0.05, 5.0),
    FitParameter("damping.*", 0.1, 10.0),
    FitParameter("mass.cube", 0.2, 5.0),
    FitParameter("mass.tool", 0.2, 5.0),
    FitParameter(CONTACT_FRICTION, 0.2, 5.0),
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


def parameterisations(
    joint_names: Sequence[str], nominal: Mapping[str, float]
) -> dict[str, tuple[FitParameter, ...]]:
    """The candidates of model selection, simplest first: ``grouped`` (one gain and one
    damping factor for the arm), ``joint_groups`` (one gain factor per group of joints
    sharing a nominal gain, i.e. the same actuator size; one damping), ``per_joint`` (one
    gain factor per joint; one damping). Dampings stay grouped: their per-joint effect is a
    small share of a joint's tracking error, and 7 more dimensions would double the search.
    A group of several joints is one pattern ``gain.a|gain.b``."""
    grouped = DEFAULT_PARAMETERS
    gain = next(p for p in grouped if p.pattern == "gain.*")
    others = [p for p in grouped if p.pattern != "gain.*"]
    by_gain: dict[float, list[str]] = {}
    for j in joint_names:
        by_gain.setdefault(float(nominal[f"gain.{j}"]), []).append(f"gain.{j}")
    groups = [FitParameter("|".join(names), gain.low, gain.high) for names in by_gain.values()]
    per_joint = [FitParameter(f"gain.{j}", gain.low, gain.high) for j in joint_names]
    out = {"grouped": tuple(grouped)}
    if 1 < len(groups) < len(joint_names):
        out["joint_groups"] = (*groups, *others)
    out["per_joint"] = (*per_joint, *others)
    return out


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
    segment_ticks: int = DEFAULT_SEGMENT_TICKS  # short-horizon replay; 0: whole episodes
    # A value is reported only when its posterior spread (1 sigma) is at most this: of
    # log(factor) (0.11: two sigma within 25%), or of latency steps.
    max_spread_log: float = 0.11
    max_spread_steps: float = 1.0
    # After the search: at most this many compass moves of one probe each (see _settle).
    settle_moves: int = 8
    # After the search: least-squares iterations on the segment residuals (see _refine);
    # 0 skips it. Each costs about two replays per parameter refitted.
    refine_iterations: int = 6


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
    # Posterior spread (1 sigma): of log(factor) for a scale, of steps for the latency; from
    # a quadratic model of the error around the estimate, bootstrapped over episodes. None
    # where the error has no minimum there (a flat or falling direction).
    spread: float | None = None
    interval: list[float] | None = None  # 95%: factor (or steps) low, high
    # Without a value, but bounded on both sides by the data (a spread past the limit, or
    # a slide along a valley): the 95% range within the search's box, which the profile
    # randomises over instead of the prior's range. None: the data do not bound it.
    bounded: list[float] | None = None
    # "above" or "below": the probes found the error rising on that side only, and nothing
    # else was against the value (``profile_range`` then walks the open side).
    bound_side: str | None = None
    # Without a value because its best value moves with a partner the profile draws (a
    # table friction along a cube mass's range): {"partner": pattern, "points": [[partner,
    # own], ...]}, its best values at the partner's drawn range's ends and at the fit,
    # ordered by the partner's value. The profile draws it along this valley (``tied:``).
    follows: dict[str, Any] | None = None
    # A friction: the factor below which another geom's friction decides every contact it
    # can make (``physics.friction_floor``, the others at the fit's values), so every value
    # below simulates as this one. None: not a friction, or it decides one across the box.
    decides_above: float | None = None

    def effective(self, factor: float) -> float:
        """The factor the simulation uses: a friction below ``decides_above`` simulates as
        that factor, so a value or range is compared with a truth through this."""
        return max(factor, self.decides_above or 0.0)

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
    # The open-loop whole-episode replay of the fit and held-out episodes: the final check.
    whole_before: dict[str, ErrorReport] = dataclasses.field(default_factory=dict)
    whole_after: dict[str, ErrorReport] = dataclasses.field(default_factory=dict)
    # Pairs checked jointly: {"a", "b", "correlation"} of the posterior at the estimate.
    correlations: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    model: str = ""  # the chosen parameterisation (model selection), "" when given
    model_selection: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    object_travel: float = 0.0  # m, the farthest the object moved in any episode
    replayed_steps: int = 0  # physics steps simulated, model selection included

    def values(self) -> dict[str, float]:
        """Absolute values of the identified parameters (the vocabulary's names)."""
        return absolute_values(self.parameters, self.nominal)

    def unidentifiable(self) -> list[str]:
        return [p.pattern for p in self.parameters if not p.identifiable]

    def spreads(self) -> dict[str, dict[str, Any]]:
        """Identified parameters' posterior spread, as profile.yaml's ``spread:``."""
        return {
            p.pattern: {
                "value": p.value,
                "std": p.spread,
                "unit": "steps" if p.pattern == LATENCY else "log_factor",
                "interval": p.interval,
            }
            for p in self.parameters
            if p.identifiable
        }

    def unidentifiable_reasons(self) -> dict[str, str]:
        return {p.pattern: p.reason for p in self.parameters if not p.identifiable}

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


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


def _report(
    simulator: ReplaySimulator, values: Mapping[str, float], episodes, whole: bool = False
) -> ErrorReport:
    if not episodes:
        return ErrorReport(float("nan"), float("nan"), float("nan"), 0)
    errors = simulator.errors([values], episodes, whole=whole)[0]
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
    start: Sequence[float] | None = None,
    prior: Mapping[str, tuple[float, float]] | None = None,
) -> SysidResult:
    """Identify ``parameters`` from ``episodes``; ``holdout`` episodes only evaluate.
    ``start``: the factors of a converged fit of ``parameters`` (model selection's), which
    stands for restart 0 (default: restart 0 searches from the nominal model). ``prior``:
    pattern -> the range the profile draws a parameter without a value from
    (``output.prior_ranges``); a value must hold across the ranges its partners are drawn
    from (``across_the_prior``). None: only across the ranges the data bound."""
    settings = settings or FitSettings()
    started = time.monotonic()
    prior = prior or {}
    if simulator is None and robot is None:
        raise ValueError("identify needs the arm (robot=) or a ReplaySimulator built for it.")
    simulator = simulator or ReplaySimulator(
        episodes, robot, threads=settings.threads, segment_ticks=settings.segment_ticks
    )
    objective = _Objective(simulator, parameters)
    nominal = objective.nominal
    fit, held_out = split_holdout(len(episodes), holdout)
    rng = np.random.default_rng(settings.seed)
    nominal_start = _nominal_factors(parameters, nominal.get(LATENCY, 0.0))
    restarts: list[list[float]] = []
    low, high = (np.array(b, dtype=float) for b in objective.bounds())
    for r in range(max(1, settings.restarts)):
        counts = np.ones(len(fit))
        if r == 0 and start is not None:  # a converged fit of these parameters already
            restarts.append([float(v) for v in start])
            continue
        if r == 0:
            x0 = objective.to_x(nominal_start)
        elif r == 1 and len(parameters) > len(DEFAULT_PARAMETERS):
            # Anywhere in the box, a richer model's search does not converge within the
            # restart's budget (per joint: error 3.5x the estimate's, so never counted).
            continue
        elif r == 1:  # anywhere in the box: finds a ridge of equally good values
            x0 = rng.uniform(low + 0.1 * (high - low), high - 0.1 * (high - low))
        else:
            counts = np.bincount(rng.integers(0, len(fit), len(fit)), minlength=len(fit))
            x0 = objective.to_x(restarts[0])
        weights = counts / counts.sum()
        budget = settings.evaluations_per_restart if r <= 1 else settings.evaluations_resample
        if r == 0:  # the estimate's own search; the others only test agreement
            budget = search_budget(budget, parameters)
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
    travel = object_travel([episodes[i] for i in fit])
    if start is None or best != 0:  # ``start`` was refined already
        estimate = _refine(objective, estimate, fit, settings)
    estimate = _settle(objective, estimate, fit, settings)  # at probe resolution too

    estimates, correlations = _identifiability(
        objective, estimate, restarts, fit, settings, travel
    )
    estimates = _profiled(objective, estimate, fit, settings, estimates)
    estimates = _with_the_prior(parameters, estimates, prior)
    limits = spread_limits(parameters, settings)
    # The profile holds a parameter without a value at nominal (within the prior's range),
    # or, where the data bound it, over that range around its fit. The values it gives must
    # be the best ones given that: a fit that let a loose parameter wander (damping at its
    # bound) leaves its partners biased along the valley. Refit the others with the loose
    # ones at nominal and the bounded ones where they were fitted, and judge them there.
    without_value = {i: e.reason for i, e in enumerate(estimates) if not e.identifiable}
    at_nominal = [i for i in without_value if estimates[i].bounded is None]
    moved = [i for i in at_nominal if estimate[i] != nominal_start[i]]
    if moved and len(without_value) < len(parameters):
        conditional = [nominal_start[i] if i in at_nominal else v for i, v in enumerate(estimate)]
        conditional = _refine(objective, conditional, fit, settings, held=without_value)
        first_pass = estimates
        unconditional, estimate = (
            estimate,
            _settle(objective, conditional, fit, settings, held=without_value),
        )
        estimates, correlations = _identifiability(
            objective, estimate, restarts, fit, settings, travel, held=without_value
        )
        for i in without_value:  # judged in the first pass, not again
            estimates[i] = dataclasses.replace(estimates[i], bounded=first_pass[i].bounded)
        errors = objective.per_episode([unconditional, estimate], fit).mean(axis=1)
        kept = [i for i, e in enumerate(estimates) if e.identifiable]
        drawn = [i for i in without_value if drawn_range(estimates[i], prior)]
        following, widened = follows_the_hold(
            parameters, lambda i, j: _coupled(objective, i, j), unconditional, estimate,
            (float(errors[0]), float(errors[1])), at_nominal,
            against_the_data(parameters, first_pass, at_nominal, nominal_start,
                             unconditional, _probe_sizes(objective, settings),
                             settings.min_relative_increase),
            kept, limits, settings.min_relative_increase, drawn,
        )  # fmt: skip
        for i, reason in following.items():
            estimates[i] = dataclasses.replace(
                estimates[i], identifiable=False, value=None, reason=reason, spread=None,
                interval=None,
            )  # fmt: skip
        for i, (slide, along) in widened.items():
            estimates[i] = _widened(
                parameters[i], estimates[i], slide, along, limits[i], unconditional[i]
            )
    found = across_the_prior(objective, estimate, fit, settings, estimates, prior, limits)
    if found:
        for i, (ends, d, partner_range) in found.items():
            estimates[i] = _spans_the_prior(
                parameters[i], estimates[i], ends, parameters[d].pattern, partner_range,
                estimate[d],
            )  # fmt: skip
        estimates = _with_the_prior(parameters, estimates, prior)
    estimates = friction_floors(objective, estimate, estimates)
    identified = absolute_values(estimates, nominal)
    residuals = [r for i in fit for r in simulator.residuals(identified, i)]
    noise = noise_estimate(residuals)
    noise_ci = _noise_ci(residuals, rng)
    splits = (("fit", fit), ("holdout", held_out))
    return SysidResult(
        parameters=estimates,
        obs_noise=noise,
        obs_noise_ci=noise_ci,
        fit_sources=[episodes[i].source for i in fit],
        holdout_sources=[episodes[i].source for i in held_out],
        before={k: _report(simulator, {}, v) for k, v in splits},
        after={k: _report(simulator, identified, v) for k, v in splits},
        evaluations=objective.evaluations,
        seconds=time.monotonic() - started,
        settings=dataclasses.asdict(settings)
        | {"parameters": [dataclasses.asdict(p) for p in parameters], "holdout": holdout},
        nominal=nominal,
        whole_before={k: _report(simulator, {}, v, whole=True) for k, v in splits},
        whole_after={k: _report(simulator, identified, v, whole=True) for k, v in splits},
        correlations=correlations,
        object_travel=travel,
    )


# Model selection's complexity penalty: AIC per scored segment, log(L) + 2 k / n.
def select_parameterisation(
    episodes: Sequence[ReplayEpisode],
    options: Mapping[str, Sequence[FitParameter]],
    holdout: int,
    settings: FitSettings,
    simulator: ReplaySimulator,
    progress=None,
) -> tuple[str, list[float], list[dict[str, Any]]]:
    """Fit each parameterisation (simplest first: a CMA-ES search from nominal; each later
    one by least squares, ``_refine``, from the previous fit) and choose by held-out error
    with a complexity penalty: the lowest ``log(held-out error) +
    2 k / n`` (k parameters, n fit segments), so a richer model must lower the held-out
    error by about 2/n per parameter. Without held-out episodes the simplest is chosen.
    Returns the name, its fitted factors and the table of every candidate."""
    fit, held_out = split_holdout(len(episodes), holdout)
    segments = max(1, simulator.segment_count(fit))
    table, fitted = [], {}
    previous: dict[str, float] | None = None
    for name, params in options.items():
        objective = _Objective(simulator, params)
        if previous is None:
            start = _nominal_factors(params, objective.nominal.get(LATENCY, 0.0))
        else:
            start = _factors_of(objective, previous)
        if previous is None or settings.refine_iterations <= 0:
            weights = np.full(len(fit), 1 / len(fit))
            budget = search_budget(settings.evaluations_per_restart, params)
            factors, fit_loss = _run_cma(
                objective, objective.to_x(start), fit, weights, settings, settings.seed,
                budget, previous is None,
            )  # fmt: skip
        else:  # from the simpler model's fit: a local solve is enough and much cheaper
            factors = _refine(objective, start, fit, settings)
            fit_loss = float(objective.per_episode([factors], fit).mean())
        held_loss = (
            float(objective.per_episode([factors], held_out).mean()) if held_out else math.nan
        )
        score = math.log(max(held_loss, 1e-12)) + 2 * len(params) / segments if held_out else None
        table.append({"model": name, "parameters": len(params), "fit_error": fit_loss,
                      "holdout_error": held_loss, "score": score,
                      "replays": objective.evaluations})  # fmt: skip
        fitted[name] = factors
        previous = objective.candidate(factors)
        if progress:
            progress(f"model {name} ({len(params)} parameters): fit error {fit_loss:.4f}, "
                     f"held-out {held_loss:.4f}")  # fmt: skip
    scored = [row for row in table if row["score"] is not None]
    chosen = min(scored, key=lambda row: row["score"])["model"] if scored else table[0]["model"]
    for row in table:
        row["chosen"] = row["model"] == chosen
    return chosen, fitted[chosen], table


def _factors_of(objective: _Objective, values: Mapping[str, float]) -> list[float]:
    """The factors of ``objective``'s parameters closest to absolute ``values`` (the mean
    ratio to nominal over each parameter's names), within its bounds."""
    out = []
    for p, names in zip(objective.parameters, objective.names, strict=True):
        if p.is_latency:
            value = values.get(LATENCY, objective.nominal.get(LATENCY, 0.0))
        else:
            ratios = [values[n] / objective.nominal[n] for n in names if n in values]
            value = float(np.exp(np.mean(np.log(ratios)))) if ratios else 1.0
        out.append(min(max(value, p.low), p.high))
    return out


def absolute_values(
    estimates: Sequence[ParameterEstimate], nominal: Mapping[str, float]
) -> dict[str, float]:
    """The identified model: identified values by name; the unidentifiable stay nominal."""
    values: dict[str, float] = {}
    for p in estimates:
        values.update(p.absolute(nominal))
    return values


MIN_OBJECT_TRAVEL = 0.002  # m: a cube that moved less was not pushed
MAX_CORRELATION = 0.95  # a pair this correlated is fixed only in combination


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


def spread_limits(parameters: Sequence[FitParameter], settings: FitSettings) -> np.ndarray:
    """The largest posterior spread a value may have, per parameter (steps, or log)."""
    return np.array([settings.max_spread_steps if p.is_latency else settings.max_spread_log
                     for p in parameters])  # fmt: skip


def against_the_data(
    parameters: Sequence[FitParameter],
    estimates: Sequence[ParameterEstimate],
    held: Collection[int],
    nominal: Sequence[float],
    fitted: Sequence[float],
    probes: np.ndarray,
    min_relative: float,
) -> set[int]:
    """Held parameters whose hold at nominal lies where their data exclude: nominal is at
    least a probe (``probes``) away from the fit's value, and the probe toward it raised
    the error by ``min_relative`` (a cube mass the data bound from below at x1.82, held at
    nominal). A nominal within a probe is within what the probes resolve (a damping of
    x0.97 held at 1)."""
    out = set()
    for i in held:
        if _local_distance(parameters[i], nominal[i], fitted[i]) < probes[i]:
            continue
        toward = 0 if nominal[i] < fitted[i] else 1  # probe_increase is (down, up)
        if estimates[i].probe_increase[toward] >= min_relative:
            out.add(i)
    return out


def follows_the_hold(
    parameters: Sequence[FitParameter],
    coupled,
    unconditional: Sequence[float],
    conditional: Sequence[float],
    errors: tuple[float, float],
    held: Collection[int],
    excluded_holds: Collection[int],
    kept: Sequence[int],
    limits: np.ndarray,
    min_relative: float,
    drawn: Collection[int] = (),
) -> tuple[dict[int, str], dict[int, tuple[float, str]]]:
    """What holding the parameters in ``held`` at nominal did to the kept ones coupled
    (``coupled(i, j)``) to a held one, where holding did not lower the fit error
    (``errors``: the fit's, the conditional fit's) by ``min_relative``. Holding that lowers
    the error corrects a search stuck in a valley (gains beside a damping that wandered
    off), and those values stand.

    Returns (kept index -> the reason it gets no value, kept index -> (the spread its
    slide adds, what it slid along)). A value that moved past its spread limit because a
    partner was held where the data exclude (``excluded_holds``) follows the hold, not the
    data: a cube mass bounded from below at x1.82, held at nominal, pushed the table's
    friction from x1.38 to x1.62 (truth x1). Where every hold is one the data allow, the
    value slides along a valley the data leave open: half that slide counts in its spread
    (gain against a latency the data bound only from above), so both ends lie within its
    95% range. Where each excluded partner is one the profile draws from a range
    (``drawn``), the profile never holds it at nominal: the value keeps its fit and
    ``across_the_prior`` judges it across that range instead (dropped, a per-joint elbow
    gain of x0.25 beside a damping the data leave loose was drawn from the prior's
    0.75..1.25)."""
    before, after = errors
    if after < before * (1.0 - min_relative):
        return {}, {}
    dropped, widened = {}, {}
    for k in kept:
        p = parameters[k]
        shift = _local_distance(p, conditional[k], unconditional[k])
        unit = "steps" if p.is_latency else "in log(factor)"
        partners = [h for h in sorted(held) if coupled(k, h)]
        if shift <= limits[k] or not partners:
            continue
        against = [h for h in partners if h in excluded_holds]
        held_against = [parameters[h].pattern for h in against if h not in drawn]
        if held_against:
            dropped[k] = (
                f"its value moved {shift:.2g} {unit} when {_names(held_against)} held at "
                "nominal where the data exclude it, and holding did not lower the error: "
                "the value follows the hold, not the data"
            )
        elif against:  # each drawn: across_the_prior judges the value over its range
            continue
        else:
            names = ", ".join(parameters[h].pattern for h in partners)
            widened[k] = (
                shift / 2,
                f"its value slides {shift:.2g} {unit} along a valley with {names} (which "
                "the data do not fix)",
            )
    return dropped, widened


def _widened(
    p: FitParameter, estimate: ParameterEstimate, slide: float, along: str, limit: float,
    slid_from: float,
) -> ParameterEstimate:  # fmt: skip
    """``estimate`` with ``slide`` (``along``: what it slid along, from ``slid_from``)
    counted in its spread; past ``limit`` it keeps no value, only the range the data bound,
    which reaches back to where it slid from."""
    own = estimate.spread or 0.0
    spread = max(own, slide)
    interval = _interval(p, estimate.value, spread)
    if spread <= limit:
        return dataclasses.replace(estimate, spread=spread, interval=interval)
    return dataclasses.replace(
        estimate, identifiable=False, value=None, spread=spread, interval=interval,
        bounded=_data_range(p, [estimate.value, slid_from], own),
        reason=f"{along}: its spread {spread:.2g} exceeds {limit:g}",
    )  # fmt: skip


def drawn_range(estimate: ParameterEstimate, prior) -> tuple[float, float] | None:
    """The range the profile draws a parameter without a value from: the one its data
    bound, else the prior's (``prior``: pattern -> (low, high)); None: it is not drawn.
    Within the search's box, where the fit can put it."""
    if estimate.identifiable:
        return None
    drawn = estimate.bounded if estimate.bounded is not None else prior.get(estimate.pattern)
    if drawn is None:
        return None
    return tuple(float(min(max(end, estimate.low), estimate.high)) for end in drawn)


def across_the_prior(
    objective, estimate, fit, settings, estimates, prior, limits
) -> dict[int, tuple[list[float], int, tuple[float, float]]]:
    """Values that do not hold across what the profile draws for their partners: a kept
    parameter coupled to one the profile draws from a range (``drawn_range``: its data's,
    else the prior's; ``prior``: pattern -> (low, high)) whose best value, refitted with
    that partner at either end of the range, moves by more than its limit. Returns kept
    index -> (its best values at the ends, the partner, the partner's drawn range). The
    quadratic checks are local: a cube mass flat at x0.55 let a table friction of x1.7
    stand (truth: friction x1, mass x2.5), a trade the probes around the fit do not see; so
    did a mass the data bound to 0.585..5. One least-squares refit of the partner's coupled
    values per end."""
    params = objective.parameters
    kept = [i for i, e in enumerate(estimates) if e.identifiable]
    found: dict[int, tuple[list[float], int, tuple[float, float], float]] = {}
    for d, e in enumerate(estimates):
        drawn = drawn_range(e, prior)
        if drawn is None:
            continue
        partners = [k for k in kept if _coupled(objective, k, d)]
        if not partners:
            continue
        held = [i for i in range(len(params)) if i not in partners]
        ends = []
        for end in drawn:
            start = list(estimate)
            start[d] = end
            ends.append(_refine(objective, start, fit, settings, held=held))
        for k in partners:
            values = [float(point[k]) for point in ends]
            shift = max(_local_distance(params[k], v, estimate[k]) for v in values)
            if shift > limits[k] and shift > found.get(k, ([], d, drawn, 0.0))[3]:
                found[k] = (values, d, drawn, shift)
    return {k: (values, d, drawn) for k, (values, d, drawn, _) in found.items()}


def _spans_the_prior(
    p: FitParameter, estimate: ParameterEstimate, ends: Sequence[float], partner: str,
    drawn: tuple[float, float], partner_at_fit: float,
) -> ParameterEstimate:  # fmt: skip
    """``estimate`` without a value, bounded by its best values (``ends``) across the range
    its ``partner`` is drawn from (``drawn``) and its own spread, and following that
    partner along the valley (``follows``: the partner at ``partner_at_fit`` in the fit)."""
    low, high = drawn
    shown = ", ".join(f"{v:.3g}" for v in ends)
    by_partner = {round(float(low), 6): float(ends[0]), round(float(high), 6): float(ends[1])}
    by_partner[round(float(partner_at_fit), 6)] = float(estimate.value)  # the fit leads
    points = sorted(by_partner.items())
    return dataclasses.replace(
        estimate, identifiable=False, value=None,
        bounded=_data_range(p, [estimate.value, *ends], estimate.spread or 0.0),
        follows={"partner": partner, "points": [list(point) for point in points]},
        reason=(
            f"its best value moves to {shown} as {partner}, which the data do not fix, "
            f"goes to the ends of the range ({low:.3g}..{high:.3g}) that the profile "
            "draws it from; the profile draws it along that valley"
        ),
    )  # fmt: skip


# A profile walks at most this many offsets each way: 1, 2, 4, ... probes. Each point
# refits the partners with at most PROFILE_REFINE least-squares iterations, half the
# fit's: the ends are a doubling apart anyway, and a profile has up to a dozen points.
PROFILE_DOUBLINGS = 6
PROFILE_REFINE = 3


def profile_range(
    objective, estimate, fit, settings, i: int, partners: Sequence[int]
) -> tuple[list[float], list[bool]]:
    """The range of parameter ``i`` over which the fit error, with its coupled
    ``partners`` refitted at each point (a profile of the error), stays within
    ``min_relative_increase`` of the estimate's. Walked from the estimate both ways in
    offsets of 1, 2, 4, ... probes; the first point past that rise, which the data
    exclude, ends the range, or else the search's box does. Returns the ends (low, high)
    and, per end, whether the data set it (False: the box).

    Why: a probe either side sees the error near the fit only. A Panda whose joints lag by
    14 steps and follow at a tenth of their gain had a latency the probes bound from above
    only (2 steps down raised the error by 0.5%); without a value it was drawn from the
    prior's 0..10 steps, and the adaptation trained for a latency the data exclude (0 steps:
    +24% error with the gain refitted)."""
    p = objective.parameters[i]
    held = [k for k in range(len(objective.parameters)) if k not in partners]
    step = _probe_sizes(objective, settings)[i]
    refit = dataclasses.replace(
        settings, refine_iterations=min(settings.refine_iterations, PROFILE_REFINE)
    )

    def error(point: Sequence[float]) -> float:
        return float(np.mean(objective.per_segment([point], fit)))

    limit = error(estimate) * (1.0 + settings.min_relative_increase)
    ends, by_data = [], []
    for sign in (-1.0, 1.0):
        end, excluded = (p.low if sign < 0 else p.high), False
        for doubling in range(PROFILE_DOUBLINGS):
            point = _moved(objective, estimate, {i: sign * step * 2**doubling})
            point[i] = float(min(max(point[i], p.low), p.high))
            if partners:
                point = _refine(objective, point, fit, refit, held=held)
            if error(point) > limit:
                end, excluded = point[i], True
                break
            if point[i] in (p.low, p.high):
                break
        ends.append(float(end))
        by_data.append(excluded)
    return ends, by_data


def _profiled(objective, estimate, fit, settings, estimates) -> list[ParameterEstimate]:
    """``estimates`` with every value the probes bound on one side only (``bound_side``)
    given the range its error profile allows (``profile_range``), its coupled partners that
    have a value refitted along it."""
    out = list(estimates)
    for i, e in enumerate(estimates):
        if e.bound_side is None or e.bounded is not None:
            continue
        partners = [
            k for k, other in enumerate(estimates)
            if other.identifiable and _coupled(objective, i, k)
        ]  # fmt: skip
        (low, high), by_data = profile_range(objective, estimate, fit, settings, i, partners)
        refitted = (
            f" with {', '.join(objective.parameters[k].pattern for k in partners)} refitted"
            if partners else ""
        )  # fmt: skip
        ends = " and ".join(
            f"{v:.3g}" + ("" if data else " (the search's box)")
            for v, data in zip((low, high), by_data, strict=True)
        )
        out[i] = dataclasses.replace(
            e, bounded=[low, high],
            reason=f"{e.reason}; along it{refitted}, the error stays within "
            f"{settings.min_relative_increase:.0%} of the fit's between {ends}",
        )  # fmt: skip
    return out


def _with_the_prior(
    parameters: Sequence[FitParameter], estimates: list[ParameterEstimate], prior
) -> list[ParameterEstimate]:
    """Each range set against the prior's for the same parameter (``prior``: pattern ->
    (low, high)). The narrower statement leads: a data range narrower than the prior's
    stands (a table friction of 1.40..1.92 beside 0.6..1.4). A wider one is cut to where
    both allow, since the prior bounds what the data leave open (a cube mass of 0.26..5
    beside 0.6..1.6). Where the prior's range does not hold the range's centre, the data
    win: the prior was chosen before the arm was seen, and a cut would leave out the fit's
    own value (a latency of 8.1..19.9, fitted near 14, cut to 8.1..10)."""
    out = []
    for p, e in zip(parameters, estimates, strict=True):
        wide = (prior or {}).get(p.pattern)
        if e.bounded is None or not wide:
            out.append(e)
            continue
        low, high = e.bounded
        if wide[0] <= low and high <= wide[1]:  # within the prior: nothing to set
            out.append(e)
            continue
        narrower = _local_distance(p, low, high) < _local_distance(p, *wide)
        centre = (low + high) / 2 if p.is_latency else math.sqrt(low * high)
        if not (narrower or centre < wide[0] or centre > wide[1]):
            both = [max(low, wide[0]), min(high, wide[1])]
            e = dataclasses.replace(
                e, bounded=both,
                reason=f"{e.reason}; the data allow {low:.3g}..{high:.3g}, wider than the "
                f"prior's {wide[0]:g}..{wide[1]:g}: drawn where both allow",
            )  # fmt: skip
        out.append(e)
    return out


def friction_floors(objective, estimate, estimates) -> list[ParameterEstimate]:
    """``estimates`` with each friction's ``decides_above``, and the reason where it has no
    value and its range (or the search's box, without one) reaches below that: MuJoCo
    gives a contact the larger of two geoms' frictions, so below it a cube's friction is the
    table's and no data can place it there (a cube at x0.4 of 0.6 on a table of 0.5 moves
    as one at x0.833)."""
    model = objective.simulator.reference.model
    sliding = model.geom_friction[:, 0].copy()
    for name, value in objective.candidate(estimate).items():
        kind, _, geom = name.partition(".")
        if kind == "friction":
            sliding[model.geom(geom).id] = value
    out = []
    for i, (p, names, e) in enumerate(
        zip(objective.parameters, objective.names, estimates, strict=True)
    ):
        if p.is_latency or not all(n.startswith("friction.") for n in names):
            out.append(e)
            continue
        geoms = [model.geom(n.partition(".")[2]).id for n in names]
        floor, decider = friction_floor(model, geoms, sliding)
        floor *= estimate[i]  # a factor on the fit's value -> on nominal
        if floor <= p.low:
            out.append(e)
            continue
        e = dataclasses.replace(e, decides_above=floor)
        reaches = e.bounded[0] if e.bounded is not None else p.low
        if not e.identifiable and reaches < floor:
            if math.isinf(floor):
                why = "no contact it can make takes its friction: no value simulates apart"
            else:
                who = model.geom(decider).name or model.body(model.geom_bodyid[decider]).name
                why = (
                    f"below x{floor:.3g} the {who}'s friction decides every contact it makes "
                    "(MuJoCo gives a contact the larger friction of its two geoms), so every "
                    "value below simulates the same"
                )
            e = dataclasses.replace(e, reason=f"{e.reason}; {why}" if e.reason else why)
        out.append(e)
    return out


def _local_distance(p: FitParameter, a: float, b: float) -> float:
    """|a - b| in the parameter's local coordinates (steps, or log factor), as probed."""
    return abs(a - b) if p.is_latency else abs(math.log(a / b))


def _names(patterns: Sequence[str]) -> str:
    if len(patterns) == 1:
        return f"{patterns[0]} was"
    return f"{', '.join(patterns[:-1])} and {patterns[-1]} were"


def _interval(p: FitParameter, value: float, spread: float | None) -> list[float] | None:
    """The 95% interval of a value with posterior spread ``spread`` (steps, or log)."""
    if spread is None:
        return None
    if p.is_latency:
        return [value - 1.96 * spread, value + 1.96 * spread]
    return [value * math.exp(-1.96 * spread), value * math.exp(1.96 * spread)]


def _data_range(p: FitParameter, values: Sequence[float], spread: float) -> list[float]:
    """The range covering ``values``, each with its 95% interval (``spread``: steps, or
    log), within the search's box: what a profile randomises over for a value the data bound
    but do not fix."""
    return [max(_interval(p, min(values), spread)[0], p.low),
            min(_interval(p, max(values), spread)[1], p.high)]  # fmt: skip


def partners_of_dropped(
    full_h: np.ndarray, kept: list[int], h: np.ndarray, limits: np.ndarray
) -> dict[int, tuple[int, float]]:
    """Kept parameters whose best value, given the others kept, moves by more than their
    limit when a parameter not kept moves by its probe ``h``: kept index -> (the dropped
    one, the shift). The conditional minimum of the kept set K moves by
    -H_KK^-1 H_Ki h_i (the local quadratic); repeated until no kept parameter follows one
    that is not kept, since a parameter left out makes its own partners suspect.

    A cross term is capped at sqrt(H_kk H_ii), what an error with a minimum allows: a
    partner whose own probes barely change the error cannot move a value far, and a
    corner replay through contact that says otherwise is noise (a latency fitted at the
    truth was dropped as following a table friction the data left flat)."""
    kept = list(kept)
    found: dict[int, tuple[int, float]] = {}
    curvature = np.clip(np.diag(full_h), 0.0, None)
    while kept:
        dropped = [i for i in range(len(h)) if i not in kept]
        if not dropped:
            break
        inverse = np.linalg.inv(full_h[np.ix_(kept, kept)])
        cap = np.sqrt(np.outer(curvature[kept], curvature[dropped]))
        cross = np.clip(full_h[np.ix_(kept, dropped)], -cap, cap)
        shifts = np.abs(inverse @ cross) * h[dropped]  # (K, D)
        worst = np.argmax(shifts, axis=1)
        moving = {
            kept[k]: (dropped[int(worst[k])], float(shifts[k, worst[k]]))
            for k in range(len(kept))
            if shifts[k, worst[k]] > limits[kept[k]]
        }
        if not moving:
            break
        found.update(moving)
        kept = [k for k in kept if k not in moving]
    return found


def not_at_minimum(
    objective,
    estimate,
    model: _LocalModel,
    base: float,
    min_relative: float,
    held: Collection[int] = (),
) -> str:
    """Why the fit is not at a minimum ("" when it is): a single probe inside the search's
    box that lowers the mean fit error by ``min_relative`` of it means the search stopped on
    a slope, and no value of such a fit is given. (A probe past the box is the bound's
    business: a factor the data push there gets no value either.) Parameters in ``held``
    are not moved."""
    drops = [(0.0, 0, 0)]
    for i, p in enumerate(objective.parameters):
        if i in held:  # held at nominal on purpose (a conditional fit)
            continue
        for k in (0, 1):
            moved = _moved(objective, estimate, {i: model.sides[i][k]})[i]
            if p.low <= moved <= p.high:
                drops.append((float(base - np.mean(model.losses[1 + 2 * i + k])), i, k))
    drop, i, k = max(drops)
    if drop < min_relative * base:
        return ""
    p = objective.parameters[i]
    offset = model.sides[i][k]
    probe = f"{offset:+g} steps" if p.is_latency else f"×{math.exp(offset):.2f}"
    return (
        f"the fit did not reach a minimum (moving {p.pattern} {probe} lowers the error by "
        f"{drop / max(base, 1e-12):.1%}); a larger search budget may reach it (`simreal "
        "sysid --evaluations`, the learner's sysid.evaluations)"
    )


def curvature_by_sign(curvatures: np.ndarray) -> float:
    """How reliably the segments' curvatures are positive, on the scale of a t statistic:
    the one-sided Wilcoxon signed-rank test of the segments that respond at all (those at
    zero, or within 1e-9 of the largest, change nothing), as the standard normal quantile
    of its p value. Ranks, not sizes: one pushed segment whose error falls 100-fold must not
    make fifteen others that agree look like noise. Fewer than 6 responding segments cannot
    reach 2.0 (5 all curving up: exact p 1/32, 1.86)."""
    c = np.asarray(curvatures, dtype=float)
    scale = float(np.max(np.abs(c))) if c.size else 0.0
    responding = c[np.abs(c) > 1e-9 * scale] if scale > 0 else c[:0]
    if responding.size == 0:
        return 0.0
    p = float(wilcoxon(responding, alternative="greater").pvalue)
    return float(norm.isf(min(max(p, 1e-300), 1.0)))


def one_sided_bound(increases: Sequence[float], base: float, min_relative: float) -> str:
    """Why a value is only bounded, or "" when both probes (down, up) raise the error by
    ``min_relative`` of ``base``. A side that does not (the cube's friction under the
    table's, where MuJoCo takes the larger of a contact's two) bounds the value without
    fixing it."""
    down, up = increases
    if min(down, up) >= min_relative * base:
        return ""
    low = down < up
    return (
        f"the error rises when it moves {'up' if low else 'down'} but not "
        f"{'down' if low else 'up'} (by {min(down, up) / max(base, 1e-12):+.1%}): the data "
        f"bound it from {'above' if low else 'below'}, they do not fix it"
    )


def _with_cross_terms(objective, estimate, fit, model: _LocalModel, kept: list[int]):
    """The mean Hessian with every (kept, dropped) cross term measured: the local model
    probes corners only for the pairs coupled by kind, but a value given must not depend
    on any parameter left without one (a cube mass that absorbs an unfixed latency). One
    corner replay per missing pair."""
    full_h = model.hess.mean(axis=0)
    grad = model.grad.mean(axis=0)
    probed = {frozenset(pair) for pair in model.pairs}
    dropped = [i for i in range(len(model.h)) if i not in kept]
    missing = [(k, d) for k in kept for d in dropped if frozenset((k, d)) not in probed]
    if not missing:
        return full_h
    up = [side[1] for side in model.sides]
    points = [_moved(objective, estimate, {k: up[k], d: up[d]}) for k, d in missing]
    losses = objective.per_segment(points, fit)
    rise = np.where(np.isfinite(losses), losses, 1e12).mean(axis=1) - model.center.mean()
    full_h = full_h.copy()
    for (k, d), dc in zip(missing, rise, strict=True):
        ck, cd = up[k], up[d]
        rest = dc - grad[k] * ck - grad[d] * cd
        rest -= 0.5 * (full_h[k, k] * ck**2 + full_h[d, d] * cd**2)
        full_h[k, d] = full_h[d, k] = rest / (ck * cd)
    return full_h


def _identifiability(objective, estimate, restarts, fit, settings, travel, held=None):
    """Per parameter: identifiable or not (with the reason), its posterior spread, and the
    correlations of the coupled pairs.

    A quadratic model of each fit segment's error around the estimate (a probe either side
    per parameter, one corner per coupled pair) gives per-segment gradients and Hessians.
    Segments restart from the recording, so their errors are close to independent: the
    spread is the sandwich estimate sqrt(diag(H^-1 Cov(g) H^-1)), H the mean Hessian and
    Cov(g) the covariance of the mean gradient over segments. A parameter whose curvature is
    not 2 standard errors above 0, or whose error rise at the probe is below
    ``min_relative_increase``, is flat; a coupled pair with |correlation| (of H^-1) above
    MAX_CORRELATION trades off; either gets no value, as does one whose best value follows
    a parameter without one (``partners_of_dropped``), one whose spread exceeds the
    settings' maximum or whose restarts disagree. ``held``: parameter index -> the reason it
    has no value, for a conditional fit that holds them at nominal (they are not judged
    again).
    """
    held = dict(held or {})
    params = objective.parameters
    count = len(params)
    model = _local_model(objective, estimate, fit, settings)
    h, losses, center, grad, hess = model.h, model.losses, model.center, model.grad, model.hess
    pairs, segments = model.pairs, len(center)
    full_h = hess.mean(axis=0)
    base = float(np.mean(center))
    reasons: dict[int, list[str]] = {i: [] for i in range(count)}
    one_sided: dict[int, str] = {}
    unsettled = not_at_minimum(
        objective, estimate, model, base, settings.min_relative_increase, held=held
    )

    # Flat: the curvature is not reliably positive over segments, or the error barely rises.
    curved = []
    for i, p in enumerate(params):
        if i in held:
            reasons[i].append(held[i])
            continue
        rise = 0.5 * full_h[i, i] * h[i] ** 2
        t = full_h[i, i] / max(hess[:, i, i].std() / math.sqrt(segments), 1e-300)
        # Contact: a few segments push the cube, and their curvature is most of the total,
        # so the t statistic stays near sqrt(their count) however well they agree; their
        # signs are the evidence (curvature_by_sign).
        t = max(t, curvature_by_sign(hess[:, i, i]))
        sides = [float(np.mean(losses[1 + 2 * i + k] - center)) for k in (0, 1)]
        two_sided = model.sides[i][0] < 0  # the latency at its floor is probed one way
        bound = one_sided_bound(sides, base, settings.min_relative_increase) if two_sided else ""
        if t > 2.0 and rise >= settings.min_relative_increase * base and not bound:
            curved.append(i)
        elif t > 2.0 and bound:
            reasons[i].append(bound)
            one_sided[i] = "above" if sides[0] < sides[1] else "below"
        else:
            probe = (
                f"±{settings.probe_steps} steps"
                if p.is_latency
                else (f"×{settings.probe_factor:.2f}")
            )
            reasons[i].append(
                f"moving it by {probe} does not change the replay error reliably (rise "
                f"{rise / max(base, 1e-12):+.1%} of the error, curvature {t:.1f} standard "
                "errors above 0)"
                + (
                    f"; the cube moved at most {travel * 1e3:.0f} mm"
                    if _is_contact(p.pattern)
                    else ""
                )
            )
    correlations = []
    for i, j in pairs:
        if i in curved and j in curved:
            rho = float(-full_h[i, j] / math.sqrt(full_h[i, i] * full_h[j, j]))
            correlations.append({"a": params[i].pattern, "b": params[j].pattern,
                                 "correlation": rho})  # fmt: skip
            if abs(rho) > MAX_CORRELATION:
                loose = looser_of_pair(full_h, i, j, h)
                other = j if loose == i else i
                reasons[loose].append(
                    f"trades off against {params[other].pattern} (posterior correlation "
                    f"{rho:+.2f}): the data fix only their combination, and it moves most "
                    "along it"
                )
    kept = [i for i in curved if not reasons[i]]
    # Jointly: while the kept parameters' Hessian has a direction without a minimum, the
    # parameter that moves most along it is left without a value.
    while kept:
        direction = _flat_direction(full_h, kept, h)
        if direction is None:
            break
        worst = kept[int(np.argmax(np.abs(direction)))]
        partners = [
            params[kept[k]].pattern
            for k in np.argsort(-np.abs(direction))[1:3]
            if abs(direction[k]) > 0.3
        ]
        reasons[worst].append(
            "the error has no minimum along a combination of it"
            + (f" with {', '.join(partners)}" if partners else "")
        )
        kept.remove(worst)
    # A kept parameter whose best value moves with a dropped one's (held at nominal in the
    # identified model, whatever the arm's value) is not fixed by the data either. It is
    # bounded: a partner the data do not fix is uncertain by at least a probe, so the shift
    # per probe counts as its spread.
    limits = spread_limits(params, settings)
    coupling = _with_cross_terms(objective, estimate, fit, model, kept)
    follows: dict[int, float] = {}
    for j, (i, shift) in partners_of_dropped(coupling, kept, h, limits).items():
        unit = "steps" if params[j].is_latency else "in log(factor)"
        reasons[j].append(
            f"its best value moves {shift:.2g} {unit} when {params[i].pattern}, which the "
            "data do not fix, moves one probe"
        )
        kept.remove(j)
        follows[j] = shift
    spread = np.full(count, np.nan)
    if kept:
        # Sandwich: the minimum moves by -H^-1 g; g's covariance from the segments.
        inverse = np.linalg.inv(full_h[np.ix_(kept, kept)])
        gradient_cov = np.atleast_2d(np.cov(grad[:, kept], rowvar=False)) / segments
        spread[kept] = np.sqrt(np.diag(inverse @ gradient_cov @ inverse))
    if unsettled:  # every value of a fit that is not at a minimum is suspect
        for i in range(count):
            if i not in held:
                reasons[i].insert(0, unsettled)
    if travel < MIN_OBJECT_TRAVEL:
        for i, p in enumerate(params):
            if _is_contact(p.pattern) and i not in held:
                reasons[i].insert(
                    0,
                    f"the cube never moved (at most {travel * 1e3:.1f} mm in any fit "
                    "episode): nothing constrains its mass or friction",
                )
    out = []
    for i, p in enumerate(params):
        values = [r[i] for r in restarts]
        if p.is_latency:
            agree = max(values) - min(values) <= 2 * settings.probe_steps
            std = float(np.std(values))
            limit = settings.max_spread_steps
        else:
            logs = np.log(values)
            agree = float(np.exp(logs.max() - logs.min())) <= settings.probe_factor**2
            std = float(np.std(logs))
            limit = settings.max_spread_log
        if not agree and i not in held:  # a held one's reason already says it
            reasons[i].append(f"restarts disagree ({', '.join(f'{v:.3g}' for v in values)})")
        at_bound = (
            i not in held
            and not p.is_latency
            and min(abs(math.log(estimate[i] / p.low)), abs(math.log(p.high / estimate[i]))) < 0.01
        )
        if at_bound:  # the data push it past the box: the box, not the data, set it
            reasons[i].append(f"at the search's bound ({p.low:g}..{p.high:g})")
        s = float(spread[i]) if np.isfinite(spread[i]) else None
        value = float(estimate[i])
        bounded = None
        if s is not None and s > limit and not reasons[i]:
            unit = "steps" if p.is_latency else "in log(factor)"
            reasons[i].append(f"posterior spread {s:.3g} {unit} exceeds {limit:g}")
            bounded = _data_range(p, [value], s)
        elif i in follows and len(reasons[i]) == 1:  # following a partner, nothing else
            bounded = _data_range(p, [value], follows[i])
        identifiable = not reasons[i]
        interval = _interval(p, value, s)
        increases = [float(np.mean(losses[1 + 2 * i + k] - center) / max(base, 1e-12))
                     for k in (0, 1)]  # fmt: skip
        out.append(
            ParameterEstimate(
                pattern=p.pattern,
                names=objective.names[i],
                identifiable=identifiable,
                value=value if identifiable else None,
                std=std,
                restart_values=[float(v) for v in values],
                low=p.low,
                high=p.high,
                probe_increase=increases,
                reason="; ".join(reasons[i]),
                spread=s,
                interval=interval,
                bounded=bounded,
                bound_side=one_sided.get(i) if len(reasons[i]) == 1 else None,
            )
        )
    return out, correlations


def _noise_ci(residuals, rng) -> tuple[float, float]:
    if len(residuals) < 2:
        return (float("nan"), float("nan"))
    draws = []
    for _ in range(200):
        pick = rng.integers(0, len(residuals), len(residuals))
        draws.append(noise_estimate([residuals[i] for i in pick]))
    return (float(np.percentile(draws, 2.5)), float(np.percentile(draws, 97.5)))

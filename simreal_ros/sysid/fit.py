"""Fit the simulator's dynamics to recorded episodes: CMA-ES over a bounded parameterisation.

``identify(episodes, parameters=DEFAULT_PARAMETERS, ...) -> SysidResult``

Where the parts live: the parameterisation, settings and result in ``parameters``; the
objective and its CMA-ES run in ``search``; the local model, least squares and compass
search in ``polish``; the identifiability checks in ``identifiability``; the choice among
parameterisations in ``model_selection``.

Search: CMA-ES (the ``cma`` package) on the trajectory error of ``ReplaySimulator``,
averaged over the fit episodes, with the bounds as box constraints and the latency as an
integer variable. Restart 0 fits all fit episodes from the nominal model, restart 1 from
a random point of the box (two parameters that trade against each other land elsewhere
on their ridge); each further restart fits a bootstrap resample of the episodes from the
estimate with half the step size. Every restart is then judged on all fit episodes: the
best is the estimate, and the spread of those within ``restart_tolerance`` of its error
measures what the data leave open (the uncertainty).

The measurement noise is estimated from the residuals at the estimate
(``noise_estimate``), its uncertainty from a bootstrap over episodes.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence

import numpy as np

from simreal_ros.robot.description_record import RobotDescription
from simreal_ros.sysid.identifiability import (
    _identifiability,
    _profiled,
    _spans_the_prior,
    _widened,
    _with_the_prior,
    across_the_prior,
    against_the_data,
    drawn_range,
    follows_the_hold,
    friction_floors,
    spread_limits,
)
from simreal_ros.sysid.parameters import (
    DEFAULT_PARAMETERS,
    LATENCY,
    ErrorReport,
    FitParameter,
    FitSettings,
    SysidResult,
    absolute_values,
)
from simreal_ros.sysid.polish import _coupled, _probe_sizes, _refine, _settle
from simreal_ros.sysid.recording import ReplayEpisode
from simreal_ros.sysid.search import (
    _nominal_factors,
    _Objective,
    _run_cma,
    search_budget,
    split_holdout,
)
from simreal_ros.sysid.simulate import ReplaySimulator, noise_estimate, object_travel


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


def _noise_ci(residuals, rng) -> tuple[float, float]:
    if len(residuals) < 2:
        return (float("nan"), float("nan"))
    draws = []
    for _ in range(200):
        pick = rng.integers(0, len(residuals), len(residuals))
        draws.append(noise_estimate([residuals[i] for i in pick]))
    return (float(np.percentile(draws, 2.5)), float(np.percentile(draws, 97.5)))

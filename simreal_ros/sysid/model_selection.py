"""Model selection: the candidate parameterisations, simplest first, and the choice among
them by held-out error with a complexity penalty."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from simreal_ros.sysid.parameters import DEFAULT_PARAMETERS, LATENCY, FitParameter, FitSettings
from simreal_ros.sysid.polish import _refine
from simreal_ros.sysid.recording import ReplayEpisode
from simreal_ros.sysid.search import (
    _nominal_factors,
    _Objective,
    _run_cma,
    search_budget,
    split_holdout,
)
from simreal_ros.sysid.simulate import ReplaySimulator


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

"""What the data fix: per parameter a value with its spread, or the reason it has none
and the range the data bound it to.

Identifiability, per parameter, at the estimate: moving it by ``probe_factor`` (latency:
``probe_steps``) either way must raise the error of the fit episodes, paired per episode,
with the 95% bootstrap lower bound above zero and by at least ``min_relative_increase``
of the error; and the restarts must agree within ``probe_factor`` squared. A parameter
that fails either is reported unidentifiable, with no value.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Sequence

import numpy as np
from scipy.stats import norm, wilcoxon

from simreal_ros.sim.physics import friction_floor
from simreal_ros.sysid.parameters import FitParameter, FitSettings, ParameterEstimate
from simreal_ros.sysid.polish import (
    _coupled,
    _flat_direction,
    _is_contact,
    _local_model,
    _LocalModel,
    _moved,
    _probe_sizes,
    _refine,
    looser_of_pair,
)

MIN_OBJECT_TRAVEL = 0.002  # m: a cube that moved less was not pushed
MAX_CORRELATION = 0.95  # a pair this correlated is fixed only in combination


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

"""What a fit searches and what it reports: the parameterisation, the settings, the
estimates and the result.

Parameterisation (``FitParameter``): each entry is a name or pattern of the profile
vocabulary (``simreal_ros.sim.physics``). A scale entry (``gain.*``, ``mass.cube``, ...)
is one factor on the nominal value of every parameter it matches, searched in log space
between its bounds; ``latency_steps`` is a whole number of physics steps. The default
groups the per-joint gains and dampings into one factor each (seven numbers in all),
which ten short episodes determine; ``per_joint_parameters`` gives one factor per joint.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from simreal_ros.sysid.simulate import DEFAULT_SEGMENT_TICKS

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


def absolute_values(
    estimates: Sequence[ParameterEstimate], nominal: Mapping[str, float]
) -> dict[str, float]:
    """The identified model: identified values by name; the unidentifiable stay nominal."""
    values: dict[str, float] = {}
    for p in estimates:
        values.update(p.absolute(nominal))
    return values

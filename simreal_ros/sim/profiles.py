"""Dynamics profiles: nominal, randomized (domain randomization), the real_twin stand-in.

A profile is a YAML file (see ``config/profiles/`` for the format): ``scale`` multiplies
nominal values, ``set`` gives values; each entry is a number (fixed) or a ``[low, high]``
range drawn uniformly per reset; ``tied`` draws a parameter along a valley with another
(identification writes it where the data fix only their combination). A shipped profile
is named (``nominal``, ``randomized``, ``real_twin``, ``real_twin_mild``,
``real_twin_panda``, the second engine's ``drake_clean`` and ``drake_worn``, and the
camera's ``visual_shift``); any other is given by its path, so a user can describe their
own arm's gap. A ``visual:`` section (``sim.visuals.VisualSettings``) changes how the scene
looks to a camera policy, and nothing of its physics. A profile with ``stand_in: true``
(``real_twin``: a fixed, hidden gap outside the randomized ranges) plays the physical arm
and is never called real.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import itertools
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from simreal_ros import resources
from simreal_ros.sim.effects import EngineEffects, effects_from_mapping

ENGINES = ("mujoco", "drake")

# The shipped profiles, by name; any other profile is a YAML path.
PROFILE_NAMES = (
    "nominal",
    "randomized",
    "real_twin",
    "real_twin_mild",
    "real_twin_panda",
    "drake_clean",
    "drake_worn",
    "visual_shift",
)


def profiles_dir() -> Path:
    """Where the profile YAMLs are: $SIMREAL_PROFILES_DIR, else config/profiles of the
    checkout or the install (``resources.data_root``)."""
    override = os.environ.get("SIMREAL_PROFILES_DIR")
    if override:
        return Path(override)
    directory = resources.data_path("config", "profiles")
    if directory.is_dir():
        return directory
    raise FileNotFoundError(
        f"dynamics profiles not found in {directory}: set SIMREAL_PROFILES_DIR to the "
        "config/profiles folder of simreal_ros, or reinstall the package."
    )


Entry = float | tuple[float, float]


@dataclasses.dataclass(frozen=True)
class Tie:
    """A parameter drawn along a valley with a partner: at each of the partner's drawn
    values it takes the piecewise-linear interpolation of ``points`` ((partner, own), the
    partner's increasing; in log space for a ``scale`` entry, in steps for a ``set`` one),
    held at the ends, then kept within its own entry's range."""

    partner: str
    points: tuple[tuple[float, float], ...]

    def value(self, partner_value: float, log_partner: bool, log_own: bool) -> float:
        xs = np.array([p[0] for p in self.points])
        ys = np.array([p[1] for p in self.points])
        x = math.log(partner_value) if log_partner else partner_value
        y = np.interp(x, np.log(xs) if log_partner else xs, np.log(ys) if log_own else ys)
        return float(math.exp(y) if log_own else y)


@dataclasses.dataclass(frozen=True)
class DynamicsProfile:
    """Named dynamics changes relative to the nominal model."""

    name: str
    scale: Mapping[str, Entry]
    set: Mapping[str, Entry]
    randomize_each_reset: bool = False
    stand_in: bool = False  # plays the physical arm (a fixed, hidden gap); never "real"
    tied: Mapping[str, Tie] = dataclasses.field(default_factory=dict)
    # The physics engine: "mujoco" (the project's simulator) or "drake" (a second engine,
    # for stand-ins outside the simulator's family), and the second engine's effects.
    engine: str = "mujoco"
    effects: EngineEffects = dataclasses.field(default_factory=EngineEffects)
    # How the scene looks to a camera (sim.visuals.VisualSettings); None: the scene's own.
    visual: Any = None

    @property
    def is_stand_in(self) -> bool:
        return self.stand_in

    def sample(self, nominal: Mapping[str, float], rng: np.random.Generator) -> dict[str, float]:
        """Absolute dynamics values for one episode, from the nominal values. Where patterns
        overlap, the narrowest (fewest matches; a tie to the later) sets a parameter,
        whatever their order: ``gain.*`` beside ``gain.elbow_joint`` leaves the elbow's."""
        matched: dict[str, list[str]] = {}
        for pattern in self.scale:
            matched[pattern] = [name for name in nominal if fnmatch.fnmatchcase(name, pattern)]
            if not matched[pattern]:
                raise ValueError(
                    f"profile {self.name}: scale key {pattern!r} matches no dynamics "
                    f"parameter; known: {', '.join(nominal)}."
                )
        owner: dict[str, str] = {}
        for pattern, names in matched.items():
            for name in names:
                if name not in owner or len(names) <= len(matched[owner[name]]):
                    owner[name] = pattern
        values: dict[str, float] = {}
        drawn: dict[str, float] = {}  # per key: the factor (scale) or value (set) drawn
        # A tie's partner is one factor for all its names, as the fit that found the valley
        # moved them; other patterns draw each name on its own.
        partners = {tie.partner for tie in self.tied.values()}
        for pattern, entry in self.scale.items():
            for name in matched[pattern]:
                factor = _draw(entry, rng)  # drawn either way: the stream stays per pattern
                if pattern in partners and pattern in drawn:
                    factor = drawn[pattern]
                drawn[pattern] = factor
                if owner[name] == pattern:
                    values[name] = nominal[name] * factor
        for name, entry in self.set.items():
            drawn[name] = _draw(entry, rng)
        for key, tie in self.tied.items():  # partners are never tied themselves
            own = self.scale if key in self.scale else self.set
            entry = own[key]
            value = tie.value(drawn[tie.partner], tie.partner in self.scale, own is self.scale)
            if isinstance(entry, tuple):
                value = min(max(value, entry[0]), entry[1])
            drawn[key] = value
            for name in matched.get(key, ()):
                if owner[name] == key:
                    values[name] = nominal[name] * value
        for name in self.set:
            value = drawn[name]
            values[name] = float(round(value)) if name == "latency_steps" else value
        return values


def _draw(entry: Entry, rng: np.random.Generator) -> float:
    if isinstance(entry, tuple):
        return float(rng.uniform(entry[0], entry[1]))
    return float(entry)


def _ties(raw, path: Path, scale: Mapping[str, Entry], values: Mapping[str, Entry]):
    """``tied:`` checked: each key and partner an entry of ``scale`` or ``set``, no chains,
    at least two finite points with increasing partner values (positive for a scale)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: tied must be a mapping of name: {{with: partner, points}}.")
    ties: dict[str, Tie] = {}
    for key, spec in raw.items():
        where = f"{path}: tied.{key}"
        if key not in scale and key not in values:
            raise ValueError(f"{where}: {key!r} is not in scale or set; add its entry there.")
        if not isinstance(spec, dict) or set(spec) != {"with", "points"}:
            raise ValueError(f"{where} must be {{with: partner, points: [[x, y], ...]}}.")
        partner = str(spec["with"])
        if (partner not in scale and partner not in values) or partner == key:
            raise ValueError(f"{where}: partner {partner!r} must be another entry of scale "
                             "or set.")  # fmt: skip
        if partner in raw:
            raise ValueError(f"{where}: partner {partner!r} is tied itself; tie both to one.")
        try:
            points = tuple((float(x), float(y)) for x, y in spec["points"])
        except (TypeError, ValueError):
            points = ()
        xs = [x for x, _ in points]
        factors = xs * (partner in scale) + [y for _, y in points] * (key in scale)
        if (
            len(points) < 2
            or not np.isfinite(points).all()
            or any(b <= a for a, b in itertools.pairwise(xs))
            or any(v <= 0 for v in factors)
        ):
            raise ValueError(
                f"{where}: points must be two or more [partner, own] pairs of finite numbers, "
                "the partner's increasing (and above 0 for a scale factor)."
            )
        ties[str(key)] = Tie(partner, points)
    return ties


def _entries(raw, path: Path, section: str) -> dict[str, Entry]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: {section} must be a mapping of name: value or [low, high].")
    entries: dict[str, Entry] = {}
    for name, value in raw.items():
        if isinstance(value, list) and len(value) == 2:
            low, high = float(value[0]), float(value[1])
            if low > high:
                raise ValueError(f"{path}: {section}.{name} has low {low} > high {high}.")
            entries[str(name)] = (low, high)
        elif isinstance(value, int | float) and not isinstance(value, bool):
            entries[str(name)] = float(value)
        else:
            raise ValueError(
                f"{path}: {section}.{name} = {value!r}; give a number or [low, high]."
            )
    return entries


def load_profile_file(path: Path) -> DynamicsProfile:
    with open(path, encoding="utf-8") as stream:
        raw = yaml.safe_load(stream) or {}
    if not isinstance(raw, dict) or "profile" not in raw:
        raise ValueError(f"{path}: a dynamics profile needs a 'profile:' name at the top.")
    engine = str(raw.get("engine", "mujoco"))
    if engine not in ENGINES:
        raise ValueError(f"{path}: engine {engine!r}; use one of {', '.join(ENGINES)}.")
    if raw.get("effects") is not None and engine == "mujoco":
        raise ValueError(
            f"{path}: effects need a second engine (engine: drake); MuJoCo profiles express "
            "their gap with scale: and set:."
        )
    scale = _entries(raw.get("scale"), path, "scale")
    values = _entries(raw.get("set"), path, "set")
    return DynamicsProfile(
        name=str(raw["profile"]),
        scale=scale,
        set=values,
        randomize_each_reset=bool(raw.get("randomize_each_reset", False)),
        stand_in=bool(raw.get("stand_in", False)),
        tied=_ties(raw.get("tied"), path, scale, values),
        engine=engine,
        effects=effects_from_mapping(raw.get("effects"), str(path)),
        visual=_visual(raw.get("visual"), path, engine),
    )


def _visual(raw: Any, path: Path, engine: str):
    """A profile's ``visual:`` section (``sim.visuals.VisualSettings``'s fields)."""
    if raw is None:
        return None
    from simreal_ros.sim.visuals import VisualSettings

    if not isinstance(raw, dict):
        raise ValueError(f"{path}: visual must be a mapping of VisualSettings fields.")
    if engine != "mujoco":
        raise ValueError(f"{path}: visual needs the MuJoCo renderer (engine: mujoco).")
    try:
        return VisualSettings.from_dict(raw)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{path}: {error}") from None


def profile_path(name_or_path: str | Path) -> Path:
    """The YAML file of a shipped profile name or a path; ValueError saying what to give."""
    text = str(name_or_path)
    if text in PROFILE_NAMES:
        return profiles_dir() / f"{text}.yaml"
    path = Path(text).expanduser()
    if path.suffix in (".yaml", ".yml"):
        if path.is_file():
            return path
        raise ValueError(f"dynamics profile file {text!r} does not exist; check the path.")
    raise ValueError(
        f"unknown dynamics profile {text!r}; use one of {', '.join(PROFILE_NAMES)} "
        "or the path of a profile YAML (see config/profiles/ for the format)."
    )


def load_profile(name_or_path: str | Path) -> DynamicsProfile:
    """A profile by name (see ``PROFILE_NAMES``) or from a YAML path."""
    return load_profile_file(profile_path(name_or_path))


def check_profile(name_or_path: str) -> str:
    """The profile argument unchanged once it loads; ValueError naming what is wrong."""
    load_profile(name_or_path)
    return str(name_or_path)


def is_stand_in(name_or_path: str) -> bool:
    """Whether a profile plays the physical arm (its file says ``stand_in: true``)."""
    try:
        return load_profile(name_or_path).is_stand_in
    except (ValueError, OSError):
        return False

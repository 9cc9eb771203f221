"""Dynamics profiles: nominal, randomized (domain randomization), the real_twin stand-in.

A profile is a YAML file (see ``config/profiles/`` for the format): ``scale`` multiplies
nominal values, ``set`` gives values; each entry is a number (fixed) or a ``[low, high]``
range drawn uniformly per reset. A shipped profile is named (``nominal``, ``randomized``,
``real_twin``, ``real_twin_mild``, ``real_twin_panda``); any other is given by its path,
so a user can describe their own arm's gap. A profile with ``stand_in: true``
(``real_twin``: a fixed, hidden gap outside the randomized ranges) plays the physical arm
and is never called real.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import yaml

from simreal_ros import resources

# The shipped profiles, by name; any other profile is a YAML path.
PROFILE_NAMES = ("nominal", "randomized", "real_twin", "real_twin_mild", "real_twin_panda")


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
class DynamicsProfile:
    """Named dynamics changes relative to the nominal model."""

    name: str
    scale: Mapping[str, Entry]
    set: Mapping[str, Entry]
    randomize_each_reset: bool = False
    stand_in: bool = False  # plays the physical arm (a fixed, hidden gap); never "real"

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
        for pattern, entry in self.scale.items():
            for name in matched[pattern]:
                factor = _draw(entry, rng)  # drawn either way: the stream stays per pattern
                if owner[name] == pattern:
                    values[name] = nominal[name] * factor
        for name, entry in self.set.items():
            value = _draw(entry, rng)
            values[name] = float(round(value)) if name == "latency_steps" else value
        return values


def _draw(entry: Entry, rng: np.random.Generator) -> float:
    if isinstance(entry, tuple):
        return float(rng.uniform(entry[0], entry[1]))
    return float(entry)


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
    return DynamicsProfile(
        name=str(raw["profile"]),
        scale=_entries(raw.get("scale"), path, "scale"),
        set=_entries(raw.get("set"), path, "set"),
        randomize_each_reset=bool(raw.get("randomize_each_reset", False)),
        stand_in=bool(raw.get("stand_in", False)),
    )


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

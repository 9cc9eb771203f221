"""Dynamics profiles: nominal, randomized (domain randomization) and real_twin.

A profile is a YAML file in ``config/profiles/`` (see the files for the format): ``scale``
multiplies nominal values, ``set`` gives values; each entry is a number (fixed) or a
``[low, high]`` range drawn uniformly per reset. ``real_twin`` is a fixed, hidden gap of
the same kinds and is a stand-in for the physical arm, never the physical arm itself.
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

PROFILE_NAMES = ("nominal", "randomized", "real_twin")


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

    @property
    def is_stand_in(self) -> bool:
        """True for real_twin: the stand-in for the physical arm (never called real)."""
        return self.name == "real_twin"

    def sample(self, nominal: Mapping[str, float], rng: np.random.Generator) -> dict[str, float]:
        """Absolute dynamics values for one episode, from the nominal values."""
        values: dict[str, float] = {}
        for pattern, entry in self.scale.items():
            matches = [name for name in nominal if fnmatch.fnmatchcase(name, pattern)]
            if not matches:
                raise ValueError(
                    f"profile {self.name}: scale key {pattern!r} matches no dynamics "
                    f"parameter; known: {', '.join(nominal)}."
                )
            for name in matches:
                values[name] = nominal[name] * _draw(entry, rng)
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
    )


def load_profile(name_or_path: str | Path) -> DynamicsProfile:
    """A profile by name (nominal, randomized, real_twin) or from a YAML path."""
    text = str(name_or_path)
    if text in PROFILE_NAMES:
        return load_profile_file(profiles_dir() / f"{text}.yaml")
    path = Path(text)
    if path.suffix in (".yaml", ".yml") and path.exists():
        return load_profile_file(path)
    raise ValueError(
        f"unknown dynamics profile {text!r}; use one of {', '.join(PROFILE_NAMES)} "
        "or the path of a profile YAML."
    )

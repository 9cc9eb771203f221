"""Typed configuration declared once: dataclass fields carry description and range.

Core code validates a config at construction; nodes turn the same fields into ROS
parameters with descriptors (see ``simreal_ros.nodes.params``), so ``ros2 param describe``
and rqt_reconfigure show the description and range, and YAML files need not repeat defaults.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any


def setting(
    default: Any,
    description: str,
    *,
    low: float | None = None,
    high: float | None = None,
    choices: tuple[str, ...] | None = None,
    dynamic: bool = False,
    unit: str = "",
) -> Any:
    """A config field with the metadata that validation and ROS parameters need.

    A setting is fixed at start-up (a read-only ROS parameter) unless ``dynamic``: then a
    node applies a change at run time (``rqt_reconfigure``, ``ros2 param set``), validated
    like the start-up value, or refuses it with the reason. Mark ``dynamic`` only what the
    code reads at the time of use and a change cannot make unsafe.
    """
    metadata = {
        "description": description,
        "low": low,
        "high": high,
        "choices": choices,
        "dynamic": dynamic,
        "unit": unit,
    }
    if isinstance(default, list | dict):
        factory = lambda d=default: type(d)(d)  # noqa: E731 - a fresh copy per instance
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def shared_setting(owner: type, name: str, default: Any) -> Any:
    """A field that sets ``owner``'s setting ``name`` for it, with its own default: the
    description, range and choices stay declared once, on ``owner``, and validate here too."""
    field = next((f for f in dataclasses.fields(owner) if f.name == name), None)
    if field is None:
        raise AttributeError(f"{owner.__name__} has no setting {name!r}")
    metadata = {**field.metadata, "shared_with": owner.__name__}
    return dataclasses.field(default=default, metadata=metadata)


def describe(field: dataclasses.Field) -> str:
    meta = field.metadata
    text = meta.get("description", "")
    if meta.get("unit"):
        text += f" [{meta['unit']}]"
    if meta.get("low") is not None or meta.get("high") is not None:
        text += f" (range {meta.get('low')} .. {meta.get('high')})"
    if meta.get("choices"):
        text += f" (one of: {', '.join(meta['choices'])})"
    text += " [changeable at run time]" if meta.get("dynamic") else " [fixed at start-up]"
    return text


def validate(config: Any) -> None:
    """Raise ValueError naming the first field that is out of range or of the wrong kind."""
    name = type(config).__name__
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        meta = field.metadata
        values = value if isinstance(value, list | tuple) else [value]
        for item in values:
            if isinstance(item, float) and not math.isfinite(item):
                raise ValueError(f"{name}.{field.name} = {value!r} is not finite; give a number.")
            is_number = isinstance(item, int | float) and not isinstance(item, bool)
            if is_number and meta.get("low") is not None and item < meta["low"]:
                raise ValueError(
                    f"{name}.{field.name} = {value!r} is below its minimum {meta['low']}: "
                    f"{meta.get('description', '')}"
                )
            if is_number and meta.get("high") is not None and item > meta["high"]:
                raise ValueError(
                    f"{name}.{field.name} = {value!r} is above its maximum {meta['high']}: "
                    f"{meta.get('description', '')}"
                )
            if meta.get("choices") and item not in meta["choices"]:
                raise ValueError(
                    f"{name}.{field.name} = {value!r} is not one of {', '.join(meta['choices'])}."
                )


def from_mapping(config_cls: type, values: Mapping[str, Any]) -> Any:
    """Build and validate a config from a mapping; unknown keys are refused by name."""
    known = {field.name: field for field in dataclasses.fields(config_cls)}
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ValueError(
            f"unknown {config_cls.__name__} setting(s): {', '.join(unknown)}; "
            f"known settings are: {', '.join(sorted(known))}."
        )
    kwargs = {}
    for key, value in values.items():
        default = getattr(config_cls, key, None) if key in known else None
        # YAML writes 1 for 1.0; keep float fields float.
        if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        kwargs[key] = value
    config = config_cls(**kwargs)
    validate(config)
    return config

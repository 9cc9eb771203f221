"""Typed configuration declared once: dataclass fields carry description and range.

Core code validates a config at construction; nodes turn the same fields into ROS
parameters with descriptors (see ``simreal_ros.nodes.params``), so ``ros2 param describe``
and rqt_reconfigure show the description and range, and YAML files need not repeat defaults.

Settings may be grouped, as generate_parameter_library nests parameters: a ``group`` field
holds a dataclass of settings, read as ``config.screen.seeds`` and named ``screen.seeds`` in
ROS parameters, mappings and overrides (nested ``screen: {seeds: 20}`` in YAML). A setting
that was renamed keeps its old name as ``formerly``, so an old file gets the new name in its
error instead of a bare "unknown".
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
    formerly: str = "",
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
        "formerly": formerly,
    }
    if isinstance(default, list | dict):
        factory = lambda d=default: type(d)(d)  # noqa: E731 - a fresh copy per instance
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def group(settings_cls: type, description: str) -> Any:
    """A field holding a group of settings (the dataclass ``settings_cls``), its defaults
    included; its settings are named ``<field>.<setting>``."""
    metadata = {"group": settings_cls, "description": description}
    return dataclasses.field(default_factory=settings_cls, metadata=metadata)


def settings(config_cls: type) -> dict[str, dataclasses.Field]:
    """Every setting of ``config_cls`` by its dotted name, groups expanded, in order."""
    out: dict[str, dataclasses.Field] = {}
    for field in dataclasses.fields(config_cls):
        inner = field.metadata.get("group")
        if inner is None:
            out[field.name] = field
        else:
            out.update({f"{field.name}.{n}": f for n, f in settings(inner).items()})
    return out


def value_of(config: Any, name: str) -> Any:
    """The value of the setting with dotted ``name``."""
    for part in name.split("."):
        config = getattr(config, part)
    return config


def values_of(config: Any) -> dict[str, Any]:
    """Every setting's value by dotted name (``from_mapping`` takes it back)."""
    return {name: value_of(config, name) for name in settings(type(config))}


def renamed(config_cls: type) -> dict[str, str]:
    """Old name -> dotted name, for every setting declared with ``formerly``."""
    fields = settings(config_cls).items()
    return {f.metadata["formerly"]: n for n, f in fields if f.metadata.get("formerly")}


def shared_setting(owner: type, name: str, default: Any) -> Any:
    """A field that sets ``owner``'s setting ``name`` (dotted) for it, with its own default:
    the description, range and choices stay declared once, on ``owner``, and validate here
    too."""
    field = settings(owner).get(name)
    if field is None:
        raise AttributeError(f"{owner.__name__} has no setting {name!r}")
    metadata = {**field.metadata, "shared_with": owner.__name__, "shared_name": name}
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


def validate(config: Any, name: str = "") -> None:
    """Raise ValueError naming the first field that is out of range or of the wrong kind."""
    name = name or type(config).__name__
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        meta = field.metadata
        if meta.get("group") is not None:
            validate(value, f"{name}.{field.name}")
            continue
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


def flatten(config_cls: type, values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` with each group given as a nested mapping (YAML) turned into dotted names."""
    groups = {
        f.name: f.metadata["group"]
        for f in dataclasses.fields(config_cls)
        if f.metadata.get("group") is not None
    }
    out: dict[str, Any] = {}
    for key, value in values.items():
        if key in groups and isinstance(value, Mapping):
            inner = flatten(groups[key], value)
            out.update({f"{key}.{name}": v for name, v in inner.items()})
        else:
            out[key] = value
    return out


def nested_form(name: str) -> str:
    """How the dotted setting ``name`` is written in a ROS parameter YAML."""
    group_name, _, inner = name.partition(".")
    return f"{group_name}: {{{inner}: ...}}" if inner else f"{name}: ..."


def check_names(config_cls: type, names: Any, what: str = "setting") -> None:
    """Refuse a name ``config_cls`` does not have: a renamed one with its new name, any other
    with the list of known names."""
    known = settings(config_cls)
    old = renamed(config_cls)
    moved = sorted(n for n in names if n not in known and n in old)
    if moved:
        raise ValueError(
            f"{config_cls.__name__} {what}(s) renamed: "
            + ", ".join(
                f"{n} is now {old[n]} (in a parameter YAML: {nested_form(old[n])})" for n in moved
            )
            + "."
        )
    unknown = sorted(n for n in names if n not in known)
    if unknown:
        raise ValueError(
            f"unknown {config_cls.__name__} {what}(s): {', '.join(unknown)}; "
            f"known settings are: {', '.join(known)}."
        )


def _build(config_cls: type, values: Mapping[str, Any], prefix: str = "") -> Any:
    kwargs = {}
    for field in dataclasses.fields(config_cls):
        name = prefix + field.name
        inner = field.metadata.get("group")
        if inner is not None:
            if any(key.startswith(name + ".") for key in values):
                kwargs[field.name] = _build(inner, values, name + ".")
            continue
        if name not in values:
            continue
        value = values[name]
        default = field.default
        # YAML writes 1 for 1.0; keep float fields float.
        if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        kwargs[field.name] = value
    return config_cls(**kwargs)


def from_mapping(config_cls: type, values: Mapping[str, Any]) -> Any:
    """Build and validate a config from a mapping (dotted names or nested groups); unknown
    keys are refused by name, renamed ones with their new name."""
    flat = flatten(config_cls, values)
    check_names(config_cls, flat)
    config = _build(config_cls, flat)
    validate(config)
    return config


def updated(config: Any, changes: Mapping[str, Any]) -> Any:
    """A copy of ``config`` with ``changes`` (dotted names) applied, validated."""
    return from_mapping(type(config), {**values_of(config), **flatten(type(config), changes)})

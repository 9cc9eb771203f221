"""Declare a core config dataclass as ROS parameters, with descriptors, in one call."""

from __future__ import annotations

import dataclasses
from typing import Any

from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor
from rclpy.exceptions import InvalidParameterTypeException
from rclpy.node import Node
from rclpy.parameter import Parameter

from simreal_ros import config_schema


def _descriptor(field: dataclasses.Field, default: Any) -> ParameterDescriptor:
    meta = field.metadata
    descriptor = ParameterDescriptor(
        name=field.name,
        description=config_schema.describe(field),
        read_only=bool(meta.get("read_only", False)),
    )
    if isinstance(default, list) and not default:
        # rclpy types an empty list as BYTE_ARRAY; let an override give the element type.
        descriptor.dynamic_typing = True
    low, high = meta.get("low"), meta.get("high")
    if low is not None and high is not None and not isinstance(default, bool):
        if isinstance(default, int):
            descriptor.integer_range = [
                IntegerRange(from_value=int(low), to_value=int(high), step=0)
            ]
        elif isinstance(default, float):
            descriptor.floating_point_range = [
                FloatingPointRange(from_value=float(low), to_value=float(high), step=0.0)
            ]
    if meta.get("choices"):
        descriptor.additional_constraints = "one of: " + ", ".join(meta["choices"])
    return descriptor


def _default_of(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    return field.default_factory()  # type: ignore[misc]


def _widen_integer_override(node: Node, name: str, default: Any) -> None:
    """An integer override of a float parameter (``rate:=2`` from the command line or YAML)
    becomes the float it means; rclpy would refuse it as the wrong type at declaration."""
    overrides = getattr(node, "_parameter_overrides", None)  # rclpy keeps them here
    if not isinstance(default, float) or not isinstance(overrides, dict):
        return
    given = overrides.get(name)
    if given is not None and given.type_ == Parameter.Type.INTEGER:
        overrides[name] = Parameter(name, Parameter.Type.DOUBLE, float(given.value))


def declare_config(node: Node, config_cls: type, prefix: str = "") -> Any:
    """Declare every field of ``config_cls`` and return the validated config.

    Values come from the node's parameter overrides (YAML, command line); defaults live
    only in the dataclass. An invalid value raises ValueError naming the parameter.
    """
    values = {}
    for field in dataclasses.fields(config_cls):
        default = _default_of(field)
        name = prefix + field.name
        _widen_integer_override(node, name, default)
        try:
            node.declare_parameter(name, default, _descriptor(field, default))
        except InvalidParameterTypeException as error:
            raise ValueError(
                f"parameter {name!r} of node {node.get_name()!r} must be a "
                f"{type(default).__name__} (default {default!r}): {error}"
            ) from None
        value = node.get_parameter(name).value
        if isinstance(default, list) and value is None:
            value = []
        if isinstance(default, tuple) and isinstance(value, list):
            value = tuple(value)
        values[field.name] = value
    return config_schema.from_mapping(config_cls, values)

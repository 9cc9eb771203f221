"""Declare a core config dataclass as ROS parameters, with descriptors, in one call.

Settings fixed at start-up become read-only parameters, so rqt_reconfigure and
``ros2 param set`` refuse a change instead of silently ignoring it. ``dynamic`` settings
stay writable: a change is validated like a start-up value and handed to the node's
``apply`` hook, or refused with the reason.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from rcl_interfaces.msg import (
    FloatingPointRange,
    IntegerRange,
    ParameterDescriptor,
    SetParametersResult,
)
from rclpy.exceptions import InvalidParameterTypeException
from rclpy.node import Node
from rclpy.parameter import Parameter

from simreal_ros import config_schema


def _descriptor(name: str, field: dataclasses.Field, default: Any) -> ParameterDescriptor:
    meta = field.metadata
    descriptor = ParameterDescriptor(
        name=name,
        description=config_schema.describe(field),
        read_only=not meta.get("dynamic", False),
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


def _declare(node: Node, name: str, default: Any, descriptor: ParameterDescriptor) -> Any:
    """Declare one parameter; an integer override of a float one (``rate:=2`` from the
    command line or YAML) becomes the float it means instead of a type error."""
    try:
        return node.declare_parameter(name, default, descriptor).value
    except InvalidParameterTypeException as error:
        if not isinstance(default, float):
            raise ValueError(
                f"parameter {name!r} of node {node.get_name()!r} must be a "
                f"{type(default).__name__} (default {default!r}): {error}"
            ) from None
    # Read the override as given, then declare the float it means (ignoring the override).
    probe = ParameterDescriptor(name=name, dynamic_typing=True)
    given = node.declare_parameter(name, default, probe).value
    node.undeclare_parameter(name)
    if not isinstance(given, int) or isinstance(given, bool):
        raise ValueError(
            f"parameter {name!r} of node {node.get_name()!r} must be a float "
            f"(default {default!r}), got {given!r}"
        )
    return node.declare_parameter(name, float(given), descriptor, ignore_override=True).value


def declare_config(
    node: Node,
    config_cls: type,
    prefix: str = "",
    apply: Callable[[Any], None] | None = None,
) -> Any:
    """Declare every setting of ``config_cls`` (a group's as ``group.name``, as
    generate_parameter_library names nested parameters) and return the validated config.

    Values come from the node's parameter overrides (YAML, command line); defaults live
    only in the dataclass. An invalid value raises ValueError naming the parameter.
    ``apply(new_config)`` receives each accepted run-time change of a dynamic setting (it
    may raise ValueError to refuse it); a config with dynamic settings needs one.
    """
    fields = config_schema.settings(config_cls)
    _refuse_renamed(node, config_cls, prefix)
    values = {}
    for setting_name, field in fields.items():
        default = _default_of(field)
        name = prefix + setting_name
        value = _declare(node, name, default, _descriptor(name, field, default))
        if isinstance(default, list) and value is None:
            value = []
        if isinstance(default, tuple) and isinstance(value, list):
            value = tuple(value)
        values[setting_name] = value
    config = config_schema.from_mapping(config_cls, values)
    dynamic = [name for name, field in fields.items() if field.metadata.get("dynamic")]
    if dynamic:
        if apply is None:
            raise TypeError(
                f"{config_cls.__name__} has dynamic settings ({', '.join(dynamic)}) but "
                f"node {node.get_name()!r} gave no apply hook for them."
            )
        node.add_on_set_parameters_callback(_change_handler(config_cls, prefix, values, apply))
    return config


def _refuse_renamed(node: Node, config_cls: type, prefix: str) -> None:
    """An override under a setting's old name would be ignored by ROS (it declares only the
    new one): refuse it with the new name."""
    overrides = getattr(node, "_parameter_overrides", {})
    moved = config_schema.renamed(config_cls)
    given = [name[len(prefix) :] for name in overrides if name.startswith(prefix)]
    config_schema.check_names(config_cls, [name for name in given if name in moved])


def _change_handler(config_cls: type, prefix: str, values: dict, apply: Callable):
    """The on-set callback of one config: validate, apply, then remember the new values."""
    current = dict(values)
    names = {prefix + name: name for name in config_schema.settings(config_cls)}

    def on_set(parameters: list[Parameter]) -> SetParametersResult:
        changes = {names[p.name]: p.value for p in parameters if p.name in names}
        if not changes:
            return SetParametersResult(successful=True)
        try:
            config = config_schema.from_mapping(config_cls, {**current, **changes})
            apply(config)
        except ValueError as error:
            return SetParametersResult(successful=False, reason=str(error))
        current.update(changes)
        return SetParametersResult(successful=True)

    return on_set


def declare_robot(node: Node):
    """Declare the graph-level ``robot`` parameter and make that arm this process's.

    Every node that touches the arm calls this first, so the description it loads (and
    everything its core code loads) is the graph's one arm; a bad description raises
    ``RobotDescriptionError`` naming the file and field.
    """
    from simreal_ros.robot.description import select_robot

    descriptor = ParameterDescriptor(
        name="robot",
        description="The arm: a shipped one (simreal_arm, panda) or the path of a robot "
        "directory or robot.yaml; empty: $SIMREAL_ROBOT, else simreal_arm. Set for the "
        "whole graph (robot:=, --robot).",
        read_only=True,
    )
    value = node.declare_parameter("robot", "", descriptor).value
    return select_robot(value or None)

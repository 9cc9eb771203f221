"""Check a graph's settings before any process starts.

Every node declares its parameters from one typed config (``config_schema``); this module
checks the values a user gives (``simreal up --set``, the parameter YAML files the graph
loads, launch arguments) against those same configs, so a mistyped name or a value out of
range is refused with the known names, a close match and the range before a node starts,
instead of being ignored (an unknown ROS parameter override is) or failing in a node's
traceback. Nodes still validate their own parameters when they declare them.
Plain Python: no rclpy.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from simreal_ros.config_schema import (
    describe,
    from_mapping,
    nested_form,
    renamed,
    settings,
)

# Parameters a node declares besides its config's fields: the graph's arm (declare_robot)
# and rclpy's own clock switch.
ROBOT_NODES = ("sim_bridge", "safety", "policy", "recorder", "learner", "stand_in_arm")
ROS_PARAMETERS = ("use_sim_time",)


class SettingsError(ValueError):
    """A setting that no node would accept; the message names it and what to give instead."""


def node_config_classes() -> dict[str, type]:
    """Each node name -> the config dataclass it declares its parameters from."""
    from simreal_ros.episodes.config import RecorderConfig
    from simreal_ros.graph.bringup import LifecycleManagerConfig
    from simreal_ros.learner.config import LearnerConfig
    from simreal_ros.perception.markers import MarkerConfig
    from simreal_ros.policy.config import PolicyNodeConfig
    from simreal_ros.robot.stand_in_arm import StandInArmConfig
    from simreal_ros.safety.config import SafetyConfig
    from simreal_ros.sim.bridge import SimBridgeConfig
    from simreal_ros.trials.config import TrialRunnerConfig

    return {
        "sim_bridge": SimBridgeConfig,
        "safety": SafetyConfig,
        "policy": PolicyNodeConfig,
        "recorder": RecorderConfig,
        "learner": LearnerConfig,
        "lifecycle_manager": LifecycleManagerConfig,
        "trial_runner": TrialRunnerConfig,
        "stand_in_arm": StandInArmConfig,
        "perception": MarkerConfig,
    }


def close_match(name: str, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the nearest known name, or an empty string."""
    match = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f" (did you mean {match[0]!r}?)" if match else ""


def known_parameters(node: str) -> dict[str, dataclasses.Field | None]:
    """Parameter name -> its config field (None for the robot and ROS's own ones)."""
    fields: dict[str, dataclasses.Field | None] = dict(settings(node_config_classes()[node]))
    if node in ROBOT_NODES:
        fields["robot"] = None
    for name in ROS_PARAMETERS:
        fields[name] = None
    return fields


def _kind_error(field: dataclasses.Field, value: Any) -> str:
    """Why ``value`` cannot be this field's type ('' when it can): the ROS parameter
    declared from the field has the default's type."""
    default = (
        field.default if field.default is not dataclasses.MISSING else field.default_factory()
    )  # type: ignore[misc]
    if isinstance(default, bool):
        ok = isinstance(value, bool)
        want = "true or false"
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
        want = "an integer"
    elif isinstance(default, float):
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        want = "a number"
    elif isinstance(default, str):
        ok = isinstance(value, str)
        want = "a string"
    elif isinstance(default, list | tuple):
        ok = isinstance(value, list | tuple)
        want = "a list, e.g. [1.0, 2.0]"
    else:
        return ""
    return "" if ok else f"{value!r} is not {want}"


def check_node_settings(node: str, values: Mapping[str, Any], where: str) -> None:
    """Refuse unknown names and bad values of one node's settings (``where``: the source,
    for the message, e.g. ``--set`` or a YAML path)."""
    classes = node_config_classes()
    if node not in classes:
        raise SettingsError(
            f"{where}: no node named {node!r}{close_match(node, classes)}; nodes with "
            f"settings: {', '.join(sorted(classes))}."
        )
    known = known_parameters(node)
    moved = renamed(classes[node])
    for name, value in values.items():
        if name in moved and name not in known:
            raise SettingsError(
                f"{where}: {node}'s setting {name!r} is now {moved[name]!r}; give that name "
                f"(in a parameter YAML, nested: {nested_form(moved[name])})."
            )
        if name not in known:
            raise SettingsError(
                f"{where}: {node} has no setting {name!r}{close_match(name, known)}; its "
                f"settings are: {', '.join(sorted(known))} (`ros2 param describe /{node} "
                "NAME` or the config dataclass says what each one is)."
            )
        field = known[name]
        problem = "" if field is None else _kind_error(field, value)
        if problem:
            raise SettingsError(f"{where}: {node}.{name} = {problem}: {describe(field)}.")
    config_fields = {n: v for n, v in values.items() if known.get(n) is not None}
    try:
        from_mapping(classes[node], config_fields)
    except ValueError as error:
        name = _named_field(str(error), config_fields)
        hint = _value_hint(known[name], config_fields[name]) if name else ""
        raise SettingsError(f"{where}: {node}: {error}{hint}") from error


def _value_hint(field: dataclasses.Field, value: Any) -> str:
    """A close valid value, and the range when the message does not give it."""
    meta = field.metadata
    hint = ""
    names: tuple[str, ...] = tuple(meta.get("choices") or ())
    if not names and field.name.endswith("profile"):
        from simreal_ros.sim.profiles import PROFILE_NAMES

        names = PROFILE_NAMES
    if isinstance(value, str) and names:
        hint += close_match(value, names)
    low, high = meta.get("low"), meta.get("high")
    if low is not None or high is not None:
        hint += f" (range {low} .. {high})"
    return hint


def _named_field(message: str, names: Mapping[str, Any]) -> str:
    """The setting a config's error message is about (its ``Config.name`` prefix)."""
    for name in sorted(names, key=len, reverse=True):
        if f".{name} " in message or f".{name}=" in message:
            return name
    # A config's own check (e.g. an unknown profile) may not name its field: the value then.
    for name, value in names.items():
        if isinstance(value, str) and value and repr(value) in message:
            return name
    return ""


def check_overrides(
    overrides: Mapping[str, Mapping[str, Any]], graph_nodes: Iterable[str], where: str = "--set"
) -> None:
    """``--set NODE.PARAM=VALUE`` overrides: the node must be in the graph being started."""
    graph_nodes = list(graph_nodes)
    for node, values in overrides.items():
        if node not in graph_nodes:
            raise SettingsError(
                f"{where}: no node {node!r} in this graph{close_match(node, graph_nodes)}; "
                f"its nodes are: {', '.join(graph_nodes)}."
            )
        check_node_settings(node, values, where)


def parameter_file_values(path: Path) -> dict[str, dict[str, Any]]:
    """A ROS parameter YAML (``node: {ros__parameters: {...}}``) as node -> values."""
    with open(path, encoding="utf-8") as stream:
        loaded = yaml.safe_load(stream) or {}
    if not isinstance(loaded, dict):
        raise SettingsError(f"{path}: not a mapping of node names to ros__parameters.")
    out: dict[str, dict[str, Any]] = {}
    for node, body in loaded.items():
        body = body or {}
        if not isinstance(body, dict) or set(body) - {"ros__parameters"}:
            raise SettingsError(
                f"{path}: {node!r} should hold only 'ros__parameters:' (the ROS parameter "
                f"file format), found {sorted(body) if isinstance(body, dict) else body!r}."
            )
        out[str(node).lstrip("/")] = _dotted(body.get("ros__parameters") or {})
    return out


def _dotted(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested parameters as ROS reads them from YAML: ``screen: {seeds: 20}`` is
    ``screen.seeds``."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, Mapping):
            out.update(_dotted(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def check_graph(
    nodes, profile: str, overrides: Mapping[str, Mapping[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Everything a graph's nodes will be given, checked before a process starts: the
    ``--set`` overrides by name, then for each node the merged values of its parameter
    files and its final parameters (graph settings and overrides) by name and value.
    Returns node -> the values it will be given (beyond its config's defaults)."""
    from simreal_ros.graph.description import parameter_file_paths

    check_overrides(overrides, [node.name for node in nodes])
    given: dict[str, dict[str, Any]] = {}
    for node in nodes:
        if node.name not in node_config_classes():
            continue
        merged: dict[str, Any] = {}
        for path in parameter_file_paths(node, profile):
            for file_node, values in parameter_file_values(path).items():
                if file_node in ("**", "*"):
                    file_node = node.name
                if file_node != node.name and path.stem == node.name:
                    raise SettingsError(
                        f"{path}: keyed by {file_node!r}{close_match(file_node, [node.name])}; "
                        f"this file is read for node {node.name!r} only."
                    )
                if file_node == node.name:
                    check_node_settings(node.name, values, str(path))
                    merged.update(values)
        merged.update(node.parameters)
        where = "--set" if overrides.get(node.name) else "the graph's settings"
        check_node_settings(node.name, merged, where)
        given[node.name] = merged
    return given


def check_launch_arguments(
    given: Mapping[str, str], declared: Iterable[str], ignore: Iterable[str] = ()
) -> None:
    """``name:=value`` launch arguments: an argument the launch file does not declare is
    refused with the declared names and a close match (ros2 launch would ignore it)."""
    declared = sorted(set(declared))
    for name in given:
        if name in declared or name in ignore:
            continue
        hint = close_match(name, declared)
        if name == "profile":
            hint = " (the sim's dynamics are dynamics_profile:=; the graph is the launch file)"
        raise SettingsError(
            f"launch argument {name}:= is not one of this launch file's{hint}; its "
            f"arguments are: {', '.join(declared)}."
        )


def check_launch_argv(argv: Iterable[str], profile: str) -> dict[str, str]:
    """The ``name:=value`` words given to a launch file of ``profile`` (``ros2 launch``
    passes them as the launch context's argv): each name must be declared and each value
    one its node accepts. Returns them as a mapping."""
    from simreal_ros.graph.description import declared_launch_arguments, launch_arguments

    given = dict(word.split(":=", 1) for word in argv if ":=" in word)
    check_launch_arguments(given, declared_launch_arguments(profile))
    for name, node, parameter, _description in launch_arguments(profile):
        if name in given:
            value = {"true": True, "false": False}.get(given[name], given[name])
            check_node_settings(node, {parameter: value}, f"launch argument {name}:=")
    return given

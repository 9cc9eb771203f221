"""declare_config: parameters from a config dataclass, in one process with rclpy."""

from __future__ import annotations

import dataclasses

import pytest

from simreal_ros.config_schema import setting


@dataclasses.dataclass
class RateConfig:
    rate_hz: float = setting(20.0, "Loop rate.", low=1.0, high=1000.0, unit="Hz")
    label: str = setting("arm", "A name.")


def _node(rclpy_context, overrides):
    from rclpy.node import Node
    from rclpy.parameter import Parameter

    params = [Parameter(name, value=value) for name, value in overrides.items()]
    return Node("params_probe", context=rclpy_context, parameter_overrides=params)


def test_an_integer_override_of_a_float_parameter_is_taken_as_the_float(rclpy_context):
    from simreal_ros.nodes.params import declare_config

    node = _node(rclpy_context, {"rate_hz": 2})  # what `rate_hz:=2` or YAML `2` gives
    try:
        config = declare_config(node, RateConfig)
        assert config.rate_hz == 2.0 and isinstance(config.rate_hz, float)
        assert node.get_parameter("rate_hz").value == 2.0
    finally:
        node.destroy_node()


def test_a_wrong_type_names_the_parameter_and_the_type_it_needs(rclpy_context):
    from simreal_ros.nodes.params import declare_config

    node = _node(rclpy_context, {"rate_hz": "fast"})
    try:
        with pytest.raises(ValueError, match=r"'rate_hz'.*must be a float"):
            declare_config(node, RateConfig)
    finally:
        node.destroy_node()

"""declare_config: parameters from a config dataclass, in one process with rclpy."""

from __future__ import annotations

import dataclasses

import pytest

from simreal_ros.config_schema import group, setting


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


@dataclasses.dataclass
class LiveConfig:
    gain: float = setting(1.0, "A gain read at each use.", low=0.0, high=10.0, dynamic=True)
    mode: str = setting("fast", "A mode.", choices=("fast", "slow"), dynamic=True)
    port: str = setting("/dev/arm", "Fixed at start-up.")


def test_a_dynamic_setting_is_validated_and_applied_and_a_fixed_one_is_refused(rclpy_context):
    from rclpy.parameter import Parameter

    from simreal_ros.nodes.params import declare_config

    node = _node(rclpy_context, {})
    applied = []
    try:
        config = declare_config(node, LiveConfig, apply=applied.append)
        assert not node.describe_parameter("gain").read_only
        assert node.describe_parameter("port").read_only
        assert "fixed at start-up" in node.describe_parameter("port").description
        assert node.set_parameters([Parameter("gain", value=2.5)])[0].successful
        assert applied[-1].gain == 2.5 and applied[-1].port == config.port
        too_big = node.set_parameters([Parameter("gain", value=11.0)])[0]
        assert not too_big.successful and "gain" in too_big.reason and "10.0" in too_big.reason
        assert node.get_parameter("gain").value == 2.5 and len(applied) == 1
        # What the descriptor cannot say (choices), the config's validation refuses.
        bad_mode = node.set_parameters([Parameter("mode", value="warp")])[0]
        assert not bad_mode.successful and "not one of fast, slow" in bad_mode.reason
        assert node.get_parameter("mode").value == "fast" and len(applied) == 1
        fixed = node.set_parameters([Parameter("port", value="/dev/other")])[0]
        assert not fixed.successful and node.get_parameter("port").value == "/dev/arm"
        # The hook may refuse a value validation allows, with its own reason.

        def refuse(new):
            raise ValueError("gain 3 is not reachable now")

        other = _node(rclpy_context, {})
        declare_config(other, LiveConfig, apply=refuse)
        answer = other.set_parameters([Parameter("gain", value=3.0)])[0]
        assert not answer.successful and "not reachable" in answer.reason
        other.destroy_node()
    finally:
        node.destroy_node()


def test_dynamic_settings_without_an_apply_hook_are_a_programming_error(rclpy_context):
    from simreal_ros.nodes.params import declare_config

    node = _node(rclpy_context, {})
    try:
        with pytest.raises(TypeError, match=r"dynamic settings \(gain, mode\).*no apply hook"):
            declare_config(node, LiveConfig)
    finally:
        node.destroy_node()


def test_node_settings_either_take_effect_or_are_refused(rclpy_context):
    from rclpy.parameter import Parameter

    from simreal_ros.nodes.recorder import RecorderNode
    from simreal_ros.nodes.trial_runner import TrialRunnerNode

    runner = TrialRunnerNode(context=rclpy_context)
    recorder = RecorderNode(
        context=rclpy_context, parameter_overrides=[Parameter("min_free_disk_mb", value=0.0)]
    )
    try:
        assert runner.set_parameters([Parameter("timeout_s", value=12.0)])[0].successful
        assert runner.config.timeout_s == 12.0  # what the next run uses
        assert not runner.set_parameters([Parameter("reset_service", value="/x")])[0].successful
        assert runner.config.reset_service == "/sim_bridge/reset"
        assert recorder.set_parameters([Parameter("flush_period_s", value=0.5)])[0].successful
        assert recorder.config.flush_period_s == 0.5
        assert not recorder.set_parameters([Parameter("data_dir", value="/tmp/x")])[0].successful
    finally:
        runner.destroy_node()
        recorder.destroy_node()


@dataclasses.dataclass
class GateGroup:
    ci_low: float = setting(
        0.0, "A bound.", low=0.0, high=1.0, dynamic=True, formerly="promote_ci_low"
    )


@dataclasses.dataclass
class GroupedNodeConfig:
    rate_hz: float = setting(20.0, "Loop rate.", low=1.0, high=1000.0)
    promotion: GateGroup = group(GateGroup, "The gate.")


def test_a_group_becomes_dotted_parameters_and_an_old_name_is_refused(rclpy_context):
    from rclpy.parameter import Parameter

    from simreal_ros.nodes.params import declare_config

    applied = []
    node = _node(rclpy_context, {"promotion.ci_low": 0.3})
    try:
        config = declare_config(node, GroupedNodeConfig, apply=applied.append)
        assert config.promotion.ci_low == 0.3
        described = node.describe_parameter("promotion.ci_low")
        assert described.floating_point_range[0].to_value == 1.0 and not described.read_only
        result = node.set_parameters([Parameter("promotion.ci_low", value=0.5)])[0]
        assert result.successful and applied[-1].promotion.ci_low == 0.5
        refused = node.set_parameters([Parameter("promotion.ci_low", value=2.0)])[0]
        assert not refused.successful and "promotion.ci_low" in refused.reason
    finally:
        node.destroy_node()
    node = _node(rclpy_context, {"promote_ci_low": 0.3})  # a YAML written before the groups
    try:
        with pytest.raises(ValueError, match=r"promote_ci_low is now promotion\.ci_low"):
            declare_config(node, GroupedNodeConfig, apply=applied.append)
    finally:
        node.destroy_node()

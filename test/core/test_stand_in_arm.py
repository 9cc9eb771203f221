"""The stand-in arm core: a position-controlled drive per joint, for any arm.

Each test runs on both shipped arms and on a user's arm (test/user_arm.py: 4 joints, no
gripper, its own joint names, a site as tool frame, one joint's position limits left to
the model).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from user_arm import joint_names, write_user_arm

from simreal_ros.robot.description import load_robot_description
from simreal_ros.robot.stand_in_arm import StandInArm, StandInArmConfig

USER_JOINTS = joint_names("bench_arm")
DT = 0.01  # the node's default 100 Hz


@pytest.fixture(params=["simreal_arm", "panda", "user_arm"])
def robot(request, tmp_path):
    if request.param != "user_arm":
        return load_robot_description(request.param)
    write_user_arm(tmp_path, name="bench_arm", wrist_limits_from_model=True)
    description = load_robot_description(tmp_path)
    assert description.joint_names == USER_JOINTS and description.gripper_joint is None
    return description


def _far_target(robot) -> np.ndarray:
    """Per joint, 80% of the way from home to the farther position limit."""
    home = np.asarray(robot.home_position)
    lower, upper = np.asarray(robot.position_lower), np.asarray(robot.position_upper)
    far = np.where(upper - home > home - lower, upper, lower)
    return home + 0.8 * (far - home)


def _run(arm: StandInArm, seconds: float, dt: float = DT):
    """Advance ``seconds``; yield (previous positions, positions, velocities) each step."""
    for _ in range(math.ceil(seconds / dt)):
        before = arm.positions.copy()
        arm.advance(dt)
        yield before, arm.positions.copy(), arm.velocities.copy()


def test_starts_at_home_at_rest_and_holds_there(robot):
    arm = StandInArm(robot)
    assert arm.joint_names == robot.joint_names
    np.testing.assert_array_equal(arm.positions, robot.home_position)
    np.testing.assert_array_equal(arm.velocities, np.zeros(robot.num_joints))
    for _ in _run(arm, 0.5):
        pass
    np.testing.assert_array_equal(arm.positions, robot.home_position)
    with pytest.raises(ValueError):  # read-only views: nobody edits the state in place
        arm.positions[0] = 1.0


def test_converges_to_a_target_within_limits(robot):
    arm = StandInArm(robot, time_constant=0.05)
    target = _far_target(robot)
    assert not arm.command(target)
    assert np.max(np.abs(target - robot.home_position)) > 0.01
    # Slewing at the velocity limit, then ten time constants of exponential approach.
    seconds = float(np.max(np.abs(target - robot.home_position) / robot.velocity_limit))
    for _ in _run(arm, seconds + 0.5):
        pass
    np.testing.assert_allclose(arm.positions, target, atol=1e-4)
    np.testing.assert_allclose(arm.velocities, 0.0, atol=1e-2)
    np.testing.assert_array_equal(arm.targets, target)


def test_small_steps_follow_a_first_order_lag_with_the_time_constant(robot):
    tau = 0.08
    arm = StandInArm(robot, time_constant=tau)
    # Small enough that the velocity cap never binds: a pure lag.
    offset = 0.1 * np.asarray(robot.velocity_limit) * tau
    target = np.asarray(robot.home_position) + offset * np.where(
        np.asarray(robot.position_upper) - robot.home_position > offset, 1.0, -1.0
    )
    arm.command(target)
    error = target - robot.home_position
    arm.advance(tau)
    np.testing.assert_allclose(target - arm.positions, error * math.exp(-1.0), rtol=1e-9)
    for _ in range(40):  # two more time constants in small steps
        arm.advance(tau / 20)
    np.testing.assert_allclose(target - arm.positions, error * math.exp(-3.0), rtol=1e-6)


@pytest.mark.parametrize("dt", [DT, 0.2])  # 0.2 s: a tick far later than the time constant
def test_never_faster_than_the_velocity_limit(robot, dt):
    arm = StandInArm(robot, time_constant=0.05)
    limit = np.asarray(robot.velocity_limit)
    lower, upper = np.asarray(robot.position_lower), np.asarray(robot.position_upper)
    # Limit to limit: every joint has the whole range to cover.
    start = np.where(upper - robot.home_position > robot.home_position - lower, lower, upper)
    arm.reset(start)
    arm.command(np.where(start == lower, upper, lower))
    steps = list(_run(arm, 0.3, dt=dt))
    for before, after, velocity in steps:
        assert np.all(np.abs(after - before) <= limit * dt * (1 + 1e-12) + 1e-15)
        assert np.all(np.abs(velocity) <= limit * (1 + 1e-12))
    # Far from the target the cap binds: full speed, not slower (a lag alone is faster).
    np.testing.assert_allclose(np.abs(steps[0][2]), limit, rtol=1e-12)


def test_targets_beyond_the_position_limits_are_clipped_and_never_passed(robot):
    arm = StandInArm(robot)
    lower, upper = np.asarray(robot.position_lower), np.asarray(robot.position_upper)
    for bound, beyond in ((upper, upper + 1.0), (lower, lower - 1.0)):
        assert arm.command(beyond) is True
        np.testing.assert_array_equal(arm.targets, bound)
        seconds = float(np.max((upper - lower) / robot.velocity_limit)) + 0.5
        for _, after, _ in _run(arm, seconds):
            assert np.all(after >= lower) and np.all(after <= upper)
        np.testing.assert_allclose(arm.positions, bound, atol=1e-4)


@pytest.mark.parametrize("extra", [-1, 1, -100])
def test_a_command_of_the_wrong_size_is_refused_naming_the_joints(robot, extra):
    arm = StandInArm(robot)
    target = _far_target(robot)
    arm.command(target)
    size = max(0, robot.num_joints + extra)
    with pytest.raises(ValueError) as caught:
        arm.command([0.0] * size)
    message = str(caught.value)
    assert f"has {size} value" in message and f"{robot.num_joints} controller joints" in message
    for name in robot.joint_names:
        assert name in message
    np.testing.assert_array_equal(arm.targets, target)  # the previous targets stay


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_non_finite_command_is_refused_and_the_arm_keeps_its_targets(robot, bad):
    arm = StandInArm(robot)
    target = _far_target(robot)
    arm.command(target)
    joint = robot.num_joints - 1
    values = list(target)
    values[joint] = bad
    with pytest.raises(ValueError) as caught:
        arm.command(values)
    assert repr(robot.joint_names[joint]) in str(caught.value)
    assert "finite" in str(caught.value)
    np.testing.assert_array_equal(arm.targets, target)
    for _ in _run(arm, 0.1):
        pass
    assert np.all(np.isfinite(arm.positions))
    assert np.max(np.abs(arm.positions - robot.home_position)) > 0.0  # still following


def test_non_numbers_and_bad_times_are_refused_with_the_fix(robot):
    arm = StandInArm(robot)
    with pytest.raises(ValueError, match="sequence of"):
        arm.command(3.0)
    with pytest.raises(ValueError, match="numbers"):
        arm.command(["a"] * robot.num_joints)
    for dt in (0.0, -0.01, math.nan, math.inf):
        with pytest.raises(ValueError, match="positive, finite"):
            arm.advance(dt)
    for tau in (0.0, -1.0, math.nan):
        with pytest.raises(ValueError, match="time_constant"):
            StandInArm(robot, time_constant=tau)


def test_config_declares_rate_and_time_constant_with_ranges():
    config = StandInArmConfig()
    assert config.rate_hz == 100.0 and config.time_constant == 0.05
    with pytest.raises(ValueError, match="time_constant"):
        StandInArmConfig(time_constant=0.0)
    with pytest.raises(ValueError, match="rate_hz"):
        StandInArmConfig(rate_hz=0.0)

"""Safety filter core: one test per limit, per refusal and per configuration error."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

from simreal_ros.robot.description import load_robot_description
from simreal_ros.safety import (
    ESTOP,
    HOLDING,
    LIMITED,
    PASS,
    JointLimits,
    SafetyConfig,
    SafetyFilter,
    limits_from_description,
)

DT = 0.01
NAMES = ("a", "b", "c")
ROBOT = load_robot_description()


def make_limits(**changes) -> JointLimits:
    values = dict(
        names=NAMES,
        lower=[-1.0, -1.0, -1.0],
        upper=[1.0, 1.0, 1.0],
        velocity=[1.0, 2.0, 0.5],
        acceleration=[10.0, 10.0, 10.0],
        jerk=[1e6, 1e6, 1e6],
        tracking_error=[0.5, 0.5, 0.5],
    )
    values.update(changes)
    return JointLimits(**values)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def advance(self) -> float:
        self.t += DT
        return self.t


def started(limits=None, q0=(0.0, 0.0, 0.0), **config) -> tuple[SafetyFilter, Clock]:
    config.setdefault("control_rate", 1.0 / DT)
    config.setdefault("command_timeout", 0.1)
    config.setdefault("state_timeout", 0.1)
    f = SafetyFilter(limits or make_limits(), SafetyConfig(**config))
    clock = Clock()
    assert f.tick(clock.t) is None  # nothing before the first joint state
    assert f.submit_state(np.array(q0), clock.t, clock.t) is None
    return f, clock


def step(f: SafetyFilter, clock: Clock, command, measured=None):
    now = clock.advance()
    f.submit_state(f.commanded_position.copy() if measured is None else measured, now, now)
    if command is not None:
        f.submit_command(command, now, now)
    result = f.tick(now)
    return result.command.copy(), result


def reasons(result) -> set[tuple[str, str]]:
    return {(i.limit, i.joint) for i in result.interventions}


def test_an_allowed_command_passes_bit_exactly():
    f, clock = started()
    command = np.array([0.0004, -0.0004, 0.0002])
    out, result = step(f, clock, command)
    assert np.array_equal(out, command)
    assert result.state == PASS and result.interventions == []


def test_acceleration_limits_the_first_step_from_rest():
    f, clock = started()
    out, result = step(f, clock, [0.5, 0.0, 0.0])
    assert 0 < out[0] <= 10.0 * DT * DT + 1e-12
    (item,) = result.interventions
    assert (item.limit, item.joint) == ("acceleration", "a")
    assert item.requested == pytest.approx(0.5 / DT / DT)
    assert item.allowed == pytest.approx(10.0, rel=1e-6)
    assert item.excess == pytest.approx(0.5 / DT / DT - 10.0, rel=1e-6)
    assert result.state == LIMITED


def test_velocity_limit_caps_a_long_move_and_names_the_joint():
    f, clock = started()
    outs = [step(f, clock, [0.9, 0.0, 0.0]) for _ in range(60)]
    steps = np.diff([o[0] for o, _ in outs])
    assert steps.max() <= 1.0 * DT * (1 + 1e-9)
    velocity = [i for _, r in outs for i in r.interventions if i.limit == "velocity"]
    assert velocity and all(i.joint == "a" for i in velocity)
    assert velocity[0].allowed == pytest.approx(1.0, rel=1e-6)
    assert velocity[0].excess == pytest.approx(velocity[0].requested - 1.0, rel=1e-6)


def test_position_limit_clips_the_target_and_brakes_without_overshoot():
    f, clock = started()
    outs = [step(f, clock, [3.0, 0.0, 0.0]) for _ in range(300)]
    positions = np.array([o[0] for o, _ in outs])
    assert positions.max() <= 1.0
    assert positions[-1] == pytest.approx(1.0, abs=1e-6)
    clip = [i for _, r in outs for i in r.interventions if i.limit == "position"]
    assert clip[0].requested == 3.0 and clip[0].allowed == 1.0 and clip[0].excess == 2.0
    accelerations = np.diff(positions, 2) / DT / DT
    assert np.abs(accelerations).max() <= 10.0 * (1 + 1e-6)


def test_jerk_limit_smooths_a_small_step():
    f, clock = started(make_limits(jerk=[100.0, 100.0, 100.0]))
    out, result = step(f, clock, [0.0005, 0.0, 0.0])
    assert ("jerk", "a") in reasons(result)
    assert out[0] <= 100.0 * DT**3 * (1 + 1e-9)


def test_jerk_yields_when_braking_needs_it():
    # Low jerk: reaching the target without overshoot needs harder braking than jerk allows.
    f, clock = started(make_limits(jerk=[20.0, 20.0, 20.0]))
    outs = [step(f, clock, [0.3, 0.0, 0.0])[0][0] for _ in range(300)]
    assert max(outs) <= 0.3 + 1e-9
    assert f.limiter.relaxed[5] > 0  # the jerk limit was relaxed, and counted


def test_tracking_error_keeps_the_command_near_a_lagging_arm():
    f, clock = started()
    measured = np.zeros(3)
    for _ in range(200):
        out, result = step(f, clock, [0.9, 0.0, 0.0], measured=measured)
    assert abs(out[0] - measured[0]) <= 0.5 + 1e-9
    assert any(i.limit == "tracking_error" for i in result.interventions) or result.state == PASS


def test_refusals_hold_and_say_why():
    f, clock = started()
    for _ in range(20):
        step(f, clock, [0.5, 0.0, 0.0])
    v_before = f.commanded_velocity[0]
    assert v_before > 0.1
    now = clock.advance()
    f.submit_state(f.commanded_position.copy(), now, now)
    cases = [
        (([0.1, float("nan"), 0.0], now, ()), "non_finite", "b"),
        (([0.1, 0.0], now, ()), "wrong_size", ""),
        (([0.1, 0.0, 0.0], now, ("a", "c", "b")), "joint_order", "b"),
        (([0.1, 0.0, 0.0], now - 1.0, ()), "stale_command", ""),
        (([0.1, 0.0, 0.0], 0.0, ()), "stale_command", ""),
        (([0.1, 0.0, 0.0], now + 5.0, ()), "stale_command", ""),
    ]
    for (values, stamp, names), limit, joint in cases:
        refusal = f.submit_command(values, stamp, now, names)
        assert refusal is not None and (refusal.limit, refusal.joint) == (limit, joint)
        assert limit in refusal.describe()
    assert f.submit_command([0.1, 0.0, 0.0], now, now) is None
    refusal = f.submit_command([0.1, 0.0, 0.0], now - 0.05, now)
    assert refusal.limit == "out_of_order" and refusal.excess == pytest.approx(0.05)
    result = f.tick(now)
    assert result.state == HOLDING
    assert {i.limit for i in result.interventions} >= {"non_finite", "wrong_size", "out_of_order"}
    # Holding brakes within the acceleration limit: slower, but not a step to zero.
    v_after = f.commanded_velocity[0]
    assert v_before - 10.0 * DT * (1 + 1e-9) <= v_after < v_before


def test_state_refusals_hold():
    f, clock = started()
    now = clock.advance()
    assert f.submit_state([0.0, float("inf"), 0.0], now, now).limit == "state_non_finite"
    assert f.submit_state([0.0, 0.0], now, now).limit == "state_wrong_size"
    missing = f.submit_named_state(["a", "c"], [0.0, 0.0], now, now)
    assert (missing.limit, missing.joint) == ("state_joint_missing", "b")
    assert f.submit_named_state(["c", "x", "b", "a"], [3.0, 9.0, 2.0, 1.0], now, now) is None
    np.testing.assert_array_equal(f._measured, [1.0, 2.0, 3.0])
    assert f.submit_state([0.0, 0.0, 0.0], now - 1.0, now).limit == "state_out_of_order"
    f.submit_command([0.0, 0.0, 0.0], now, now)
    assert f.tick(now).state == HOLDING


def test_watchdog_trips_once_and_recovers():
    f, clock = started()
    for _ in range(5):
        step(f, clock, [0.0, 0.0, 0.0])
    results = [step(f, clock, None)[1] for _ in range(30)]
    stale = [i for r in results for i in r.interventions if i.limit == "stale_command"]
    assert len(stale) == 1 and stale[0].allowed == 0.1 and stale[0].requested > 0.1
    assert results[-1].watchdog_tripped and results[-1].state == HOLDING
    assert f.command_watchdog.trips == 1
    assert step(f, clock, [0.0, 0.0, 0.0])[1].state == PASS


def test_estop_latches_until_a_reset_with_fresh_inputs():
    f, clock = started()
    step(f, clock, [0.0, 0.0, 0.0])
    f.engage_estop("test")
    out, result = step(f, clock, [0.5, 0.0, 0.0])
    assert result.state == ESTOP and out[0] == 0.0
    assert ("estop", "") in reasons(result)
    for _ in range(20):
        clock.advance()
    ok, message = f.reset(clock.t)
    assert not ok and "joint states are stale" in message and "policy actions are stale" in message
    step(f, clock, [0.5, 0.0, 0.0])
    ok, message = f.reset(clock.t)
    assert ok, message
    out, result = step(f, clock, [0.5, 0.0, 0.0])
    assert out[0] > 0 and result.state == LIMITED


def test_an_exception_brakes_instead_of_passing_the_request():
    f, clock = started()
    for _ in range(20):
        step(f, clock, [0.5, 0.0, 0.0])
    v_before = f.commanded_velocity[0]

    def broken(*args, **kwargs):
        raise RuntimeError("injected")

    f.limiter.next_velocity = broken
    _, result = step(f, clock, [0.9, 0.0, 0.0])
    assert result.state == HOLDING and "injected" in result.error
    assert ("exception", "") in reasons(result)
    assert f.commanded_velocity[0] == pytest.approx(v_before - 10.0 * DT * (1 - 1e-9))


def test_workspace_box_stops_the_tool_at_the_boundary():
    f = SafetyFilter.from_description(ROBOT, SafetyConfig(command_timeout=0.1))
    clock = Clock()
    f.submit_state(ROBOT.home_position, clock.t, clock.t)
    target = np.asarray(ROBOT.home_position) + 0.5
    results = [step(f, clock, target) for _ in range(80)]
    lower, upper = np.asarray(ROBOT.workspace_lower), np.asarray(ROBOT.workspace_upper)
    for out, _ in results:
        x = f.workspace.ee_position(out)
        assert np.all(x >= lower - 2e-3) and np.all(x <= upper + 2e-3), x
    assert any(i.limit == "workspace" for _, r in results for i in r.interventions)


def _press_and_pan(slide_margin: float) -> tuple[np.ndarray, list, float]:
    """Command the tool down through a floor 1 cm under it while the shoulder pans."""
    home = np.asarray(ROBOT.home_position, dtype=float)
    probe = SafetyFilter.from_description(ROBOT, SafetyConfig())
    home_tool = probe.workspace.ee_position(home).copy()
    floor = home_tool[2] - 0.01
    lower = list(ROBOT.workspace_lower)
    lower[2] = floor
    f = SafetyFilter.from_description(
        ROBOT,
        SafetyConfig(
            command_timeout=0.1, workspace_lower=lower, workspace_slide_margin=slide_margin
        ),
    )
    down = np.zeros_like(home)  # the joint direction that lowers the tool fastest
    for j in range(6):
        bumped = home.copy()
        bumped[j] += 1e-4
        down[j] = -(f.workspace.ee_position(bumped)[2] - home_tool[2]) / 1e-4
    target = home + 0.15 * down / np.linalg.norm(down)
    target[0] += 0.4  # and pan
    clock = Clock()
    f.submit_state(home, clock.t, clock.t)
    outs = [step(f, clock, target)[0] for _ in range(150)]
    return target, outs, floor, f


def test_a_tool_pressed_against_a_face_slides_along_it():
    target, outs, floor, f = _press_and_pan(slide_margin=0.001)
    tools = np.array([f.workspace.ee_position(out).copy() for out in outs])
    assert tools[:, 2].min() >= floor  # never through the floor at a tick
    assert tools[-1, 2] < floor + 0.005  # it did press down to it
    assert f.counts["workspace"] > 0
    # The pan, which the floor does not resist, still gets where it was sent.
    assert abs(outs[-1][0] - target[0]) < 0.02, outs[-1][0] - target[0]
    # Without sliding the whole step is scaled back and the pan stalls at the floor.
    _, stuck, _, _ = _press_and_pan(slide_margin=0.0)
    assert abs(stuck[-1][0] - target[0]) > 0.1
    travelled = np.linalg.norm(tools[-1, :2] - tools[0, :2])
    stuck_tool = f.workspace.ee_position(stuck[-1])
    assert travelled > 2.0 * np.linalg.norm(stuck_tool[:2] - tools[0, :2])


def test_keep_out_box_is_not_entered():
    home_ee = np.array([0.45, 0.0, 0.2])
    box = [0.30, -0.3, 0.0, 0.40, 0.3, 0.5]  # a wall between home and the base
    f = SafetyFilter.from_description(ROBOT, SafetyConfig(keep_out_boxes=box))
    clock = Clock()
    f.submit_state(ROBOT.home_position, clock.t, clock.t)
    target = np.asarray(ROBOT.home_position) + np.array([0.0, -0.3, 0.3, 0, 0, 0, 0])
    hit = False
    for _ in range(120):
        out, result = step(f, clock, target)
        x = f.workspace.ee_position(out)
        inside = np.all(x > np.array(box[:3]) + 2e-3) and np.all(x < np.array(box[3:]) - 2e-3)
        assert not inside, x
        hit |= any(i.limit == "keep_out" for i in result.interventions)
    assert hit
    assert f.workspace.ee_position(np.asarray(ROBOT.home_position)) == pytest.approx(
        home_ee, abs=0.01
    )


def test_the_curved_braking_path_does_not_cross_a_thin_keep_out_wall():
    # A 12 mm wall across the arc the tool sweeps when the shoulder pans. Checking only
    # each step's end and its braking stop point would let the arm pass straight through it
    # (the stop point jumps over the wall before any step ends inside it); the whole
    # commanded path, sampled between outputs, must stay out of the wall.
    wall = [0.37, 0.210, 0.1, 0.42, 0.222, 0.3]
    f = SafetyFilter.from_description(
        ROBOT, SafetyConfig(command_timeout=0.1, keep_out_boxes=wall)
    )
    clock = Clock()
    home = np.asarray(ROBOT.home_position, dtype=float)
    f.submit_state(home, clock.t, clock.t)
    target = home.copy()
    target[0] = 0.8  # pan far past the wall
    outs = [home] + [step(f, clock, target)[0] for _ in range(120)]
    lower, upper = np.array(wall[:3]), np.array(wall[3:])
    deepest = 0.0
    for a, b in itertools.pairwise(outs):
        for s in np.linspace(0.0, 1.0, 21):
            x = f.workspace.ee_position(a + s * (b - a))
            if np.all(x > lower) and np.all(x < upper):
                deepest = max(deepest, float(min((x - lower).min(), (upper - x).min())))
    allowed = f.config.workspace_tolerance  # between ticks; at every tick it is outside
    assert deepest <= allowed, f"the commanded path went {deepest * 1000:.1f} mm into the wall"
    assert all(not f.workspace.violation(out)[0] for out in outs)
    assert f.workspace.ee_position(outs[-1])[1] <= wall[1] + 1e-9  # stopped at or short of it
    assert abs(outs[-1][0] - outs[-2][0]) < 1e-9  # and at rest there


def test_the_braking_path_check_is_sound_and_cheap():
    f = SafetyFilter.from_description(ROBOT, SafetyConfig())
    workspace = f.workspace
    home = np.asarray(ROBOT.home_position, dtype=float)
    # Lever arms bound the tool's speed per joint: check against finite differences.
    rng = np.random.default_rng(3)
    for _ in range(50):
        q = home + rng.uniform(-1.0, 1.0, size=7)
        base = workspace.ee_position(q).copy()
        for j, arm in enumerate(workspace.lever_arms):
            dq = np.zeros(7)
            dq[j] = 1e-6
            moved = np.linalg.norm(workspace.ee_position(q + dq) - base) / 1e-6
            assert moved <= arm + 1e-6, (j, moved, arm)
    assert workspace.lever_arms[-1] == 0.0  # the gripper does not move the tool point
    # At rest far from every face: proved without any forward kinematics once a ball exists.
    q = home.tolist()
    workspace.braking_path_violation(q, q, [0.0] * 7, f._decel_step, f._inv_two_decel, DT)
    before = workspace.fk_calls
    small = [x + 1e-4 for x in q]
    velocity = [1e-4 / DT] * 7
    assert workspace.braking_path_violation(
        q, small, velocity, f._decel_step, f._inv_two_decel, DT
    ) == ("", 0.0)
    assert workspace.fk_calls == before


# ---------------------------------------------------------------- configuration errors


def test_config_errors_name_the_value_and_why():
    with pytest.raises(ValueError, match="lower limit 1 is not below the upper limit -1"):
        make_limits(lower=[1.0, -1.0, -1.0], upper=[-1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match=r"velocity has 2 values for 3 joints"):
        make_limits(velocity=[1.0, 1.0])
    with pytest.raises(ValueError, match=r"velocity_limits\[2\] \(elbow_joint\) = 4 .*above"):
        limits_from_description(ROBOT, SafetyConfig(velocity_limits=[1.0, 1.0, 4.0, 1, 1, 1, 0.1]))
    with pytest.raises(ValueError, match="has 6 values but the robot has 7 joints"):
        limits_from_description(ROBOT, SafetyConfig(acceleration_limits=[1.0] * 6))
    with pytest.raises(ValueError, match="below its minimum"):
        SafetyConfig(command_timeout=0.0)
    with pytest.raises(ValueError, match="6 per box"):
        SafetyConfig(keep_out_boxes=[0.0] * 5)
    with pytest.raises(ValueError, match="excludes the home pose"):
        SafetyFilter.from_description(ROBOT, SafetyConfig(workspace_upper=[0.85, 0.45, 0.1]))
    with pytest.raises(ValueError, match="keep-out box contains the home"):
        SafetyFilter.from_description(
            ROBOT, SafetyConfig(keep_out_boxes=[0.4, -0.1, 0.1, 0.5, 0.1, 0.3])
        )
    with pytest.raises(ValueError, match=r"z lower 0\.7 is not below z upper 0\.6"):
        SafetyFilter.from_description(
            ROBOT, SafetyConfig(workspace_lower=[0.2, -0.45, 0.7], workspace_upper=[1, 1, 0.6])
        )
    with pytest.raises(ValueError, match="leaves no range"):
        limits_from_description(ROBOT, SafetyConfig(position_margins=[0.5] * ROBOT.num_joints))
    missing = dataclasses.replace(ROBOT, joint_names=("no_such_joint", *ROBOT.joint_names[1:]))
    with pytest.raises(ValueError, match="joint 'no_such_joint' is not in the model"):
        SafetyFilter.from_description(missing, SafetyConfig())
    near_limit = np.asarray(ROBOT.home_position).copy()
    near_limit[1] = -0.01  # shoulder_lift, within 0.02 of its hard upper limit 0.0
    with pytest.raises(ValueError, match=r"home position -0\.01 of joint shoulder_lift_joint"):
        limits_from_description(
            dataclasses.replace(ROBOT, home_position=near_limit), SafetyConfig()
        )


def test_default_limits_come_from_the_description_with_margin():
    limits = limits_from_description(ROBOT, SafetyConfig(limit_scale=0.5))
    np.testing.assert_allclose(limits.velocity, np.asarray(ROBOT.velocity_limit) * 0.5)
    assert limits.upper[1] == pytest.approx(-0.02)
    assert limits.lower[-1] == 0.0  # the gripper closes fully


def test_resync_restarts_from_a_simulated_arm_s_new_pose_and_is_refused_otherwise():
    f, clock = started(allow_resync=False)
    ok, message = f.resync(clock.t)
    assert not ok and "allow_resync" in message
    f, clock = started(allow_resync=True)
    for _ in range(30):  # moving fast toward +0.8 on joint a
        step(f, clock, np.array([0.8, 0.0, 0.0]))
    assert f.commanded_velocity[0] > 0.5
    old_pose = f.commanded_position.copy()
    assert f.resync(clock.t)[0]
    # A joint state still queued from before the reset (the old pose) is not a start.
    f.submit_state(old_pose, clock.t, clock.t)
    assert f.tick(clock.t) is None
    # The sim reset the arm to a new start pose; the next state anchors the filter there.
    now = clock.advance() + DT
    clock.t = now
    start = np.array([-0.3, 0.2, 0.1])
    f.submit_state(start, now, now)
    result = f.tick(now)
    assert np.array_equal(result.command, start)  # held at the new pose, not dragged away
    assert result.state == HOLDING  # no command since the resync
    assert np.allclose(f.commanded_velocity, 0.0)
    out, result = step(f, clock, start)  # the first command after the reset: stay
    assert result.state == PASS and np.array_equal(out, start)


def test_a_stamped_resync_refuses_the_old_episode_even_when_the_filter_s_clock_lags():
    """The race the reset's stamp closes: old states and actions arrive after the resync,
    stamped after the filter's (lagging) clock but before the reset itself."""
    f, clock = started(allow_resync=True, command_timeout=1.0, state_timeout=1.0)
    for _ in range(30):
        step(f, clock, np.array([0.8, 0.0, 0.0]))
    old_pose = f.commanded_position.copy()
    lagging_now = clock.t
    reset_stamp = lagging_now + 5 * DT  # the sim ran on; this node's /clock is behind
    assert f.resync(lagging_now, after=reset_stamp)[0]
    late = lagging_now + 3 * DT  # after the filter's now + dt, before the reset
    assert f.submit_state(old_pose, late, lagging_now) is None
    assert f.tick(lagging_now) is None, "an old-pose state anchored the filter"
    refusal = f.submit_command(old_pose, reset_stamp, lagging_now)  # stamped at the reset
    assert refusal is not None and refusal.limit == "before_resync"
    start = np.array([-0.3, 0.2, 0.1])
    now = reset_stamp + DT
    assert f.submit_state(start, now, now) is None
    result = f.tick(now)
    assert np.array_equal(result.command, start) and result.state == HOLDING
    # An action computed from the new episode's state is followed again.
    assert f.submit_command(start, now, now) is None
    assert f.tick(now + DT).state == PASS


def test_without_the_reset_stamp_a_lagging_clock_lets_the_old_pose_anchor():
    """Why the stamp is needed: the fallback guard (now + one period) is beaten by lag."""
    f, clock = started(allow_resync=True, command_timeout=1.0, state_timeout=1.0)
    for _ in range(30):
        step(f, clock, np.array([0.8, 0.0, 0.0]))
    old_pose = f.commanded_position.copy()
    lagging_now = clock.t
    assert f.resync(lagging_now)[0]
    f.submit_state(old_pose, lagging_now + 3 * DT, lagging_now)
    result = f.tick(lagging_now)
    assert result is not None and np.array_equal(result.command, old_pose)

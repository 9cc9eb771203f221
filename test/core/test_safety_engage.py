"""Engaging the safety filter, and the exact position limits (clamped last)."""

from __future__ import annotations

import numpy as np

from simreal_ros.robot.description import load_robot_description
from simreal_ros.safety import HOLDING, PASS, JointLimits, SafetyConfig, SafetyFilter

DT = 0.01
NAMES = ("a", "b", "c")


def limits(**changes) -> JointLimits:
    values = dict(
        names=NAMES,
        lower=[-1.0, -1.0, 0.0],
        upper=[1.0, 1.0, 0.04],
        velocity=[1.0, 2.0, 0.5],
        acceleration=[10.0, 10.0, 10.0],
        jerk=[1e6, 1e6, 1e6],
        tracking_error=[0.5, 0.5, 0.5],
    )
    values.update(changes)
    return JointLimits(**values)


class Rig:
    """A filter driven tick by tick, with the arm following its command exactly."""

    def __init__(self, q0=(0.0, 0.0, 0.02), **config) -> None:
        config.setdefault("control_rate", 1.0 / DT)
        self.filter = SafetyFilter(limits(), SafetyConfig(**config))
        self.t = 1000.0
        self.measured = np.array(q0, float)
        assert self.filter.submit_state(self.measured, self.t, self.t) is None

    def step(self, command=None):
        self.t += DT
        f = self.filter
        f.submit_state(self.measured, self.t, self.t)
        if command is not None:
            assert f.submit_command(command, self.t, self.t) is None
        result = f.tick(self.t)
        self.measured = result.command.copy()
        return result


def test_the_sim_default_follows_at_once_and_the_real_default_waits_for_engage():
    target = [0.05, 0.0, 0.02]
    sim = Rig()
    assert sim.filter.engaged
    results = [sim.step(target) for _ in range(20)]
    assert results[-1].state == PASS and results[-1].engaged
    np.testing.assert_allclose(sim.measured, target)

    real = Rig(require_engage=True)
    assert not real.filter.engaged
    for _ in range(50):
        result = real.step(target)
        assert result.state == HOLDING and not result.engaged
    np.testing.assert_array_equal(real.measured, [0.0, 0.0, 0.02])  # nothing moved
    ok, message = real.filter.engage()
    assert ok and "next fresh policy action" in message
    results = [real.step(target) for _ in range(20)]
    assert results[-1].state == PASS and results[-1].engaged
    np.testing.assert_allclose(real.measured, target)

    unattended = Rig(require_engage=True, engage_at_start=True)
    assert unattended.filter.engaged


def test_disengaging_brakes_to_rest_within_the_limits_and_holds_there():
    rig = Rig()
    far = [0.9, -0.9, 0.02]
    for _ in range(30):
        rig.step(far)  # moving fast now
    speed = np.abs(rig.filter.commanded_velocity)
    assert speed.max() > 0.5
    ok, message = rig.filter.disengage("operator")
    assert ok and "braking to rest" in message
    outputs = [rig.measured.copy()]
    first = rig.step(far)
    assert ("disengaged", "") in {(i.limit, i.joint) for i in first.interventions}
    outputs.append(rig.measured.copy())
    for _ in range(100):
        result = rig.step(far)
        assert result.state == HOLDING and not result.engaged
        outputs.append(rig.measured.copy())
    velocity = np.diff(outputs, axis=0) / DT
    # Braking: the speed never grows and each change stays within the acceleration limit.
    assert np.all(np.diff(np.abs(velocity), axis=0) <= 1e-9)
    assert np.all(np.abs(np.diff(velocity, axis=0)) / DT <= 10.0 * (1 + 1e-9))
    np.testing.assert_array_equal(velocity[-1], 0.0)  # at rest
    assert np.all(np.abs(outputs[-1][:2] - far[:2]) > 0.01)  # not where the policy asked


def test_after_a_command_loss_an_operator_resume_can_be_required():
    for required in (False, True):
        rig = Rig(command_timeout=0.05, engage_after_command_loss=required)
        target = [0.05, 0.0, 0.02]
        for _ in range(10):
            rig.step(target)
        tripped = [rig.step() for _ in range(10)]  # the policy went silent
        assert any(r.watchdog_tripped for r in tripped)
        assert rig.filter.engaged is not required
        back = [0.1, 0.0, 0.02]
        results = [rig.step(back) for _ in range(30)]  # fresh actions again
        if required:
            assert all(r.state == HOLDING and not r.engaged for r in results)
            rig.filter.engage()
            results = [rig.step(back) for _ in range(30)]
        assert results[-1].state == PASS
        np.testing.assert_allclose(rig.measured, back)


def test_a_gripper_measured_past_its_limit_is_never_commanded_there():
    """A gripper that reads -3 um (its lower limit is 0): every command is >= 0, exactly."""
    rig = Rig(q0=(0.0, 0.0, -3e-6))
    outputs = []
    for k in range(300):
        rig.measured[2] = -3e-6 if k % 2 else rig.measured[2]  # the reading keeps dipping
        command = [0.0, 0.0, -0.01 if k % 40 < 20 else 0.05]  # and the policy asks past it
        outputs.append(rig.step(command).command.copy())
    q = np.array(outputs)
    assert q[:, 2].min() == 0.0 and q[:, 2].max() <= 0.04


def test_every_command_on_a_shipped_arm_is_inside_the_limits_exactly():
    """Hostile targets far past every limit, on the shipped arms' own limits and workspace."""
    for name in ("simreal_arm", "panda"):
        robot = load_robot_description(name)
        f = SafetyFilter.from_description(robot, SafetyConfig(check_stamps=False))
        lo, hi = f.limits.lower, f.limits.upper
        rng = np.random.default_rng(7)
        q = np.clip(np.asarray(robot.home_position, float), lo, hi)
        t = 0.0
        worst = 0.0
        for k in range(3000):
            t += DT
            f.submit_state(q, t, t)
            if k % 3 == 0:
                pick = rng.integers(0, 3, size=len(q))
                target = np.choose(pick, [lo - 1e-7, hi + 1e-7, lo + (hi - lo) * rng.random()])
                f.submit_command(target, t, t)
            out = f.tick(t).command
            worst = max(worst, float(np.max(lo - out)), float(np.max(out - hi)))
            q = q + 0.5 * (out - q)
        assert worst <= 0.0, (name, worst)

"""The sim bridge core without ROS: publish schedule in sim time, episodes, commands.

Every test runs on each shipped arm (``arm`` fixture).
"""

import numpy as np
import pytest

from simreal_ros.robot.description import SHIPPED_ROBOTS, load_robot_description
from simreal_ros.sim.bridge import BridgeSink, SimBridgeConfig, SimBridgeCore


@pytest.fixture(params=SHIPPED_ROBOTS, autouse=True)
def arm(request):
    return load_robot_description(request.param)


class Recorder(BridgeSink):
    def __init__(self, joints):
        self.joints = joints
        self.joint_stamps, self.pose_stamps, self.clock_stamps, self.statuses = [], [], [], []

    def joint_state(self, stamp, position, velocity, effort):
        assert position.shape == velocity.shape == effort.shape == (self.joints,)
        self.joint_stamps.append(stamp)

    def object_pose(self, stamp, position, orientation_wxyz):
        self.pose_stamps.append(stamp)

    def task_status(self, stamp, status):
        self.statuses.append(status)

    def clock(self, stamp):
        self.clock_stamps.append(stamp)


@pytest.fixture
def make_core(arm):
    def make(**settings):
        sink = Recorder(arm.num_joints)
        core = SimBridgeCore(SimBridgeConfig(mode="lockstep", **settings), sink, robot=arm)
        assert core.robot is arm
        core.reset(seed=5)
        return core, sink

    return make


def test_outputs_follow_their_rates_in_sim_time(make_core):
    core, sink = make_core(joint_state_rate_hz=250.0, object_pose_rate_hz=50.0)
    for stream in (sink.joint_stamps, sink.pose_stamps, sink.clock_stamps, sink.statuses):
        stream.clear()
    core.step(500)  # one simulated second
    assert len(sink.joint_stamps) == 250
    assert len(sink.pose_stamps) == 50
    assert len(sink.clock_stamps) == 250
    assert len(sink.statuses) == 20
    assert np.allclose(np.diff(sink.joint_stamps), 0.004)


def test_sim_time_continues_across_resets_and_episodes_are_reproducible(make_core):
    core, _ = make_core()
    cube = core.physics.object_position()
    core.step(100)
    before = core.sim_time
    first = core.episode_id
    core.reset(seed=5)
    assert core.sim_time == pytest.approx(before)
    assert core.episode_id != first
    assert np.array_equal(core.physics.object_position(), cube)
    with pytest.raises(ValueError, match="condition"):
        core.reset(seed=5, condition="sideways")


def test_bad_commands_are_counted_and_never_applied(make_core):
    core, _ = make_core()
    home = core.physics.command.copy()
    n = core.robot.num_joints
    for bad in ([0.0] * (n - 1), [float("inf")] * n):
        with pytest.raises(ValueError):
            core.submit_command(bad)
    assert core.commands_rejected == 2 and core.commands_accepted == 0
    assert np.array_equal(core.physics.command, home)
    core.submit_command(home + 0.01)
    assert core.commands_accepted == 1 and core.command_age() < 1.0


def test_time_limit_truncates_and_success_terminates(make_core):
    core, sink = make_core(episode_seconds=0.2)
    core.step(150)
    last = sink.statuses[-1]
    assert last.truncated and not last.done and last.seed == 5
    core.reset(seed=5)
    physics = core.physics
    physics.data.qpos[physics.cube_qpos : physics.cube_qpos + 2] = physics.goal()[:2]
    core.step(25)
    last = sink.statuses[-1]
    assert last.success and last.done and not last.truncated and last.reward > 0


def test_faster_than_real_time_the_task_is_judged_on_sim_time_between_publishes(make_core):
    # Statuses at 1 Hz: the wall-clock gate stays shut while the test steps (milliseconds).
    core, sink = make_core(task_status_rate_hz=1.0)
    published = -1
    while published != len(sink.statuses):  # until the gate is shut for about a second
        published = len(sink.statuses)
        core.step_faster_than_real_time(1)
    sink.statuses.clear()
    physics, every = core.physics, core._task_every
    core.step_faster_than_real_time(every - core.total_steps % every - 2)
    cube = slice(physics.cube_qpos, physics.cube_qpos + 2)
    physics.data.qpos[cube] = physics.goal()[:2]  # the cube passes through the goal...
    physics.data.qvel[:] = 0.0
    core.step_faster_than_real_time(3)  # ...across a task period's end...
    physics.data.qpos[cube] = physics.goal()[:2] + 0.2  # ...and out again
    core.step_faster_than_real_time(10)
    assert core.task_status().done  # the episode ended with the success, and stays ended
    assert [s.done and s.success for s in sink.statuses] == [True], (
        "the success judged between two wall-gated statuses was not published at once"
    )

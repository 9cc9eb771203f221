"""What depends on the arm holds on every shipped arm: kinematics, the policy spec, the
shipped checkpoints, and a checkpoint for one arm is refused on the other."""

import dataclasses

import numpy as np
import pytest

from simreal_ros.policy import checkpoint as ckpt
from simreal_ros.policy.spec import SpecConverter, default_spec
from simreal_ros.robot.description import SHIPPED_ROBOTS, load_robot_description
from simreal_ros.robot.kinematics import ToolKinematics
from simreal_ros.safety.workspace import Workspace
from simreal_ros.sim.environment import EnvironmentConfig, TaskEnvironment
from simreal_ros.sim.physics import ArmPhysics
from simreal_ros.training.torch_checkpoint import load_checkpoint


@pytest.fixture(params=SHIPPED_ROBOTS)
def arm(request):
    return load_robot_description(request.param)


def _random_configurations(robot, count, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(robot.position_lower, robot.position_upper, (count, robot.num_joints))


def test_every_forward_kinematics_agrees_with_the_simulator(arm):
    """The one kinematics, as the policy, the safety filter and the expert use it, gives
    the tool frame the simulated arm has, over random configurations."""
    physics = ArmPhysics(arm)
    policy_fk = ToolKinematics.for_robot(arm)
    workspace = Workspace(ToolKinematics.for_robot(arm), [-2, -2, -2], [2, 2, 2])
    expert_fk = ToolKinematics.for_robot(arm, arm_only=True)
    for q in _random_configurations(arm, 50):
        physics.reset(joint_positions=q)
        simulated = physics.ee_position()
        assert np.allclose(policy_fk(q), simulated, atol=1e-9)
        assert np.allclose(workspace.ee_position(q), simulated, atol=1e-9)
        assert np.allclose(expert_fk.pose(q[list(arm.arm_indices)])[0], simulated, atol=1e-9)


def test_inverse_kinematics_reaches_the_task_region_pointing_down(arm):
    kinematics = ToolKinematics.for_robot(arm, arm_only=True)
    home = np.asarray(arm.home_position)[list(arm.arm_indices)]
    for target in ([0.40, -0.12, 0.03], [0.62, 0.20, 0.03], [0.5, 0.0, 0.25]):
        q, error = kinematics.solve(np.asarray(target), home, iterations=300)
        assert error < 2e-3, (target, error)
        rotation = kinematics.pose(q)[1]
        assert rotation[2, 2] < -0.98  # the tool z axis points down
        assert np.trace(rotation.T @ kinematics.tool_down) > 2.9  # held as at home


def test_spec_and_observation_follow_the_joint_count(arm):
    spec = default_spec(arm, "push")
    n = arm.num_joints
    assert spec.act_dim == n
    assert spec.obs_dim == 2 * n + 22  # joints twice, then object, goal and tool fields
    assert spec.joint_units[arm.gripper_index] == "m"
    converter = SpecConverter(spec, ToolKinematics.for_robot(arm))
    env = TaskEnvironment(EnvironmentConfig(task="push"), robot=arm)
    observation = env.reset(seed=3)
    vector = converter.observation_vector(observation)
    assert vector.shape == (spec.obs_dim,)
    command = converter.command_from_action(np.ones(n), observation["joint_position"])
    assert np.all(command <= arm.position_upper) and command.shape == (n,)
    with pytest.raises(ValueError, match=f"the policy expects {n}"):
        converter.observation_vector({**observation, "joint_position": np.zeros(n + 1)})


@pytest.mark.parametrize("robot", SHIPPED_ROBOTS)
def test_the_shipped_push_checkpoint_loads_on_its_own_arm(robot):
    description = load_robot_description(robot)
    path = ckpt.shipped_checkpoint("push", description)
    assert (path / "policy.json").is_file(), f"the shipped push checkpoint of {robot} is missing"
    loaded = load_checkpoint(path, description, control_rate_hz=20.0)
    assert loaded.spec.joint_names == description.joint_names


@pytest.mark.parametrize(
    ("trained_on", "loaded_on"), [("simreal_arm", "panda"), ("panda", "simreal_arm")]
)
def test_a_checkpoint_for_one_arm_is_refused_on_the_other(trained_on, loaded_on):
    path = ckpt.shipped_checkpoint("push", load_robot_description(trained_on))
    other = load_robot_description(loaded_on)
    with pytest.raises(ValueError, match="joint_names") as caught:
        load_checkpoint(path, other, control_rate_hz=20.0)
    message = str(caught.value)
    assert loaded_on in message and "different robot" in message
    assert f"{other.num_joints} " in message  # names the joint count it expected


def test_a_checkpoint_is_refused_on_the_same_joints_with_other_limits(arm):
    path = ckpt.shipped_checkpoint("push", arm)
    narrower = dataclasses.replace(
        arm, position_upper=np.asarray(arm.position_upper) - 0.01, name=f"{arm.name}_narrow"
    )
    with pytest.raises(ValueError, match="other joint limits"):
        load_checkpoint(path, narrower, control_rate_hz=20.0)

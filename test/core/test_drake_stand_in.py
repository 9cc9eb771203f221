"""The second-engine stand-in (Drake): its generated model against MuJoCo's kinematics, each
effect's response against its setting, its profiles' checks, and that nothing in learning
reaches it."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from simreal_ros.robot.description import load_robot_description
from simreal_ros.sim import profiles
from simreal_ros.sim.drake_physics import DrakeArmPhysics
from simreal_ros.sim.drake_scene import rounded_box_points
from simreal_ros.sim.effects import EngineEffects
from simreal_ros.sim.physics import ArmPhysics

ELBOW = 2  # a big joint of the first arm, at mid-range in its home posture


@pytest.fixture(scope="module")
def robot():
    return load_robot_description("simreal_arm")


def settle(physics, command, seconds: float) -> np.ndarray:
    physics.set_command(command)
    physics.step(round(seconds / physics.timestep))
    return physics.joint_positions()


def at_home(robot, **effects) -> tuple[DrakeArmPhysics, np.ndarray]:
    physics = DrakeArmPhysics(robot, EngineEffects(**effects))
    home = np.array(robot.home_position)
    physics.reset(home)
    return physics, home


@pytest.mark.parametrize("arm", ["simreal_arm", "panda"])
def test_the_generated_model_has_mujocos_kinematics_within_a_millimetre(arm):
    robot = load_robot_description(arm)
    mujoco_arm, drake_arm = ArmPhysics(robot), DrakeArmPhysics(robot)
    rng = np.random.default_rng(7)
    for _ in range(25):
        q = rng.uniform(mujoco_arm.ctrl_lower, mujoco_arm.ctrl_upper)
        mujoco_arm.reset(q)
        drake_arm.reset(q)
        np.testing.assert_allclose(drake_arm.joint_positions(), q, atol=1e-12)
        assert np.linalg.norm(drake_arm.ee_position() - mujoco_arm.ee_position()) < 1e-3


def test_without_effects_the_servo_tracks_as_mujocos_does(robot):
    """The clean engine: a step of every arm joint settles on the target, as in MuJoCo."""
    physics, home = at_home(robot)
    target = home.copy()
    target[list(robot.arm_indices)] += 0.2
    reached = settle(physics, target, 1.0)
    np.testing.assert_allclose(
        reached[list(robot.arm_indices)], target[list(robot.arm_indices)], atol=2e-3
    )
    assert abs(physics.object_position()[2] - physics.cube_half_size) < 1e-3  # on the table


def test_backlash_leaves_a_dead_zone_of_its_width_after_a_reversal(robot):
    play = 0.04
    physics, home = at_home(robot, backlash_rad=play)
    forward = home.copy()
    forward[ELBOW] += 0.1
    q1 = settle(physics, forward, 1.0)[ELBOW]
    inside = forward.copy()
    inside[ELBOW] -= 0.75 * play  # back by less than the play: the link stays
    assert abs(settle(physics, inside, 1.0)[ELBOW] - q1) < 0.004
    beyond = forward.copy()
    beyond[ELBOW] -= play + 0.03  # back by the play and 0.03 more: it moves 0.03
    assert settle(physics, beyond, 1.0)[ELBOW] - q1 == pytest.approx(-0.03, abs=0.005)
    # Going forward the link trails the motor by half the play (it pushes on one side).
    assert q1 == pytest.approx(forward[ELBOW] - play / 2, abs=0.004)
    # Without backlash the same reversal moves the link all the way.
    clean, _ = at_home(robot)
    q1 = settle(clean, forward, 1.0)[ELBOW]
    assert settle(clean, inside, 1.0)[ELBOW] - q1 == pytest.approx(-0.75 * play, abs=0.004)


def test_a_deadband_ignores_errors_below_it(robot):
    band = 0.02
    physics, home = at_home(robot, deadband_rad=band)
    small = home.copy()
    small[ELBOW] += 0.5 * band
    assert abs(settle(physics, small, 0.8)[ELBOW] - home[ELBOW]) < 0.002
    large = home.copy()
    large[ELBOW] += 0.1
    error = large[ELBOW] - settle(physics, large, 1.0)[ELBOW]
    # Once inside the band nothing pulls it further: it coasts to rest short of the target,
    # where a servo without a deadband settles on it.
    assert 0.004 < error < band + 0.002
    clean, _ = at_home(robot)
    assert abs(large[ELBOW] - settle(clean, large, 1.0)[ELBOW]) < 0.002


def test_stiction_holds_a_joint_until_the_drive_breaks_it_away(robot):
    physics, home = at_home(robot, coulomb_friction_nm=2.0, stiction_nm=8.0)
    kp = physics.scene.gains[robot.joint_names[ELBOW]][0]
    nudge = home.copy()
    nudge[ELBOW] += 0.5 * 8.0 / kp  # a servo torque of half the stiction
    assert abs(settle(physics, nudge, 0.8)[ELBOW] - home[ELBOW]) < 2e-4
    push = home.copy()
    push[ELBOW] += 0.1  # twenty times the stiction: it breaks away, then sticks near it
    error = push[ELBOW] - settle(physics, push, 1.0)[ELBOW]
    assert abs(error) <= 8.0 / kp + 5e-4
    clean, _ = at_home(robot)
    assert abs(settle(clean, nudge, 0.8)[ELBOW] - nudge[ELBOW]) < 5e-4  # a free joint follows


def test_a_velocity_limited_servo_moves_its_set_point_no_faster_than_its_limit(robot):
    physics, home = at_home(robot, servo_velocity_limit=0.5)
    target = home.copy()
    target[ELBOW] += 0.6
    moved = settle(physics, target, 0.4)[ELBOW] - home[ELBOW]
    assert 0.1 < moved < 0.5 * 0.4 + 0.01
    assert settle(physics, target, 1.6)[ELBOW] == pytest.approx(target[ELBOW], abs=5e-3)


def test_a_current_limit_caps_the_servo_torque(robot):
    name = robot.joint_names[ELBOW]
    full, home = at_home(robot)
    half, _ = at_home(robot, servo_torque_scale=0.2)
    assert half.scene.effort_limits[name] == pytest.approx(0.2 * full.scene.effort_limits[name])
    target = home.copy()
    target[ELBOW] += 0.5
    fast = settle(full, target, 0.1)[ELBOW] - home[ELBOW]
    slow = settle(half, target, 0.1)[ELBOW] - home[ELBOW]
    assert slow < 0.6 * fast


def test_encoder_offsets_shift_the_reading_and_the_servo_regulates_the_reading(robot):
    offset = 0.03
    physics, home = at_home(robot, encoder_offset_rad=offset)
    arm = list(robot.arm_indices)
    np.testing.assert_allclose(
        physics.measured_joint_positions()[arm] - physics.joint_positions()[arm], offset
    )
    target = home.copy()
    target[ELBOW] += 0.1
    settle(physics, target, 1.0)
    assert physics.measured_joint_positions()[ELBOW] == pytest.approx(target[ELBOW], abs=2e-3)
    assert physics.joint_positions()[ELBOW] == pytest.approx(target[ELBOW] - offset, abs=2e-3)


def test_the_table_offset_raises_where_the_cube_rests(robot):
    physics, home = at_home(robot, table_height_offset_m=0.01)
    physics.reset(home, cube_position=np.array([0.5, 0.0, physics.cube_half_size]))
    settle(physics, home, 0.5)
    assert physics.object_position()[2] == pytest.approx(physics.cube_half_size + 0.01, abs=1e-3)


def test_the_cube_takes_its_mass_centre_and_rounded_edges(robot):
    physics, _ = at_home(robot, cube_mass_kg=0.4, cube_com_offset_m=[0.01, 0.0, -0.005],
                         cube_edge_radius_m=0.008)  # fmt: skip
    plant = physics.scene.plant
    inertia = physics.scene.cube.CalcSpatialInertiaInBodyFrame(physics.context)
    assert inertia.get_mass() == pytest.approx(0.4)
    np.testing.assert_allclose(inertia.get_com(), [0.01, 0.0, -0.005])
    assert plant.num_collision_geometries() > 0
    half = physics.cube_half_size
    points = rounded_box_points(half, 0.008)
    assert np.abs(points).max() == pytest.approx(half)  # faces where a sharp cube has them
    corner = np.linalg.norm(points, axis=0).max()
    assert corner == pytest.approx(np.sqrt(3) * (half - 0.008) + 0.008, abs=1e-3)
    assert corner < np.sqrt(3) * half - 0.004  # the corners are cut


def test_latency_delays_the_command_by_its_steps(robot):
    physics, home = at_home(robot)
    physics.set_dynamics({"latency_steps": 10})
    target = home.copy()
    target[ELBOW] += 0.2
    physics.set_command(target)
    physics.step(9)
    assert abs(physics.joint_positions()[ELBOW] - home[ELBOW]) < 1e-4
    physics.step(20)
    assert physics.joint_positions()[ELBOW] - home[ELBOW] > 0.01


def test_a_gain_change_rebuilds_the_servo_with_it(robot):
    physics, _ = at_home(robot)
    name = robot.joint_names[ELBOW]
    kp = physics.scene.gains[name][0]
    physics.set_dynamics({f"gain.{name}": 0.25 * kp, "mass.cube": 0.3})
    physics.step(1)
    assert physics.scene.gains[name][0] == pytest.approx(0.25 * kp)
    assert physics.scene.cube.CalcSpatialInertiaInBodyFrame(
        physics.context
    ).get_mass() == pytest.approx(0.3)
    physics.restore_nominal()
    physics.step(1)
    assert physics.scene.gains[name][0] == pytest.approx(kp)


def test_the_shipped_configurations_load_as_stand_ins_on_the_second_engine():
    for name in ("drake_clean", "drake_worn"):
        profile = profiles.load_profile(name)
        assert profile.is_stand_in and profile.engine == "drake"
    worn = profiles.load_profile("drake_worn").effects
    assert worn.backlash_rad > 0 and worn.stiction_nm > 0 and worn.servo_velocity_limit > 0
    assert profiles.load_profile("drake_clean").effects == EngineEffects()


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("engine: bullet\n", "engine 'bullet'"),
        ("engine: drake\neffects: {backlash: 0.01}\n", "backlash"),
        ("engine: drake\neffects: {backlash_rad: 0.5}\n", "above its maximum"),
        ("effects: {backlash_rad: 0.01}\n", "need a second engine"),
        ("engine: drake\neffects: {cube_com_offset_m: [0.01]}\n", "[x, y, z]"),
    ],
)
def test_a_bad_profile_is_refused_naming_the_file_and_setting(tmp_path, text, complaint):
    path = tmp_path / "gap.yaml"
    path.write_text("profile: gap\nstand_in: true\n" + text)
    with pytest.raises(ValueError, match=r"gap\.yaml") as refused:
        profiles.load_profile(str(path))
    assert complaint in str(refused.value)


def test_a_per_joint_list_of_the_wrong_length_is_refused(robot):
    with pytest.raises(ValueError, match="one per arm joint"):
        DrakeArmPhysics(robot, EngineEffects(backlash_rad=[0.01, 0.02]))


def test_nothing_in_learning_reaches_the_second_engine():
    """Adaptation refuses its profiles (as every stand_in: true profile), and no learning,
    identification or training module imports the engine."""
    from simreal_ros.learner import adaptation

    with pytest.raises(adaptation.StandInProfileError):
        adaptation.model_profile("drake_worn")
    package = Path(__file__).resolve().parents[2] / "simreal_ros"
    for folder in ("learner", "sysid", "training", "adapters", "policy"):
        for path in (package / folder).rglob("*.py"):
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    names = [node.module or ""]
                for name in names:
                    assert "drake" not in name, f"{path} imports {name}"

"""Physics controller interface, named dynamics and the three dynamics profiles."""

import numpy as np
import pytest

from simreal_ros.robot.description import load_robot_description
from simreal_ros.sim.environment import EnvironmentConfig, TaskEnvironment
from simreal_ros.sim.physics import ArmPhysics
from simreal_ros.sim.profiles import load_profile, profiles_dir

ARM = load_robot_description()


@pytest.fixture(scope="module")
def physics():
    return ArmPhysics(ARM)


def test_command_moves_joints_to_targets(physics):
    physics.restore_nominal()
    physics.reset()
    target = physics.robot.home_position + np.array([0.2, -0.1, 0.1, 0.1, -0.1, 0.2, 0.02])
    physics.set_command(target)
    physics.step(1000)
    assert np.allclose(physics.joint_positions(), target, atol=2e-3)


@pytest.mark.parametrize(
    "bad", [np.zeros(6), np.zeros(8), np.array([np.nan] * 7), np.array([np.inf] * 7)]
)
def test_bad_command_is_refused_and_not_applied(physics, bad):
    physics.restore_nominal()
    physics.reset()
    before = physics.command.copy()
    with pytest.raises(ValueError, match="command"):
        physics.set_command(bad)
    assert np.array_equal(physics.command, before)


def test_latency_delays_the_command_by_whole_physics_steps(physics):
    physics.restore_nominal()
    physics.set_dynamics({"latency_steps": 5})
    physics.reset()
    target = physics.robot.home_position + 0.1
    physics.set_command(target)
    physics.step(4)
    assert not np.allclose(
        physics.command, np.clip(target, physics.ctrl_lower, physics.ctrl_upper)
    )
    physics.step(1)
    physics.step(1)
    assert np.allclose(physics.command, np.clip(target, physics.ctrl_lower, physics.ctrl_upper))
    physics.restore_nominal()


def test_mass_change_updates_derived_constants(physics):
    physics.restore_nominal()
    physics.reset()
    physics.set_dynamics({"mass.cube": 0.3})
    assert physics.get_dynamics(["mass.cube"])["mass.cube"] == pytest.approx(0.3)
    assert physics.model.body_subtreemass[physics.cube_body] == pytest.approx(0.3)
    physics.restore_nominal()
    assert physics.get_dynamics(["mass.cube"])["mass.cube"] == pytest.approx(0.1)


def test_unknown_or_invalid_dynamics_are_refused_before_any_change(physics):
    physics.restore_nominal()
    with pytest.raises(ValueError, match="unknown dynamics parameter"):
        physics.set_dynamics({"mass.cube": 0.5, "mass.nonexistent": 1.0})
    with pytest.raises(ValueError, match="latency_steps"):
        physics.set_dynamics({"latency_steps": 1.5})
    assert physics.get_dynamics(["mass.cube"])["mass.cube"] == pytest.approx(0.1)


def test_profiles_differ_and_real_twin_is_its_own_file(physics):
    nominal = physics.nominal_dynamics
    rng = np.random.default_rng(1)
    assert load_profile("nominal").sample(nominal, rng) == {}
    randomized = load_profile("randomized")
    first = randomized.sample(nominal, np.random.default_rng(1))
    second = randomized.sample(nominal, np.random.default_rng(2))
    assert first != second
    assert randomized.randomize_each_reset
    twin = load_profile("real_twin")
    assert twin.is_stand_in and not randomized.is_stand_in
    assert (profiles_dir() / "real_twin.yaml").exists()
    gap = twin.sample(nominal, np.random.default_rng(1))
    assert gap == twin.sample(nominal, np.random.default_rng(2))  # fixed, not random


def _randomized_range(physics, name):
    """[low, high] of one parameter under randomized.yaml (its nominal value if untouched)."""
    nominal = physics.nominal_dynamics
    draws = [
        load_profile("randomized")
        .sample(nominal, np.random.default_rng(seed))
        .get(name, nominal.get(name, 0.0))
        for seed in range(400)
    ]
    return min(draws), max(draws)


def test_the_stand_in_gap_lies_outside_the_randomization_the_policy_saw(physics):
    """Every parameter real_twin changes (sensor noise aside) lies outside the range the
    shipped policy was pretrained on, so the stand-in is a gap and not a training case."""
    nominal = physics.nominal_dynamics
    gap = load_profile("real_twin").sample(nominal, np.random.default_rng(0))
    changed = [n for n in gap if n != "obs_noise" and gap[n] != pytest.approx(nominal[n])]
    assert {n.split(".")[0] for n in changed} >= {"gain", "mass", "latency_steps"}
    for name in changed:
        low, high = _randomized_range(physics, name)
        assert not low <= gap[name] <= high, f"{name} = {gap[name]} inside [{low}, {high}]"
    mild = load_profile("real_twin_mild")
    assert mild.is_stand_in
    for name, value in mild.sample(nominal, np.random.default_rng(0)).items():
        if name.startswith(("mass", "damping", "gain")):
            low, high = _randomized_range(physics, name)
            assert low <= value <= high, f"real_twin_mild {name} outside [{low}, {high}]"


def test_a_profile_loads_from_a_path_and_bad_paths_are_named(tmp_path):
    mine = tmp_path / "my_arm.yaml"
    mine.write_text("profile: my_arm\nstand_in: true\nscale:\n  gain.*: 0.5\n")
    profile = load_profile(str(mine))
    assert profile.name == "my_arm" and profile.is_stand_in
    env = TaskEnvironment(EnvironmentConfig(profile=str(mine)), robot=ARM)
    env.reset(seed=3)
    nominal = env.physics.nominal_dynamics["gain.elbow_joint"]
    assert env.dynamics["gain.elbow_joint"] == pytest.approx(0.5 * nominal)
    with pytest.raises(ValueError, match="does not exist"):
        EnvironmentConfig(profile=str(tmp_path / "missing.yaml"))


def test_bad_profile_files_are_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown dynamics profile"):
        load_profile("realistic")
    bad = tmp_path / "bad.yaml"
    bad.write_text("profile: bad\nscale:\n  mass.cube: [2.0, 1.0]\n")
    with pytest.raises(ValueError, match="low"):
        load_profile(bad)
    typo = tmp_path / "typo.yaml"
    typo.write_text("profile: typo\nscale:\n  mass.cuube: 2.0\n")
    with pytest.raises(ValueError, match="matches no dynamics"):
        load_profile(typo).sample(ArmPhysics(ARM).nominal_dynamics, np.random.default_rng(0))


@pytest.mark.parametrize("broad_first", [True, False])
def test_the_narrower_key_sets_a_parameter_whatever_the_order(tmp_path, broad_first):
    # A user's arm (or identification) names one joint beside a group: the joint keeps its
    # own value, the group's covers the rest, in either order of the keys.
    keys = ["  gain.*: [0.75, 1.25]", "  gain.elbow_joint: 0.2"]
    path = tmp_path / "overlap.yaml"
    lines = keys if broad_first else keys[::-1]
    path.write_text("profile: overlap\nscale:\n" + "\n".join(lines) + "\n")
    nominal = ArmPhysics(ARM).nominal_dynamics
    for seed in range(5):
        values = load_profile(path).sample(nominal, np.random.default_rng(seed))
        assert values["gain.elbow_joint"] == pytest.approx(0.2 * nominal["gain.elbow_joint"])
        shoulder = values["gain.shoulder_lift_joint"] / nominal["gain.shoulder_lift_joint"]
        assert 0.75 <= shoulder <= 1.25


def _cube_table_frictions(physics, factor: float) -> set[float]:
    """The sliding friction MuJoCo gives the cube's contacts with the table, with the cube's
    own friction at ``factor`` times nominal (the cube resting on the table)."""
    import mujoco

    physics.restore_nominal()
    nominal = physics.get_dynamics(["friction.cube_geom"])["friction.cube_geom"]
    physics.set_dynamics({"friction.cube_geom": nominal * factor})
    physics.reset()
    mujoco.mj_forward(physics.model, physics.data)
    cube, table = physics.model.geom("cube_geom").id, physics.model.geom("table").id
    found = {
        round(float(c.friction[0]), 9)
        for c in physics.data.contact[: physics.data.ncon]
        if {int(c.geom1), int(c.geom2)} == {cube, table}
    }
    physics.restore_nominal()
    return found


def test_friction_floor_is_where_mujoco_stops_using_the_geoms_friction(physics):
    """Below the floor the table's friction decides the cube's contacts (MuJoCo's larger of
    the two), above it the cube's; checked on the contacts MuJoCo itself builds."""
    from simreal_ros.sim.physics import friction_floor

    model = physics.model
    cube, table = model.geom("cube_geom").id, model.geom("table").id
    floor, decider = friction_floor(model, [cube])
    table_friction = model.geom_friction[table, 0]
    assert decider == table
    assert floor == pytest.approx(table_friction / model.geom_friction[cube, 0])
    below = [_cube_table_frictions(physics, floor * f) for f in (0.3, 0.7, 0.99)]
    assert all(found == {round(float(table_friction), 9)} for found in below), below
    above = _cube_table_frictions(physics, floor * 1.2)
    assert above == {round(float(table_friction * 1.2), 9)}
    # The table's own floor: the cube (0.6) is the lowest friction it touches.
    assert friction_floor(model, [table])[1] == cube
    # Scaled together, they decide their shared contact at any factor.
    assert friction_floor(model, [cube, table])[0] == 0.0
    # A higher priority decides at any factor; a lower one never (other partners remain).
    priority = model.geom_priority.copy()
    try:
        model.geom_priority[cube] = 1
        assert friction_floor(model, [cube]) == (0.0, table)
        model.geom_priority[cube] = -1
        assert friction_floor(model, [cube])[0] > floor
    finally:
        model.geom_priority[:] = priority


def test_friction_floor_leaves_out_explicit_pairs_and_excluded_bodies():
    import mujoco

    from simreal_ros.sim.physics import friction_floor

    def model(contact: str) -> mujoco.MjModel:
        return mujoco.MjModel.from_xml_string(f"""<mujoco><worldbody>
            <geom name="floor" type="plane" size="1 1 .1" friction="0.5"/>
            <body name="box" pos="0 0 .05"><freejoint/>
              <geom name="box" type="box" size=".05 .05 .05" friction="0.6"/></body>
            <body name="ball" pos=".3 0 .05"><freejoint/>
              <geom name="ball" size=".05" friction="0.9"/></body>
            </worldbody><contact>{contact}</contact></mujoco>""")

    plain = model("")
    box = plain.geom("box").id
    assert friction_floor(plain, [box]) == (pytest.approx(0.5 / 0.6), plain.geom("floor").id)
    paired = model('<pair geom1="box" geom2="floor" friction="0.3 0.3 0.005 0.0001 0.0001"/>')
    assert friction_floor(paired, [box]) == (pytest.approx(0.9 / 0.6), paired.geom("ball").id)
    both = model('<pair geom1="box" geom2="floor"/><exclude body1="box" body2="ball"/>')
    assert friction_floor(both, [box]) == (float("inf"), -1)

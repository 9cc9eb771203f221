"""Physics controller interface, named dynamics and the three dynamics profiles."""

import numpy as np
import pytest

from simreal_ros.sim.physics import ArmPhysics
from simreal_ros.sim.profiles import load_profile, profiles_dir


@pytest.fixture(scope="module")
def physics():
    return ArmPhysics()


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
    assert twin.is_stand_in
    assert (profiles_dir() / "real_twin.yaml").exists()
    gap = twin.sample(nominal, np.random.default_rng(1))
    assert gap == twin.sample(nominal, np.random.default_rng(2))  # fixed, not random
    changed = [name for name in gap if gap[name] != pytest.approx(nominal[name])]
    kinds = {name.split(".")[0] for name in changed}
    assert {"mass", "friction", "damping", "gain", "latency_steps", "obs_noise"} <= kinds


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
        load_profile(typo).sample(ArmPhysics().nominal_dynamics, np.random.default_rng(0))

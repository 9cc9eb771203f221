"""The scene's appearance: what the camera sees changes, the physics does not, offsets never
accumulate, and a profile's ``visual:`` section is read and checked."""

from __future__ import annotations

import numpy as np
import pytest

from simreal_ros.sim.rendering import ensure_headless_gl

ensure_headless_gl()

from simreal_ros.robot.description import load_robot_description  # noqa: E402
from simreal_ros.sim.environment import EnvironmentConfig, TaskEnvironment  # noqa: E402
from simreal_ros.sim.profiles import load_profile, load_profile_file  # noqa: E402
from simreal_ros.sim.rendering import CameraRenderer  # noqa: E402
from simreal_ros.sim.visuals import (  # noqa: E402
    NOMINAL,
    CameraObservations,
    SceneAppearance,
    VisualRandomization,
    VisualSettings,
)

ROBOT = load_robot_description()


def red_centroid(image: np.ndarray) -> np.ndarray:
    """Where the (red) cube is in a frame, in pixels (x, y)."""
    r, g, b = (image[..., k].astype(int) for k in range(3))
    ys, xs = np.nonzero((r > 40) & (r > 2 * g) & (r > 2 * b))
    assert len(xs) >= 3, "the cube is not in view"
    return np.array([xs.mean(), ys.mean()])


@pytest.fixture
def scene():
    env = TaskEnvironment(EnvironmentConfig(task="push", profile="nominal"), robot=ROBOT)
    env.reset(seed=3, condition="train")
    renderer = CameraRenderer(env.physics, camera="workspace", width=96, height=72)
    try:
        yield env, renderer, SceneAppearance(env.physics, "workspace")
    finally:
        renderer.close()


def test_nominal_is_the_scene_files_and_offsets_do_not_accumulate(scene):
    _env, renderer, appearance = scene
    before = renderer.render().copy()
    appearance.apply(NOMINAL)
    np.testing.assert_array_equal(renderer.render(), before)
    moved = VisualSettings(camera_offset_m=(0.03, 0.0, 0.0), camera_rotation_deg=(0, 2.0, 0))
    for _ in range(3):  # applied three times: one offset, not three
        appearance.apply(moved)
    shifted = renderer.render().copy()
    appearance.apply(moved)
    np.testing.assert_array_equal(renderer.render(), shifted)
    # The view really moved: the cube's red pixels are elsewhere in the frame.
    assert np.linalg.norm(red_centroid(shifted) - red_centroid(before)) > 1.0
    appearance.apply(NOMINAL)
    np.testing.assert_array_equal(renderer.render(), before)


def test_appearance_changes_pixels_and_never_the_physics(scene):
    env, renderer, appearance = scene
    state = (env.physics.data.qpos.copy(), env.physics.data.qvel.copy())
    before = renderer.render().copy()
    settings = VisualRandomization().sample(np.random.default_rng(0))
    appearance.apply(settings)
    after = renderer.render().copy()
    assert np.abs(after.astype(int) - before).mean() > 2
    np.testing.assert_array_equal(env.physics.data.qpos, state[0])
    np.testing.assert_array_equal(env.physics.data.qvel, state[1])


def test_randomization_stays_inside_its_ranges():
    ranges = VisualRandomization()
    rng = np.random.default_rng(1)
    for _ in range(200):
        s = ranges.sample(rng)
        assert ranges.light_diffuse[0] <= s.light_diffuse <= ranges.light_diffuse[1]
        assert max(abs(v) for v in s.camera_offset_m) <= ranges.camera_offset_m
        assert max(abs(v) for v in s.camera_rotation_deg) <= ranges.camera_rotation_deg
        for got, nominal in zip(s.cube_rgb, NOMINAL.cube_rgb, strict=True):
            assert abs(got - nominal) <= ranges.cube_rgb + 1e-12


def test_visual_stand_in_lies_outside_the_pretraining_ranges():
    """The visual stand-in's premise: no pretraining episode looked like it."""
    profile = load_profile("visual_shift")
    assert profile.is_stand_in and profile.visual is not None
    v, ranges = profile.visual, VisualRandomization()
    assert not ranges.light_diffuse[0] <= v.light_diffuse <= ranges.light_diffuse[1]
    assert max(abs(x) for x in v.camera_offset_m) > ranges.camera_offset_m
    assert max(abs(x) for x in v.camera_rotation_deg) > ranges.camera_rotation_deg
    assert max(abs(a - b) for a, b in zip(v.cube_rgb, NOMINAL.cube_rgb, strict=True)) > 0.1


def test_camera_observations_carry_the_frame(scene):
    from simreal_ros.sim.gym_env import ArmTaskEnv

    env = CameraObservations(
        ArmTaskEnv(task="push", profile="nominal", robot=ROBOT), "workspace", 64, 48
    )
    try:
        observation, _ = env.reset(seed=1, options={"condition": "train"})
        assert observation["image"].shape == (48, 64, 3)
        assert observation["image"].dtype == np.uint8
        moved = env.step(observation["joint_position"] + 0.05)[0]
        assert moved["image"].shape == (48, 64, 3)
    finally:
        env.close()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("visual: {cube_rgb: [1.5, 0, 0]}", "each in \\[0, 1\\]"),
        ("visual: {glare: 1}", "unknown field"),
        ("visual: {camera_offset_m: [0.5, 0, 0]}", "at most 0.2 m"),
        ("visual: [1, 2]", "visual must be a mapping"),
        ("engine: drake\nvisual: {light_diffuse: 0.5}", "needs the MuJoCo renderer"),
    ],
)
def test_bad_visual_sections_are_refused(tmp_path, text, message):
    path = tmp_path / "p.yaml"
    path.write_text(f"profile: p\nstand_in: true\n{text}\n")
    with pytest.raises(ValueError, match=message):
        load_profile_file(path)

"""The camera from the arm's own frames: a moved camera is found from frames rendered under
another light, its warp puts the cube back where the trained camera sees it, a camera where
it was trained is left unwarped, the light and table are fitted to the frames against the
sim's renders, and a version carries the warp to every frame."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from simreal_ros.sim.rendering import ensure_headless_gl

ensure_headless_gl()

from simreal_ros.policy.camera import CameraSpec, normalized_image, rectified_frames  # noqa: E402
from simreal_ros.policy.spec import default_spec, version_spec  # noqa: E402
from simreal_ros.robot.description import load_robot_description  # noqa: E402
from simreal_ros.sim.physics import ArmPhysics  # noqa: E402
from simreal_ros.sim.rendering import CameraRenderer  # noqa: E402
from simreal_ros.sim.visuals import SceneAppearance, VisualSettings  # noqa: E402
from simreal_ros.sysid.camera_pose import (  # noqa: E402
    CameraPoseConfig,
    CameraPoseFit,
    camera_projections,
    identify_camera_pose,
    plane_homography,
    rectification,
)

ROBOT = load_robot_description()
CAMERA = CameraSpec(width=64, height=48)
# The test's own camera error and look (not any stand-in's): a camera 2.5 cm off and
# turned a few degrees, under a dim, warm light with a grey-green table.
MOVED = VisualSettings(
    light_diffuse=0.35, light_ambient=0.3, light_tint=(1.0, 0.85, 0.7),
    table_rgb=(0.4, 0.45, 0.38), cube_rgb=(0.2, 0.3, 0.8),
    camera_offset_m=(-0.02, 0.025, 0.01), camera_rotation_deg=(-2.0, 2.5, 1.5),
)  # fmt: skip
FAST = CameraPoseConfig(frames=14, held_out_frames=14, evaluations=160)


def arm_frames(settings: VisualSettings, count: int, seed: int = 0):
    """Frames of the arm at random joint positions around home, with the cube on the
    table, seen under ``settings``; and the joint positions."""
    rng = np.random.default_rng(seed)
    physics = ArmPhysics(ROBOT)
    scene = SceneAppearance(physics, CAMERA.camera_name)
    renderer = CameraRenderer(physics, CAMERA.camera_name, CAMERA.width, CAMERA.height)
    home = np.asarray(ROBOT.home_position)
    frames, joints = [], []
    try:
        for _ in range(count):
            q = home + rng.uniform(-0.35, 0.35, len(home))
            q = np.clip(q, ROBOT.position_lower, ROBOT.position_upper)
            cube = np.array([rng.uniform(0.4, 0.6), rng.uniform(-0.15, 0.15), 0.025])
            physics.reset(joint_positions=q, cube_position=cube)
            scene.apply(settings)
            frames.append(renderer.render().copy())
            joints.append(physics.joint_positions())
    finally:
        renderer.close()
    return np.stack(frames), np.stack(joints)


def cube_centroid(frame: np.ndarray, rgb) -> np.ndarray:
    """The pixel centroid of the cube's colour (the frame's pixels nearest it)."""
    distance = np.linalg.norm(frame.astype(float) - 255 * np.asarray(rgb), axis=-1)
    ys, xs = np.nonzero(distance < np.percentile(distance, 0.5))
    return np.array([xs.mean(), ys.mean()])


@pytest.fixture(scope="module")
def moved_frames():
    return arm_frames(MOVED, 40)


@pytest.fixture(scope="module")
def moved_fit(moved_frames):
    return identify_camera_pose(*moved_frames, ROBOT, CAMERA, FAST)


def test_a_moved_camera_is_found_from_frames_under_another_light(moved_fit):
    fit = moved_fit
    print(fit)
    assert fit.accepted
    assert fit.held_out_after > fit.held_out_before + 0.1
    # Position and rotation trade off (a step along the line of sight barely changes the
    # image), so what is checked is what the policy sees: where the fitted camera puts the
    # workspace's points at the cube's height, against where the true one does.
    projections, height = camera_projections(
        ROBOT, CAMERA,
        [(fit.offset_m, fit.rotation_deg), (MOVED.camera_offset_m, MOVED.camera_rotation_deg)],
    )  # fmt: skip
    fitted, true = (plane_homography(k, pose, height) for k, pose in projections)
    grid = np.array([[x, y, 1.0] for x in (0.35, 0.5, 0.65) for y in (-0.2, 0.0, 0.2)]).T
    pixels = [(h @ grid)[:2] / (h @ grid)[2] for h in (fitted, true)]
    error = np.linalg.norm(pixels[0] - pixels[1], axis=0)
    print("workspace points' pixel error", np.round(error, 2))
    assert error.max() < 1.2
    assert np.allclose(fit.rotation_deg, MOVED.camera_rotation_deg, atol=1.5)


def test_the_warp_puts_the_cube_where_the_trained_camera_sees_it(moved_fit):
    warp = rectification(ROBOT, CAMERA, moved_fit)
    camera = CAMERA.corrected(rectification=warp)
    physics = ArmPhysics(ROBOT)
    scene = SceneAppearance(physics, CAMERA.camera_name)
    renderer = CameraRenderer(physics, CAMERA.camera_name, CAMERA.width, CAMERA.height)
    errors, unwarped = [], []
    try:
        for cube in ([0.45, -0.12, 0.025], [0.55, 0.12, 0.025], [0.62, -0.05, 0.025]):
            physics.reset(cube_position=np.array(cube))
            scene.apply(dataclasses.replace(MOVED, camera_offset_m=(0, 0, 0),
                                            camera_rotation_deg=(0, 0, 0)))  # fmt: skip
            trained = cube_centroid(renderer.render(), MOVED.cube_rgb)
            scene.apply(MOVED)
            seen = renderer.render().copy()
            warped = rectified_frames(seen, camera)
            errors.append(np.linalg.norm(cube_centroid(warped, MOVED.cube_rgb) - trained))
            unwarped.append(np.linalg.norm(cube_centroid(seen, MOVED.cube_rgb) - trained))
    finally:
        renderer.close()
    print("cube centroid error, warped", errors, "as seen", unwarped)
    # At 64x48 px the camera's error moves the cube 1.5-3.5 px; the warp leaves a fraction.
    assert max(errors) < 1.5 and np.mean(errors) < 0.5 * np.mean(unwarped)


def test_a_camera_where_it_was_trained_is_not_warped():
    frames, joints = arm_frames(
        dataclasses.replace(MOVED, camera_offset_m=(0, 0, 0), camera_rotation_deg=(0, 0, 0)), 32, 1
    )
    fit = identify_camera_pose(frames, joints, ROBOT, CAMERA, FAST)
    print(fit)
    # Either the search stays home or its gain does not hold on the held-out frames.
    assert not fit.accepted or (
        np.abs(fit.rotation_deg).max() < 0.5 and np.abs(fit.offset_m).max() < 0.005
    )


def test_bad_frames_and_joints_are_clear_errors():
    frames, joints = arm_frames(MOVED, 16)
    with pytest.raises(ValueError, match="one row of"):
        identify_camera_pose(frames, joints[:, :2], ROBOT, CAMERA, FAST)
    with pytest.raises(ValueError, match="uint8"):
        identify_camera_pose(frames.astype(float), joints, ROBOT, CAMERA, FAST)
    with pytest.raises(ValueError, match="at least 16"):
        identify_camera_pose(frames[:10], joints[:10], ROBOT, CAMERA, FAST)
    with pytest.raises(ValueError, match="NaN"):
        identify_camera_pose(frames, np.where(joints > 0, np.nan, joints), ROBOT, CAMERA, FAST)
    with pytest.raises(ValueError, match="resolution"):
        identify_camera_pose(frames[:, :40], joints, ROBOT, CAMERA, FAST)


def test_a_version_carries_the_warp_and_a_bad_one_is_refused():
    spec = dataclasses.replace(default_spec(ROBOT, "push", 20.0), camera=CAMERA)
    shift = np.array([[1.0, 0.0, 3.0], [0.0, 1.0, -2.0], [0.0, 0.0, 1.0]])
    warped_spec = version_spec(spec, {"camera_rectification": shift.ravel().tolist()})
    assert warped_spec.camera.rectification == tuple(shift.ravel())
    # The base's fingerprint does not change with the field's existence.
    assert "rectification" not in spec.to_dict()["camera"]
    image = np.zeros((CAMERA.height, CAMERA.width, 3), np.uint8)
    image[20, 30] = 255
    moved = rectified_frames(image, warped_spec.camera)
    assert moved[18, 33].max() == 255 and moved[20, 30].max() == 0
    # The policy's input is the warped frame's.
    assert np.array_equal(normalized_image(image, warped_spec.camera),
                          normalized_image(moved, CAMERA))  # fmt: skip
    with pytest.raises(ValueError, match="9 finite numbers"):
        version_spec(spec, {"camera_rectification": [1.0, 2.0]})
    with pytest.raises(ValueError, match="singular"):
        version_spec(spec, {"camera_rectification": [0.0] * 9})
    with pytest.raises(ValueError, match="state policy"):
        version_spec(dataclasses.replace(spec, camera=None), {"camera_rectification": [1.0] * 9})


def test_the_fit_records_what_it_measured(moved_fit):
    record = moved_fit.to_dict()
    assert CameraPoseFit(**record) == moved_fit
    assert record["frames_fitted"] == 14 and record["frames_held_out"] == 14


def test_the_scene_look_is_identified_from_frames_and_rendered_in_pairs(moved_frames, moved_fit):
    """The light and table fitted on the frames explain held-out frames far better than the
    sim's own look; adaptation then renders that look with each instant's pair as the
    policy was trained to see it."""
    from simreal_ros.sim.gym_env import ArmTaskEnv
    from simreal_ros.sim.visuals import NOMINAL, CameraObservations, VisualJitter
    from simreal_ros.sysid.camera_look import LookConfig, identify_look

    frames, joints = moved_frames
    fit = identify_look(
        frames, joints, ROBOT, CAMERA, moved_fit.offset_m, moved_fit.rotation_deg,
        LookConfig(frames=10, held_out_frames=10, evaluations=250),
    )  # fmt: skip
    print(fit)
    assert fit.accepted
    assert fit.held_out_error_after < 0.5 * fit.held_out_error_before
    identified = VisualSettings(**fit.look, camera_offset_m=moved_fit.offset_m,
                                camera_rotation_deg=moved_fit.rotation_deg)  # fmt: skip
    env = CameraObservations(
        ArmTaskEnv(task="push", profile="nominal", robot=ROBOT), CAMERA.camera_name,
        CAMERA.width, CAMERA.height, VisualJitter(identified), np.random.default_rng(0),
    )  # fmt: skip
    try:
        observation, _ = env.reset(seed=3, options={"condition": "train"})
        paired = env.render_as(NOMINAL)
        again = env.renderer.render().copy()
    finally:
        env.close()
    # The episode's own look is put back after the paired render, and the pair differs.
    np.testing.assert_array_equal(again, observation["image"])
    assert np.abs(paired.astype(int) - observation["image"]).mean() > 10


def test_alignment_with_joints_writes_the_cameras_warp_into_the_version(tmp_path, moved_frames):
    """`simreal align`'s path with the frames' joint positions: the camera's pose is
    identified, and the adapter's metadata carries its warp, which the deployed version
    applies."""
    import torch

    from simreal_ros.learner.visual_alignment import AlignmentConfig, align_to_arm_frames
    from simreal_ros.policy.camera import CAMERA_OBSERVATION_FIELDS
    from simreal_ros.policy.checkpoint import load_numpy_checkpoint, read_adapter_metadata
    from simreal_ros.policy.inference import deploy_adapter
    from simreal_ros.policy.spec import SpecConverter
    from simreal_ros.training.model import ActorCritic, Architecture, EncoderArchitecture
    from simreal_ros.training.torch_checkpoint import save_checkpoint

    torch.manual_seed(0)
    spec = dataclasses.replace(
        default_spec(ROBOT, "push", 20.0, CAMERA_OBSERVATION_FIELDS), camera=CAMERA
    )
    encoder = EncoderArchitecture(CAMERA.height, CAMERA.width, channels=(6, 8, 6))
    model = ActorCritic(Architecture(spec.obs_dim, spec.act_dim, (16, 16), (16, 16),
                                     encoder=encoder))  # fmt: skip
    base_dir = save_checkpoint(tmp_path / "base", model, spec, version="cam0", gamma=0.99,
                               training={})  # fmt: skip
    frames, joints = moved_frames
    summary = align_to_arm_frames(
        base_dir, frames, tmp_path / "aligned", ROBOT, version="a1", sim_episodes=2,
        config=AlignmentConfig(steps=30, batch_size=8), arm_joints=joints,
        camera_pose_config=FAST,
    )  # fmt: skip
    assert summary["camera_pose"]["accepted"] is True
    metadata = read_adapter_metadata(tmp_path / "aligned")
    assert len(metadata["camera_rectification"]) == 9
    base = load_numpy_checkpoint(base_dir, ROBOT)
    kinematics = SpecConverter.for_robot(spec, ROBOT).forward_kinematics
    deployed = deploy_adapter(base, tmp_path / "aligned", "a1", forward_kinematics=kinematics)
    np.testing.assert_allclose(
        deployed.converter.spec.camera.rectification, metadata["camera_rectification"]
    )

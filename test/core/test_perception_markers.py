"""The cube's marker pose from rendered frames of the scene (real MuJoCo rendering, real
OpenCV ArUco), the sim marker and camera it relies on, and refused configurations."""

from __future__ import annotations

import math
from pathlib import Path

import cv2
import mujoco
import numpy as np
import pytest
import yaml

from simreal_ros import resources
from simreal_ros.perception import SIM_CAMERA, SIM_CAMERA_CALIBRATION, SIM_CAMERA_SIZE, markers
from simreal_ros.perception.markers import (
    CameraExtrinsic,
    MarkerConfig,
    MarkerPoseEstimator,
    PerceptionCounters,
    grayscale,
    image_array,
    intrinsics_problem,
    load_extrinsic,
)
from simreal_ros.robot.description import SHIPPED_ROBOTS, load_robot_description
from simreal_ros.sim.physics import ArmPhysics
from simreal_ros.sim.rendering import CameraRenderer, ensure_headless_gl

CALIBRATION = resources.data_path("config", SIM_CAMERA_CALIBRATION)
TEXTURE = Path(markers.__file__).parents[1] / "sim" / "assets" / "cube_marker.png"


@pytest.fixture(scope="module")
def scene():
    """The simreal_arm scene at home and its workspace camera at the graph's resolution."""
    ensure_headless_gl()
    physics = ArmPhysics(load_robot_description("simreal_arm"))
    physics.reset()
    renderer = CameraRenderer(physics, SIM_CAMERA, *SIM_CAMERA_SIZE)
    yield physics, renderer
    renderer.close()


def _estimator(**settings) -> MarkerPoseEstimator:
    config = MarkerConfig(extrinsic_file=str(CALIBRATION), **settings)
    return MarkerPoseEstimator(config, load_extrinsic(CALIBRATION))


def _place(physics, position, quaternion_wxyz) -> None:
    physics.data.qpos[physics.cube_qpos : physics.cube_qpos + 3] = position
    physics.data.qpos[physics.cube_qpos + 3 : physics.cube_qpos + 7] = quaternion_wxyz
    mujoco.mj_forward(physics.model, physics.data)


def _detect(scene, estimator):
    _, renderer = scene
    return estimator.estimate(grayscale(renderer.render(), "rgb8"), renderer.camera_matrix())


def _yaw(angle: float) -> np.ndarray:
    return np.array([math.cos(angle / 2), 0.0, 0.0, math.sin(angle / 2)])


def test_the_shipped_texture_is_the_marker_opencv_draws():
    shipped = cv2.imread(str(TEXTURE), cv2.IMREAD_UNCHANGED)
    assert shipped is not None, f"{TEXTURE} is missing: run tools/make_marker_texture.py"
    assert np.array_equal(shipped, markers.marker_texture()), (
        "sim/assets/cube_marker.png differs from marker_texture(): rerun "
        "tools/make_marker_texture.py"
    )
    side = shipped.shape[0]
    marker = side - 2 * markers.TEXTURE_MARGIN_PIXELS
    size = markers.SIM_OBJECT_HEIGHT * marker / side
    assert size == pytest.approx(markers.SIM_MARKER_SIZE)


@pytest.mark.parametrize("arm", SHIPPED_ROBOTS)
def test_the_marker_is_visual_only_and_leaves_the_cubes_physics_as_it_was(arm):
    model = ArmPhysics(load_robot_description(arm)).model
    marker, cube = model.geom("cube_marker"), model.geom("cube_geom")
    assert (model.geom_contype[marker.id], model.geom_conaffinity[marker.id]) == (0, 0)
    assert model.geom_bodyid[marker.id] == model.geom_bodyid[cube.id]
    assert model.geom_size[marker.id][:2] == pytest.approx(model.geom_size[cube.id][:2])
    body = model.body("cube").id
    # The cube alone: 0.1 kg, a 0.05 m box's inertia, its centre at the body origin.
    assert model.body_mass[body] == pytest.approx(0.1, abs=1e-12)
    assert model.body_inertia[body] == pytest.approx([0.1 * 0.05**2 / 6] * 3, rel=1e-9)
    assert model.body_ipos[body] == pytest.approx([0.0, 0.0, 0.0], abs=1e-12)
    assert 2 * model.geom_size[cube.id][2] == pytest.approx(markers.SIM_OBJECT_HEIGHT)


def test_the_calibration_file_is_the_scene_cameras_pose(scene):
    _, renderer = scene
    extrinsic = load_extrinsic(CALIBRATION)
    assert extrinsic.child_frame == f"{SIM_CAMERA}_camera_optical_frame"  # the bridge's frame
    assert np.allclose(extrinsic.matrix, renderer.optical_pose(), atol=2e-6)


@pytest.mark.parametrize(
    ("position", "yaw"),
    [((0.45, -0.05, 0.025), 0.2), ((0.55, 0.10, 0.025), -0.3), ((0.62, -0.20, 0.025), 0.7)],
)
def test_the_cube_pose_from_a_frame_is_within_bounds_of_the_truth(scene, position, yaw):
    physics, _ = scene
    _place(physics, position, _yaw(yaw))
    detection = _detect(scene, _estimator())
    assert detection.pose is not None, detection.reason
    error = np.linalg.norm(detection.pose.position - physics.object_position())
    assert error < 0.005, f"{1000 * error:.1f} mm off at {position}"
    cosine = abs(float(np.dot(detection.pose.orientation_wxyz, physics.object_orientation())))
    assert math.degrees(2 * math.acos(min(1.0, cosine))) < 2.0
    assert detection.pose.orientation_wxyz[0] > 0.0
    assert 20.0 < detection.pose.marker_side_px < 80.0


def test_a_hidden_marker_gives_no_pose(scene):
    physics, _ = scene
    estimator = _estimator()
    _place(physics, (0.5, 0.0, 0.025), _yaw(0.0))
    assert _detect(scene, estimator).pose is not None  # the same place, marker up: seen
    upside_down = np.array([0.0, 1.0, 0.0, 0.0])  # turned over: the marker faces the table
    _place(physics, (0.5, 0.0, 0.025), upside_down)
    hidden = _detect(scene, estimator)
    assert hidden.pose is None and hidden.reason == "marker 0 not seen"
    _place(physics, (0.5, 1.5, 0.025), _yaw(0.0))  # off the table, out of the camera's view
    assert _detect(scene, estimator).pose is None


def test_another_marker_id_is_not_the_cube(scene):
    physics, _ = scene
    _place(physics, (0.5, 0.0, 0.025), _yaw(0.0))
    detection = _detect(scene, _estimator(marker_id=7))
    assert detection.pose is None and detection.reason == "marker 7 not seen"


def test_a_pose_leaning_past_max_tilt_is_refused(scene):
    physics, _ = scene
    tilt = math.radians(40.0)
    _place(physics, (0.5, 0.0, 0.1), [math.cos(tilt / 2), math.sin(tilt / 2), 0.0, 0.0])
    assert _detect(scene, _estimator(max_tilt=60.0)).pose is not None
    refused = _detect(scene, _estimator(max_tilt=30.0))
    assert refused.pose is None and "leans over 30 deg" in refused.reason


def test_bad_config_is_refused_with_what_to_do(tmp_path):
    with pytest.raises(ValueError, match=r"unknown ArUco dictionary 'DICT_4X4_500'.*DICT_4X4_50"):
        MarkerConfig(dictionary="DICT_4X4_500")
    with pytest.raises(ValueError, match=r"marker_size = 0.0 m must be positive"):
        MarkerConfig(marker_size=0.0)
    with pytest.raises(ValueError, match=r"marker_size = -0.04 is below its minimum"):
        MarkerConfig(marker_size=-0.04)
    with pytest.raises(ValueError, match=r"marker_id 50 is not in DICT_4X4_50 \(ids 0..49\)"):
        MarkerConfig(marker_id=50)
    scaled = np.diag([1.1, 1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match=r"base_T_camera is not rigid.*no scale, shear"):
        CameraExtrinsic("base_link", "camera", scaled)
    mirrored = np.diag([1.0, 1.0, -1.0, 1.0])
    with pytest.raises(ValueError, match=r"not rigid.*det -1"):
        CameraExtrinsic("base_link", "camera", mirrored)
    path = tmp_path / "camera.yaml"
    path.write_text(
        yaml.safe_dump({"parent_frame": "base_link", "base_T_camera": np.eye(4).tolist()})
    )
    with pytest.raises(ValueError, match=r"needs the keys parent_frame, child_frame"):
        load_extrinsic(path)
    path.write_text("parent_frame: base_link\nchild_frame: c\nbase_T_camera: [[1, 0], [0, 1]]\n")
    with pytest.raises(ValueError, match=r"has shape \(2, 2\); give a 4x4 matrix"):
        load_extrinsic(path)
    path.write_text("!!python/object/apply:os.system ['true']\n")
    with pytest.raises(ValueError, match="not valid YAML"):
        load_extrinsic(path)  # safe_load: never executes what the file says
    with pytest.raises(ValueError, match="does not exist"):
        load_extrinsic(tmp_path / "missing.yaml")


def test_image_messages_and_intrinsics_are_checked():
    pixels = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    padded = np.zeros((2, 12), dtype=np.uint8)
    padded[:, :9] = pixels.reshape(2, 9)
    assert np.array_equal(image_array(padded.tobytes(), 3, 2, 12, "rgb8"), pixels)
    with pytest.raises(ValueError, match="cannot hold 24 bytes"):
        image_array(padded.tobytes(), 3, 3, 12, "rgb8")
    with pytest.raises(ValueError, match="encoding '16UC1'"):
        image_array(padded.tobytes(), 3, 2, 12, "16UC1")
    k = [500.0, 0.0, 320.0, 0.0, 500.0, 240.0, 0.0, 0.0, 1.0]
    assert intrinsics_problem("plumb_bob", k, [0.0] * 5) == ""
    assert "no calibrated K" in intrinsics_problem("plumb_bob", [0.0] * 9, [])
    assert "equidistant" in intrinsics_problem("equidistant", k, [0.1, 0.0, 0.0, 0.0])


def test_counters_report_the_detection_rate_and_the_last_error():
    counters = PerceptionCounters(window=4)
    healthy, message, _ = counters.report()
    assert not healthy and message == "no camera frames yet"
    for _ in range(3):
        counters.count("pose", latency_s=0.010)
    counters.count("lost", "marker 0 not seen", latency_s=0.020)
    healthy, message, values = counters.report()
    assert not healthy and message == "no pose: marker 0 not seen"
    assert values["detection_rate"] == "0.750" and values["lost"] == "1"
    assert values["latency_p50_ms"] == "10.00"
    counters.count("pose")
    assert counters.report()[0] and counters.detection_rate() == 0.75

"""The cube's pose from an ArUco marker on its top face, seen by one calibrated camera.

OpenCV's ArUco detector finds the marker, ``solvePnP`` (IPPE_SQUARE, the solver made for
one square marker) gives its pose in the camera's optical frame (z forward, x right, y
down: ROS's ``*_optical_frame``), and the stated extrinsic ``base_T_camera`` carries it
into the arm's base frame. The marker lies on the object's top face with its axes along
the object's (marker x = object x, marker y = object y, its normal = object z), so the
object's centre is half the object's height below the marker, along the marker's normal,
and the object's orientation is the marker's. A small marker seen from afar has two
poses that fit its corners almost equally (IPPE's two solutions, one mirrored in tilt);
of the two, one whose normal leans more than ``max_tilt`` from the base's +z (the object
upright on the table) is dropped.

A frame without the marker (hidden, out of view, or more than one marker of the id) gives
no pose and says why: perception never guesses.

The extrinsic is a calibration YAML (read with ``yaml.safe_load``)::

    parent_frame: base_link                      # the arm's base frame
    child_frame: workspace_camera_optical_frame  # the camera's optical frame
    base_T_camera:                               # 4x4, rigid, metres
      - [r00, r01, r02, x]
      - [r10, r11, r12, y]
      - [r20, r21, r22, z]
      - [0, 0, 0, 1]

Plain Python: no rclpy.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from pathlib import Path

import cv2
import numpy as np
import yaml
from scipy.spatial.transform import Rotation

from simreal_ros import stats
from simreal_ros.config_schema import setting, validate

DEFAULT_DICTIONARY = "DICT_4X4_50"
# The sim texture (sim/assets/cube_marker.png): cells of the marker's 6x6 grid (4x4 bits
# and a black border one cell wide), and a white margin around it, in pixels. Every edge
# on a multiple of 64 texels: the renderer's mipmaps average blocks of 2^k texels, and an
# edge inside a block moves (its 0.1-0.2 px shift in a 30 px marker put the pose 5 mm too
# far away).
TEXTURE_CELL_PIXELS = 64
TEXTURE_MARGIN_PIXELS = 64
# The sim cube's marker (sim/scene.xml): 6 of the texture's 8 cells across the 0.05 m face.
SIM_OBJECT_HEIGHT = 0.05
SIM_MARKER_SIZE = SIM_OBJECT_HEIGHT * 6 / 8
# Tolerance of a rotation's orthonormality in a calibration file (written to 6 digits).
RIGID_TOLERANCE = 1e-4
IMAGE_ENCODINGS = ("rgb8", "bgr8", "mono8")


def dictionary_names() -> tuple[str, ...]:
    """The names of OpenCV's predefined ArUco dictionaries (DICT_4X4_50, ...)."""
    return tuple(sorted(name for name in dir(cv2.aruco) if name.startswith("DICT_")))


def aruco_dictionary(name: str) -> cv2.aruco.Dictionary:
    """OpenCV's predefined dictionary ``name``; ValueError naming the known ones."""
    if name not in dictionary_names():
        raise ValueError(
            f"unknown ArUco dictionary {name!r}; use one of OpenCV's predefined ones: "
            f"{', '.join(dictionary_names())}."
        )
    return cv2.aruco.getPredefinedDictionary(getattr(cv2.aruco, name))


def marker_texture(
    dictionary: str = DEFAULT_DICTIONARY,
    marker_id: int = 0,
    cell_pixels: int = TEXTURE_CELL_PIXELS,
    margin_pixels: int = TEXTURE_MARGIN_PIXELS,
) -> np.ndarray:
    """The marker as a face texture (uint8 grey): OpenCV's canonical image in a white
    margin (the quiet zone the detector needs). Image up is the marker's +y, right its +x."""
    aruco = aruco_dictionary(dictionary)
    cells = aruco.markerSize + 2  # the bits and a one-cell black border
    marker = cv2.aruco.generateImageMarker(aruco, int(marker_id), cells * cell_pixels)
    side = marker.shape[0] + 2 * margin_pixels
    texture = np.full((side, side), 255, dtype=np.uint8)
    texture[margin_pixels:-margin_pixels, margin_pixels:-margin_pixels] = marker
    return texture


@dataclasses.dataclass
class MarkerConfig:
    """The marker, the object it sits on, the camera's extrinsic and how old a frame may be."""

    dictionary: str = setting(DEFAULT_DICTIONARY, "OpenCV predefined ArUco dictionary")
    marker_id: int = setting(0, "id of the marker on the object's top face", low=0, high=4095)
    marker_size: float = setting(
        SIM_MARKER_SIZE,
        "side of the marker's black square (border included, white margin not)",
        low=0.0,
        high=2.0,
        unit="m",
    )
    object_height: float = setting(
        SIM_OBJECT_HEIGHT,
        "height of the object: its centre is half of it below the marker, along the "
        "marker's normal",
        low=0.0,
        high=2.0,
        unit="m",
    )
    extrinsic_file: str = setting(
        "",
        "calibration YAML with base_T_camera (the camera's optical frame in the arm's "
        "base frame); the sim camera's is config/calibration/sim_workspace_camera.yaml",
    )
    max_tilt: float = setting(
        30.0,
        "a pose whose marker normal leans further from the base's +z is not the object "
        "upright on the table: it is refused (the two-fold ambiguity of a small marker)",
        low=0.0,
        high=180.0,
        unit="deg",
    )
    max_age: float = setting(
        0.2,
        "a frame whose stamp is older than this on the node's clock gives no pose",
        low=0.001,
        high=10.0,
        unit="s",
    )
    base_frame: str = setting("base_link", "frame of the published pose (the arm's base)")
    diagnostics_period: float = setting(1.0, "/diagnostics period", low=0.1, high=10.0, unit="s")

    def __post_init__(self) -> None:
        validate(self)
        aruco = aruco_dictionary(self.dictionary)
        if self.marker_id >= aruco.bytesList.shape[0]:
            raise ValueError(
                f"marker_id {self.marker_id} is not in {self.dictionary} (ids 0.."
                f"{aruco.bytesList.shape[0] - 1}); give the id printed on the marker."
            )
        for name in ("marker_size", "object_height"):
            if getattr(self, name) <= 0.0:
                raise ValueError(
                    f"{name} = {getattr(self, name)!r} m must be positive; measure it on the "
                    "object (the marker's black square, the object's height)."
                )


@dataclasses.dataclass(frozen=True)
class CameraExtrinsic:
    """``base_T_camera``: the camera's optical frame in the arm's base frame."""

    parent_frame: str
    child_frame: str
    matrix: np.ndarray  # 4x4, rigid

    def __post_init__(self) -> None:
        object.__setattr__(self, "matrix", check_rigid(self.matrix, "base_T_camera"))


def check_rigid(matrix, where: str) -> np.ndarray:
    """``matrix`` as a 4x4 float rigid transform; ValueError saying what is wrong."""
    try:
        m = np.asarray(matrix, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{where} is not a 4x4 matrix of numbers: {matrix!r}.") from None
    if m.shape != (4, 4):
        raise ValueError(
            f"{where} has shape {m.shape}; give a 4x4 matrix (four rows of four numbers)."
        )
    if not np.all(np.isfinite(m)):
        raise ValueError(f"{where} has non-finite entries; give a calibrated transform.")
    rotation = m[:3, :3]
    error = float(np.max(np.abs(rotation @ rotation.T - np.eye(3))))
    if error > RIGID_TOLERANCE or np.linalg.det(rotation) <= 0.0:
        raise ValueError(
            f"{where} is not rigid: its rotation block is not orthonormal with determinant +1 "
            f"(|R R^T - I| = {error:.3g}, det {np.linalg.det(rotation):.3g}); give a rotation "
            "and a translation, no scale, shear or mirror."
        )
    if np.max(np.abs(m[3] - [0.0, 0.0, 0.0, 1.0])) > RIGID_TOLERANCE:
        raise ValueError(f"{where}'s last row is {m[3].tolist()}; it must be [0, 0, 0, 1].")
    return m


def load_extrinsic(path: str | Path) -> CameraExtrinsic:
    """Read a calibration YAML (see the module docstring); ValueError naming the file."""
    path = Path(path).expanduser()
    if not str(path) or not path.is_file():
        raise ValueError(
            f"camera extrinsic file {str(path)!r} does not exist; give the calibration YAML "
            "with base_T_camera (extrinsic_file)."
        )
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        raise ValueError(f"{path}: not valid YAML ({error}).") from None
    required = ("parent_frame", "child_frame", "base_T_camera")
    if not isinstance(data, dict) or any(key not in data for key in required):
        raise ValueError(f"{path}: needs the keys {', '.join(required)}.")
    unknown = sorted(set(data) - set(required))
    if unknown:
        raise ValueError(f"{path}: unknown key(s) {', '.join(map(str, unknown))}.")
    return CameraExtrinsic(
        str(data["parent_frame"]),
        str(data["child_frame"]),
        check_rigid(data["base_T_camera"], f"{path}: base_T_camera"),
    )


def image_array(data, width: int, height: int, step: int, encoding: str) -> np.ndarray:
    """An Image message's bytes as an (H, W[, 3]) uint8 array (no copy); ValueError when
    the encoding is not one the detector reads or the sizes disagree."""
    if encoding not in IMAGE_ENCODINGS:
        raise ValueError(f"image encoding {encoding!r}; give one of {', '.join(IMAGE_ENCODINGS)}.")
    channels = 1 if encoding == "mono8" else 3
    buffer = np.frombuffer(data, dtype=np.uint8)
    if width <= 0 or height <= 0 or step < channels * width or buffer.size != step * height:
        raise ValueError(
            f"image of {width}x{height} {encoding} with step {step} cannot hold "
            f"{buffer.size} bytes; the camera driver's message is malformed."
        )
    rows = buffer.reshape(height, step)[:, : channels * width]
    return rows if channels == 1 else rows.reshape(height, width, 3)


def intrinsics_problem(distortion_model: str, k, d) -> str:
    """Why CameraInfo's intrinsics cannot be used ('' when they can): OpenCV's pinhole
    models only (plumb_bob, rational_polynomial), a calibrated K."""
    if len(k) != 9 or not np.all(np.isfinite(k)) or not (k[0] > 0.0 and k[4] > 0.0):
        return "camera_info has no calibrated K (fx, fy must be positive); calibrate the camera"
    if len(d) and distortion_model not in ("plumb_bob", "rational_polynomial"):
        return (
            f"camera_info's distortion model {distortion_model!r} is not a pinhole model "
            "OpenCV's solvePnP reads (plumb_bob, rational_polynomial); rectify the image"
        )
    return ""


def grayscale(pixels: np.ndarray, encoding: str) -> np.ndarray:
    """One image channel for the detector; ValueError for an encoding it does not read."""
    if encoding == "mono8":
        return pixels if pixels.ndim == 2 else pixels[..., 0]
    if encoding == "rgb8":
        return cv2.cvtColor(pixels, cv2.COLOR_RGB2GRAY)
    if encoding == "bgr8":
        return cv2.cvtColor(pixels, cv2.COLOR_BGR2GRAY)
    raise ValueError(f"image encoding {encoding!r}; give one of {', '.join(IMAGE_ENCODINGS)}.")


@dataclasses.dataclass(frozen=True)
class ObjectPose:
    """The object's centre and orientation (w, x, y, z, w >= 0) in the base frame."""

    position: np.ndarray
    orientation_wxyz: np.ndarray
    reprojection_error_px: float  # RMS over the four corners
    marker_side_px: float  # the marker's mean side in the image


@dataclasses.dataclass(frozen=True)
class Detection:
    """One frame's outcome: a pose, or None and the reason there is none."""

    pose: ObjectPose | None
    reason: str = ""


class MarkerPoseEstimator:
    """The object's pose in the base frame from one image and the camera's intrinsics."""

    def __init__(self, config: MarkerConfig, extrinsic: CameraExtrinsic) -> None:
        self.config = config
        self.extrinsic = extrinsic
        parameters = cv2.aruco.DetectorParameters()
        # The pose of a small marker is only as good as its corners. On rendered frames of a
        # 35-45 px marker, AprilTag's edge-fit corners are biased ~0.1 px inwards, the
        # sub-pixel (saddle) ones ~0.3 px: 2 mm against 6 mm median error (bench).
        parameters.cornerRefinementMethod = cv2.aruco.CORNER_REFINE_APRILTAG
        self._detector = cv2.aruco.ArucoDetector(aruco_dictionary(config.dictionary), parameters)
        half = 0.5 * config.marker_size
        # IPPE_SQUARE's order: top-left, top-right, bottom-right, bottom-left (marker frame,
        # x right, y up), the order detectMarkers gives the corners in.
        self._corners = np.array(
            [[-half, half, 0.0], [half, half, 0.0], [half, -half, 0.0], [-half, -half, 0.0]]
        )
        self._centre_in_marker = np.array([0.0, 0.0, -0.5 * config.object_height, 1.0])
        self._min_normal_z = float(np.cos(np.radians(config.max_tilt)))

    def estimate(self, gray: np.ndarray, camera_matrix, distortion=()) -> Detection:
        """``gray``: one channel (``grayscale``); ``camera_matrix``: K (3x3 or 9 numbers);
        ``distortion``: OpenCV's coefficients (plumb_bob's five; empty: none)."""
        k = np.asarray(camera_matrix, dtype=np.float64).reshape(3, 3)
        if not (k[0, 0] > 0.0 and k[1, 1] > 0.0):
            return Detection(None, f"camera matrix has fx={k[0, 0]:g}, fy={k[1, 1]:g}")
        d = np.asarray(distortion, dtype=np.float64).ravel()
        corners, ids, _ = self._detector.detectMarkers(gray)
        wanted = self.config.marker_id
        found = (
            []
            if ids is None
            else [c for c, i in zip(corners, ids.ravel(), strict=True) if i == wanted]
        )
        if not found:
            return Detection(None, f"marker {wanted} not seen")
        if len(found) > 1:
            return Detection(None, f"{len(found)} markers with id {wanted}: which is the object?")
        image_corners = found[0].reshape(4, 2).astype(np.float64)
        _, rotations, translations, errors = cv2.solvePnPGeneric(
            self._corners, image_corners, k, d, flags=cv2.SOLVEPNP_IPPE_SQUARE
        )
        if not len(rotations):
            return Detection(None, "solvePnP found no pose of the marker")
        upright = []
        for rotation, translation, error in zip(
            rotations, translations, np.ravel(errors), strict=True
        ):
            camera_t_marker = np.eye(4)
            camera_t_marker[:3, :3] = cv2.Rodrigues(rotation)[0]
            camera_t_marker[:3, 3] = np.ravel(translation)
            base_t_marker = self.extrinsic.matrix @ camera_t_marker
            if base_t_marker[2, 2] >= self._min_normal_z:  # the normal's z in the base
                upright.append((float(error), base_t_marker))
        if not upright:
            return Detection(
                None, f"marker {wanted} leans over {self.config.max_tilt:g} deg from upright"
            )
        error, base_t_marker = min(upright, key=lambda candidate: candidate[0])
        quaternion = Rotation.from_matrix(base_t_marker[:3, :3]).as_quat(scalar_first=True)
        if quaternion[0] < 0.0:
            quaternion = -quaternion  # one hemisphere, as the simulator's quaternions
        sides = np.linalg.norm(image_corners - np.roll(image_corners, -1, axis=0), axis=1)
        return Detection(
            ObjectPose(
                position=(base_t_marker @ self._centre_in_marker)[:3],
                orientation_wxyz=quaternion,
                reprojection_error_px=error,
                marker_side_px=float(np.mean(sides)),
            )
        )


class PerceptionCounters:
    """Frames, poses and the reasons for none, and the per-frame latency, for
    /diagnostics (detection rate over the last ``window`` frames)."""

    def __init__(self, window: int = 200) -> None:
        self.frames = 0
        self.poses = 0
        self.lost = 0  # no marker pose in the frame
        self.stale = 0  # a pose too old to publish
        self.refused = 0  # a frame that could not be read (encoding, size, frame)
        self.last_error = ""
        self._outcomes: collections.deque[bool] = collections.deque(maxlen=window)
        self._latency_ms: collections.deque[float] = collections.deque(maxlen=window)
        self._last_pose_wall = 0.0

    def count(self, outcome: str, reason: str = "", latency_s: float | None = None) -> None:
        """One frame: ``outcome`` is pose, lost, stale or refused."""
        self.frames += 1
        published = outcome == "pose"
        self._outcomes.append(published)
        if published:
            self.poses += 1
            self._last_pose_wall = time.monotonic()
        elif outcome == "lost":
            self.lost += 1
        elif outcome == "stale":
            self.stale += 1
        else:
            self.refused += 1
        if reason:
            self.last_error = reason
        if latency_s is not None:
            self._latency_ms.append(1000.0 * latency_s)

    def detection_rate(self) -> float:
        return sum(self._outcomes) / len(self._outcomes) if self._outcomes else float("nan")

    def report(self) -> tuple[bool, str, dict[str, str]]:
        """(healthy, message, values): healthy while the last frame gave a pose."""
        latency = list(self._latency_ms)
        values = {
            "frames": str(self.frames),
            "poses": str(self.poses),
            "lost": str(self.lost),
            "stale": str(self.stale),
            "refused": str(self.refused),
            "detection_rate": f"{self.detection_rate():.3f}",
            "latency_p50_ms": f"{stats.percentile(latency, 50):.2f}",
            "latency_p99_ms": f"{stats.percentile(latency, 99):.2f}",
            "pose_age_s": (
                f"{time.monotonic() - self._last_pose_wall:.3f}" if self.poses else "never"
            ),
            "last_error": self.last_error,
        }
        if not self.frames:
            return False, "no camera frames yet", values
        if self._outcomes[-1]:
            return True, "publishing /object/pose", values
        return False, f"no pose: {self.last_error}", values

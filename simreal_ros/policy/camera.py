"""A camera policy's conventions and its image path at deployment (numpy, no torch).

``CameraSpec`` is what a camera checkpoint was trained on: the image and camera_info topics,
the resolution and encoding, the pixel normalisation and how old a frame may be. The
policy node refuses a camera whose frames differ (``check_frame``) instead of resizing:
a policy fed another field of view or resolution moves confidently to the wrong place.

``NumpyEncoder`` runs the CNN of ``training.model.CameraActor`` in float64 numpy (im2col
and one matrix product per convolution), then the same spatial softmax.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

ENCODINGS = ("rgb8",)
# What a camera policy observes besides the image: no field of the cube's pose.
CAMERA_OBSERVATION_FIELDS = (
    "joint_position",
    "joint_velocity",
    "goal_position",
    "ee_position",
    "goal_minus_ee",
)


# What a version may add to its base's camera (a checkpoint's spec has neither), by the
# key its adapter metadata (simreal_adapter.json) gives it under.
VERSION_METADATA = {"camera_rectification": "rectification"}
VERSION_FIELDS = tuple(VERSION_METADATA.values())


@dataclasses.dataclass(frozen=True)
class CameraSpec:
    image_topic: str = "/camera/image_raw"
    info_topic: str = "/camera/camera_info"
    camera_name: str = "workspace"  # the sim camera it was trained on
    width: int = 96
    height: int = 72
    encoding: str = "rgb8"
    # normalised pixel = (value / 255 - pixel_mean) / pixel_std, every channel
    pixel_mean: float = 0.5
    pixel_std: float = 0.25
    max_frame_age_s: float = 0.15  # older than this at a tick: the node holds
    # A version's homography (3x3, row-major) from its camera's pixels to the trained
    # camera's (``sysid.camera_pose``); every frame is warped by it before the encoder.
    rectification: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if self.width < 8 or self.height < 8:
            raise ValueError(f"camera: {self.width}x{self.height} px is too small (>= 8x8).")
        if self.encoding not in ENCODINGS:
            raise ValueError(f"camera.encoding = {self.encoding!r}; use {', '.join(ENCODINGS)}.")
        if not self.pixel_std > 0 or not self.max_frame_age_s > 0:
            raise ValueError("camera.pixel_std and camera.max_frame_age_s must be > 0.")
        for name in ("image_topic", "info_topic"):
            if not str(getattr(self, name)).startswith("/"):
                raise ValueError(
                    f"camera.{name} = {getattr(self, name)!r}; give an absolute topic."
                )
        if self.rectification is not None:
            warp = np.asarray(self.rectification, dtype=np.float64)
            if warp.shape != (9,) or not np.all(np.isfinite(warp)):
                raise ValueError(
                    f"camera.rectification = {self.rectification!r}; give 9 finite numbers "
                    "(a 3x3 homography, row-major) or leave it out."
                )
            if abs(np.linalg.det(warp.reshape(3, 3))) < 1e-12:
                raise ValueError("camera.rectification is singular; it must map pixels 1:1.")

    def to_dict(self) -> dict[str, Any]:
        """Without an unset rectification, so a base's fingerprint is what it always was."""
        out = dataclasses.asdict(self)
        for name in VERSION_FIELDS:
            if out[name] is None:
                del out[name]
            else:
                out[name] = list(out[name])
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CameraSpec:
        known = {f.name for f in dataclasses.fields(cls)}
        missing = sorted(known - set(data) - set(VERSION_FIELDS))
        if missing:
            raise ValueError(f"spec.camera is missing field(s): {', '.join(missing)}.")
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"spec.camera has unknown field(s): {', '.join(unknown)}.")
        values = dict(data)
        for name in ("width", "height"):
            values[name] = int(values[name])
        for name in ("pixel_mean", "pixel_std", "max_frame_age_s"):
            values[name] = float(values[name])
        for name in VERSION_FIELDS:
            if values.get(name) is not None:
                values[name] = tuple(float(v) for v in values[name])
        return cls(**values)

    def for_version(self, metadata: Mapping[str, Any]) -> CameraSpec:
        """This camera with the corrections a version's adapter metadata names."""
        values = {field: metadata.get(key) for key, field in VERSION_METADATA.items()}
        return self.corrected(**values)

    def version_metadata(self) -> dict[str, list[float]]:
        """The corrections this camera carries, as a version's adapter metadata names them."""
        return {
            key: list(getattr(self, field))
            for key, field in VERSION_METADATA.items()
            if getattr(self, field) is not None
        }

    def corrected(self, rectification=None) -> CameraSpec:
        """This camera with a version's frame warp (3x3), or as it is for None."""
        if rectification is None:
            return self
        warp = tuple(float(v) for v in np.asarray(rectification, dtype=np.float64).reshape(-1))
        return dataclasses.replace(self, rectification=warp)

    def check_topic(self, image_topic: str) -> None:
        """Refuse a node wired to another camera topic than the checkpoint's."""
        if image_topic != self.image_topic:
            raise ValueError(
                f"camera topic: the checkpoint was trained on {self.image_topic!r} but the "
                f"node reads {image_topic!r}; remap the camera driver's topic to "
                f"{self.image_topic!r} (or set the node's image_topic to it)."
            )

    def check_frame(self, width: int, height: int, encoding: str) -> None:
        """Refuse a frame whose resolution or encoding is not the checkpoint's."""
        if (width, height) != (self.width, self.height):
            raise ValueError(
                f"camera resolution: frames are {width}x{height} but the checkpoint was trained "
                f"on {self.width}x{self.height}; configure the camera driver for "
                f"{self.width}x{self.height} (sim bridge: camera_width/camera_height)."
            )
        if encoding != self.encoding:
            raise ValueError(
                f"camera encoding: frames are {encoding!r}; the checkpoint needs "
                f"{self.encoding!r}. Set the driver's output encoding."
            )


def rectified_frames(image: np.ndarray, camera: CameraSpec, out: np.ndarray | None = None):
    """``image`` (..., H, W, 3) warped by the camera's rectification into the trained
    camera's view (edge pixels repeated where the view has none); as is without one."""
    if camera.rectification is None:
        return image
    import cv2

    warp = np.asarray(camera.rectification, dtype=np.float64).reshape(3, 3)
    size = (camera.width, camera.height)
    if out is None:
        out = np.empty_like(image)
    flat_in = image.reshape(-1, camera.height, camera.width, 3)
    flat_out = out.reshape(-1, camera.height, camera.width, 3)
    for src, dst in zip(flat_in, flat_out, strict=True):
        cv2.warpPerspective(src, warp, size, dst=dst, flags=cv2.INTER_LINEAR,
                            borderMode=cv2.BORDER_REPLICATE)  # fmt: skip
    return out


def normalized_image(
    image: np.ndarray,
    camera: CameraSpec,
    out: np.ndarray | None = None,
    warped: np.ndarray | None = None,
):
    """(..., H, W, 3) uint8 RGB -> (..., 3, H, W) float, the checkpoint's normalisation: one
    frame at a tick, or a batch in training. A camera with a rectification warps first
    (into ``warped`` where given: the control path allocates nothing)."""
    if image.shape[-3:] != (camera.height, camera.width, 3):
        raise ValueError(
            f"image has shape {image.shape}; the policy needs "
            f"({camera.height}, {camera.width}, 3)."
        )
    image = rectified_frames(image, camera, warped)
    scale = 1.0 / (255.0 * camera.pixel_std)
    shift = camera.pixel_mean / camera.pixel_std
    if out is None:
        out = np.empty((*image.shape[:-3], 3, camera.height, camera.width), dtype=np.float64)
    np.multiply(np.moveaxis(image, -1, -3), scale, out=out)
    out -= shift
    return out


def spatial_softmax(maps: np.ndarray) -> np.ndarray:
    """(C, H, W) -> (2C,): ``training.model.spatial_softmax`` for one image."""
    channels, height, width = maps.shape
    flat = maps.reshape(channels, -1)
    weights = np.exp(flat - flat.max(axis=1, keepdims=True))
    weights /= weights.sum(axis=1, keepdims=True)
    weights = weights.reshape(channels, height, width)
    x = weights.sum(1) @ np.linspace(-1.0, 1.0, width)
    y = weights.sum(2) @ np.linspace(-1.0, 1.0, height)
    return np.stack([x, y], axis=-1).reshape(-1)


class NumpyEncoder:
    """The CNN of a camera actor's state (``encoder.<i>.weight/bias``) with its strides."""

    def __init__(self, state: Mapping[str, np.ndarray], strides: tuple[int, ...]) -> None:
        indices = sorted(
            int(n.split(".")[1])
            for n in state
            if n.startswith("encoder.") and n.endswith(".weight")
        )
        if len(indices) != len(strides):
            raise ValueError(
                f"encoder: {len(indices)} convolutions in the weights, {len(strides)} strides."
            )
        self.layers = []
        for i, stride in zip(indices, strides, strict=True):
            weight = np.asarray(state[f"encoder.{i}.weight"], dtype=np.float64)
            out_c, in_c, kh, kw = weight.shape
            self.layers.append(
                (
                    weight.reshape(out_c, in_c * kh * kw),
                    np.asarray(state[f"encoder.{i}.bias"], dtype=np.float64)[:, None],
                    kh,
                    int(stride),
                )
            )

    def __call__(self, image: np.ndarray) -> np.ndarray:
        """(3, H, W) normalised image -> keypoints (2C,)."""
        x = image
        for index, (weight, bias, kernel, stride) in enumerate(self.layers):
            if index:
                np.maximum(x, 0.0, out=x)
            columns, out_h, out_w = _im2col(x, kernel, stride)
            x = (weight @ columns + bias).reshape(-1, out_h, out_w)
        return spatial_softmax(x)


def _im2col(x: np.ndarray, kernel: int, stride: int) -> tuple[np.ndarray, int, int]:
    """(C, H, W) -> (C*k*k, out_h*out_w) patches with zero padding kernel // 2 (torch's
    Conv2d(padding=k // 2) layout: channel, then kernel row, then kernel column)."""
    pad = kernel // 2
    channels, height, width = x.shape
    padded = np.pad(x, ((0, 0), (pad, pad), (pad, pad)))
    out_h = (height + 2 * pad - kernel) // stride + 1
    out_w = (width + 2 * pad - kernel) // stride + 1
    s_c, s_h, s_w = padded.strides
    patches = np.lib.stride_tricks.as_strided(
        padded,
        shape=(channels, kernel, kernel, out_h, out_w),
        strides=(s_c, s_h, s_w, s_h * stride, s_w * stride),
        writeable=False,
    )
    return patches.reshape(channels * kernel * kernel, out_h * out_w), out_h, out_w

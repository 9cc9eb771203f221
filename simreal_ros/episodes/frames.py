"""Camera frames in episode bags: compressed on the way in, decoded to RGB on the way out.

Bags store a camera's frames as image_transport's ``compressed`` transport publishes them,
so ``ros2 bag play``, Foxglove and rqt_image_view show them as they are: a
sensor_msgs/CompressedImage on ``<image topic>/compressed`` whose ``format`` reads
``"<encoding>; jpeg compressed bgr8"`` (or ``png``), encoded by OpenCV. The camera's
sensor_msgs/CameraInfo is recorded beside it unchanged.

``FrameEncoder`` does the compression on a thread of its own with a bounded queue: a
recorder's subscription callback only queues the bytes, and when the encoder cannot keep
up it drops (and counts) frames, never another topic's messages.

Plain Python: no rclpy. OpenCV is imported on first use.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from collections.abc import Callable

import numpy as np

from simreal_ros.episodes.typestore import project_typestore

IMAGE_TYPE = "sensor_msgs/msg/Image"
COMPRESSED_IMAGE_TYPE = "sensor_msgs/msg/CompressedImage"
CAMERA_INFO_TYPE = "sensor_msgs/msg/CameraInfo"
FORMATS = ("jpeg", "png")

# Raw encodings a frame may arrive in: channels, the OpenCV conversion to what the
# compressed image holds (bgr8, or mono8 for a mono camera, as image_transport does), what
# that holds, and the conversion of the raw frame to RGB.
_ENCODINGS = {
    "rgb8": (3, "COLOR_RGB2BGR", "bgr8", None),
    "bgr8": (3, None, "bgr8", "COLOR_BGR2RGB"),
    "rgba8": (4, "COLOR_RGBA2BGR", "bgr8", "COLOR_RGBA2RGB"),
    "bgra8": (4, "COLOR_BGRA2BGR", "bgr8", "COLOR_BGRA2RGB"),
    "mono8": (1, None, "mono8", "COLOR_GRAY2RGB"),
}


def _cv2():
    import cv2

    return cv2


def compressed_topic(image_topic: str) -> str:
    """Where image_transport's compressed transport publishes ``image_topic``."""
    return image_topic.rstrip("/") + "/compressed"


def camera_info_topic(image_topic: str) -> str:
    """The CameraInfo topic beside ``image_topic`` (image_transport's camera convention)."""
    namespace = image_topic.rstrip("/").rpartition("/")[0]
    return f"{namespace}/camera_info"


@dataclasses.dataclass(frozen=True)
class FrameCompression:
    """How frames are compressed: ``jpeg`` (lossy, ``jpeg_quality`` 1..100) or ``png``."""

    format: str = "jpeg"
    jpeg_quality: int = 90

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(
                f"image format {self.format!r} is not one of {', '.join(FORMATS)} "
                "(or record raw images)."
            )
        if not 1 <= int(self.jpeg_quality) <= 100:
            raise ValueError(f"jpeg_quality={self.jpeg_quality} must be within 1 .. 100.")


def image_array(encoding: str, height: int, width: int, step: int, data) -> np.ndarray:
    """A raw sensor_msgs/Image's pixels as (H, W, C) uint8 in its own channel order."""
    if encoding not in _ENCODINGS:
        raise ValueError(
            f"image encoding {encoding!r} cannot be compressed here; publish one of "
            f"{', '.join(_ENCODINGS)}, or record raw images (image_format raw)."
        )
    channels = _ENCODINGS[encoding][0]
    buffer = np.frombuffer(memoryview(data), np.uint8)
    if height <= 0 or width <= 0 or step < width * channels or buffer.size < height * step:
        raise ValueError(
            f"image of {width}x{height} {encoding} with step {step} does not fit its "
            f"{buffer.size} data bytes; the camera driver publishes a malformed image."
        )
    rows = buffer[: height * step].reshape(height, step)[:, : width * channels]
    return rows.reshape(height, width, channels)


def encode_frame(
    pixels: np.ndarray, encoding: str, compression: FrameCompression
) -> tuple[str, np.ndarray]:
    """(CompressedImage format string, encoded bytes) of one frame given in ``encoding``."""
    cv2 = _cv2()
    _, conversion, stored, _ = _ENCODINGS[encoding]
    if conversion is not None:
        pixels = cv2.cvtColor(pixels, getattr(cv2, conversion))
    if compression.format == "jpeg":
        params = [cv2.IMWRITE_JPEG_QUALITY, int(compression.jpeg_quality)]
        ok, encoded = cv2.imencode(".jpg", pixels, params)
    else:
        ok, encoded = cv2.imencode(".png", pixels)
    if not ok:
        raise ValueError(f"OpenCV could not {compression.format}-encode a {encoding} frame.")
    return f"{encoding}; {compression.format} compressed {stored}", encoded.reshape(-1)


def compress_image_cdr(data: bytes, compression: FrameCompression) -> bytes:
    """A serialized sensor_msgs/Image -> the serialized CompressedImage (same header)."""
    store = project_typestore()
    image = store.deserialize_cdr(bytes(data), IMAGE_TYPE)
    pixels = image_array(image.encoding, image.height, image.width, image.step, image.data)
    fmt, encoded = encode_frame(pixels, image.encoding, compression)
    compressed = store.types[COMPRESSED_IMAGE_TYPE](header=image.header, format=fmt, data=encoded)
    return bytes(store.serialize_cdr(compressed, COMPRESSED_IMAGE_TYPE))


def decode_frame(fmt: str, data) -> np.ndarray:
    """A CompressedImage's bytes -> RGB uint8 (H, W, 3).

    OpenCV reads the codec from the bytes; a colour image decodes to BGR whatever the
    format string says, a mono one to grey (returned as three equal channels).
    """
    cv2 = _cv2()
    pixels = cv2.imdecode(np.frombuffer(memoryview(data), np.uint8), cv2.IMREAD_UNCHANGED)
    if pixels is None:
        raise ValueError(f"a compressed frame (format {fmt!r}) does not decode with OpenCV.")
    if pixels.dtype != np.uint8:
        raise ValueError(f"a compressed frame (format {fmt!r}) is not 8-bit ({pixels.dtype}).")
    if pixels.ndim == 2:
        return cv2.cvtColor(pixels, cv2.COLOR_GRAY2RGB)
    if pixels.shape[2] == 4:
        return cv2.cvtColor(pixels, cv2.COLOR_BGRA2RGB)
    return cv2.cvtColor(pixels, cv2.COLOR_BGR2RGB)


def frame_rgb(msg) -> np.ndarray:
    """RGB uint8 (H, W, 3) of a deserialized CompressedImage or raw Image."""
    if hasattr(msg, "format"):
        return decode_frame(msg.format, msg.data)
    pixels = image_array(msg.encoding, msg.height, msg.width, msg.step, msg.data)
    conversion = _ENCODINGS[msg.encoding][3]
    if conversion is None:
        return pixels.copy()
    cv2 = _cv2()
    return cv2.cvtColor(pixels, getattr(cv2, conversion))


_STOP = object()


class FrameEncoder:
    """Compresses serialized Images on its own thread and hands the results to ``sink``.

    ``offer()`` never blocks: a full queue drops the frame and counts it. ``sink(index,
    timestamp_ns, data)`` receives each CompressedImage with its Image's receive time, in
    the order offered; a frame that cannot be encoded (an unsupported encoding) is dropped,
    counted and described in ``error``. Other items (a writer's flush requests) pass
    through to ``pass_through`` in order, behind the frames offered before them.
    """

    def __init__(
        self,
        compression: FrameCompression,
        sink: Callable[[int, int, bytes], bool],
        pass_through: Callable[[object], None],
        queue_size: int = 30,
        name: str = "frame-encoder",
    ) -> None:
        if queue_size < 1:
            raise ValueError(f"frame queue size {queue_size} must be at least 1.")
        self.compression = compression
        self._sink = sink
        self._pass_through = pass_through
        self._queue: queue.Queue = queue.Queue(maxsize=queue_size)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        # `offered`/`queue_drops` belong to the producer, the rest to the encoder thread.
        self.offered = 0
        self.queue_drops = 0
        self.encode_drops = 0  # could not encode, or the sink refused the result
        self.encoded = 0
        self.encode_s = 0.0
        self.bytes_in = 0
        self.bytes_out = 0
        self.error = ""

    @property
    def dropped(self) -> int:
        return self.queue_drops + self.encode_drops

    @property
    def mean_encode_ms(self) -> float:
        return 1e3 * self.encode_s / self.encoded if self.encoded else 0.0

    def start(self) -> None:
        self._thread.start()

    def offer(self, index: int, timestamp_ns: int, data: bytes) -> bool:
        self.offered += 1
        try:
            self._queue.put_nowait((index, timestamp_ns, data))
        except queue.Full:
            self.queue_drops += 1
            return False
        return True

    def pass_through(self, item: object, timeout: float) -> None:
        """Queue ``item`` behind every frame offered so far (blocks up to ``timeout``)."""
        self._queue.put(item, timeout=timeout)

    def stop(self, timeout: float = 30.0) -> None:
        """Encode what is queued, then end the thread."""
        if not self._thread.is_alive():
            return
        self._queue.put(_STOP, timeout=timeout)
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"the frame encoder did not finish within {timeout} s.")

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            if not isinstance(item, tuple):
                self._pass_through(item)
                continue
            index, timestamp_ns, data = item
            start = time.perf_counter()
            try:
                compressed = compress_image_cdr(data, self.compression)
            except Exception as error:  # a malformed or unsupported frame: count, say why
                self.encode_drops += 1
                self.error = f"frames dropped: {error}"
                continue
            self.encode_s += time.perf_counter() - start
            self.encoded += 1
            self.bytes_in += len(data)
            self.bytes_out += len(compressed)
            if not self._sink(index, timestamp_ns, compressed):
                self.encode_drops += 1

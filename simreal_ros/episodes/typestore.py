"""The message types a bag may hold: ROS 2 Jazzy's standard types plus the project's own.

Definitions come from the ``.msg`` files (the checkout's ``msg/`` or the installed
``share/simreal_ros/msg``), so the bag carries full definitions and the RIHS01 type hashes
match what rclpy computes for the same files.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import TYPE_CHECKING

from simreal_ros import resources

if TYPE_CHECKING:
    from rosbags.typesys.store import Typestore

PACKAGE = "simreal_ros"


def _msg_dirs() -> list[Path]:
    directory = resources.data_path("msg")
    return [directory] if directory.is_dir() and any(directory.glob("*.msg")) else []


@functools.cache
def project_typestore() -> Typestore:
    """Jazzy's typestore with every ``simreal_ros/msg/*`` type registered (cached)."""
    # Imported here: rosbags.typesys.msg looks like a ROS message module to the
    # core-has-no-ROS check, and importing a core module should stay cheap.
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    store = get_typestore(Stores.ROS2_JAZZY)
    dirs = _msg_dirs()
    if not dirs:
        raise FileNotFoundError(
            f"simreal_ros message definitions (msg/*.msg) not found in "
            f"{resources.data_path('msg')}; reinstall the package (colcon build)."
        )
    types = {}
    for path in sorted(dirs[0].glob("*.msg")):
        types.update(get_types_from_msg(path.read_text(), f"{PACKAGE}/msg/{path.stem}"))
    store.register(types)
    return store


def full_type_name(msgtype: str) -> str:
    """``sensor_msgs/JointState`` or ``sensor_msgs/msg/JointState`` -> the latter."""
    parts = msgtype.strip().split("/")
    if len(parts) == 2:
        parts = [parts[0], "msg", parts[1]]
    if len(parts) != 3 or not all(parts):
        raise ValueError(
            f"message type {msgtype!r} is not of the form package/msg/Type "
            "(e.g. sensor_msgs/msg/JointState)."
        )
    return "/".join(parts)


def definition_and_hash(msgtype: str, store: Typestore | None = None) -> tuple[str, str]:
    """Full ros2msg definition (dependencies included) and RIHS01 hash of ``msgtype``."""
    store = store or project_typestore()
    msgtype = full_type_name(msgtype)
    if msgtype not in store.fielddefs:
        raise ValueError(
            f"message type {msgtype} is unknown to the bag typestore; "
            "use a ROS 2 Jazzy standard type or a simreal_ros message."
        )
    msgdef, _ = store.generate_msgdef(msgtype, ros_version=2)
    return msgdef, store.hash_rihs01(msgtype)


_SECTION = re.compile(r"^={80}\n(?:MSG|IDL): (\S+)\n", re.MULTILINE)


def register_definition(store: Typestore, msgtype: str, msgdef: str) -> None:
    """Register a type from a bag's concatenated ros2msg schema (for types not in the store).

    Only parses the definition text; nothing read from a bag is executed.
    """
    from rosbags.typesys import get_types_from_msg

    pieces = _SECTION.split(msgdef)
    types = dict(get_types_from_msg(pieces[0], full_type_name(msgtype)))
    for name, text in zip(pieces[1::2], pieces[2::2], strict=False):
        types.update(get_types_from_msg(text, full_type_name(name)))
    store.register({k: v for k, v in types.items() if k not in store.fielddefs})

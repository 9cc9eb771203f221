"""The one builder of a node's /diagnostics message (rqt_robot_monitor reads them).

Each node reports one status: a name ("node: what"), a hardware id, a level, a message
and key/value pairs; values that are not strings are written with ``str``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.node import Node

OK, WARN, ERROR = DiagnosticStatus.OK, DiagnosticStatus.WARN, DiagnosticStatus.ERROR

# The learner's status name: the loop reads its answers to round requests from it.
LEARNER_STATUS = "learner: rounds"


def diagnostic_array(
    node: Node,
    name: str,
    hardware_id: str,
    level: bytes,
    message: str,
    values: Mapping[str, Any] | Iterable[tuple[str, Any]] = (),
) -> DiagnosticArray:
    """A DiagnosticArray holding one status, stamped with the node's clock."""
    pairs = values.items() if isinstance(values, Mapping) else values
    status = DiagnosticStatus(
        name=name,
        hardware_id=hardware_id,
        level=level,
        message=message,
        values=[KeyValue(key=k, value=v if isinstance(v, str) else str(v)) for k, v in pairs],
    )
    array = DiagnosticArray(status=[status])
    array.header.stamp = node.get_clock().now().to_msg()
    return array

"""The one mapping from a message's joint names to the controller's joint order.

A ``/joint_states`` publisher (ros2_control's joint_state_broadcaster, the sim bridge)
may order its joints its own way and may add joints the controller does not drive (a
gripper's mirrored finger); consumers need the controller's joints, in controller order.
The index is cached for the newest name list, since a publisher repeats the same one.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class JointOrder:
    """Indices of ``joint_names`` (controller order) in a message's joint names."""

    def __init__(self, joint_names: Sequence[str]) -> None:
        self.joint_names = tuple(joint_names)
        self._cache: tuple[tuple[str, ...], np.ndarray | None, list[str]] = ((), None, [])

    def index(self, names: Sequence[str]) -> tuple[np.ndarray | None, list[str]]:
        """(indices into ``names``, []) or (None, the controller joints it lacks)."""
        key = tuple(names)
        if key != self._cache[0]:
            lookup = {name: i for i, name in enumerate(key)}
            missing = [name for name in self.joint_names if name not in lookup]
            index = None if missing else np.array([lookup[n] for n in self.joint_names])
            self._cache = (key, index, missing)
        return self._cache[1], self._cache[2]

    def reorder(self, names: Sequence[str], values: Sequence[float]) -> np.ndarray | None:
        """``values`` (one per name) in controller order, or None when a controller joint
        is missing or the values do not match the names one to one."""
        index, _missing = self.index(names)
        if index is None or len(values) != len(names):
            return None
        return np.asarray(values, dtype=np.float64)[index]

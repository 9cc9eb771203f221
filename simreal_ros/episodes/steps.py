"""An episode's length, counted one way everywhere: its control steps.

A control step is one policy action on the action topic (``/policy/action``: one per
control tick the policy ran) recorded in the episode's bag before the episode ended. The
first task status (``/task/status``) that says done or truncated ends it, as the dataset
reader cuts an episode's transitions (``episodes.dataset``): statuses carrying the
episode's id when the task shares ids with the recorder, any status when it does not, and
none received before the first action. So an episode has as many control steps as the
learner gets transitions from it (fewer transitions only where an action's observation
was not recorded).

The recorder counts them into the episode's metadata as it writes the bag
(``bag_writer``), recovery counts them again from an unclosed bag's data, and both
``simreal episodes list`` and ``simreal trials`` print that number under the name
``CONTROL_STEPS``. The task's own step counter (``TaskStatus.step``) is not an episode's
length: it counts the simulator's ticks since the reset, ticks on which no fresh action
arrived included.

Plain Python: no rclpy.
"""

from __future__ import annotations

# What the number is called wherever it is printed.
CONTROL_STEPS = "control steps"


class ControlStepCounter:
    """Counts an episode's control steps from its recorded messages, in the order they were
    received: ``action()`` for each policy action on the action topic, ``status()`` for
    each task status."""

    def __init__(self, episode_id: str) -> None:
        self.episode_id = episode_id
        self._actions = 0
        self._own_status_seen = False
        self._ended_own: int | None = None  # actions before this episode's first end
        self._ended_any: int | None = None  # actions before any status's first end

    def action(self) -> None:
        self._actions += 1

    def status(self, episode_id: str, done: bool, truncated: bool) -> None:
        own = episode_id == self.episode_id
        self._own_status_seen = self._own_status_seen or own
        if not (done or truncated) or self._actions == 0:
            return  # an end before the first action ends no step (the dataset's windows)
        if own and self._ended_own is None:
            self._ended_own = self._actions
        if self._ended_any is None:
            self._ended_any = self._actions

    @property
    def count(self) -> int:
        ended = self._ended_own if self._own_status_seen else self._ended_any
        return self._actions if ended is None else ended

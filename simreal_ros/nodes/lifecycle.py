"""The lifecycle shape the graph's lifecycle nodes (sim_bridge, policy) share.

Both may configure and activate themselves at start-up (the ``autostart`` parameter the
graph runner sets), and undo their transitions the same way: deactivate stops what
activate started, cleanup and shutdown free what configure made.
"""

from __future__ import annotations

from rclpy.lifecycle import LifecycleNode, State, TransitionCallbackReturn


class AutostartLifecycleNode(LifecycleNode):
    """A lifecycle node with an autostart and two undo hooks.

    Subclasses implement ``on_configure`` and ``on_activate`` plus ``_halt()`` (undo
    activate) and ``_release()`` (undo configure; halts first).
    """

    def autostart(self, enabled: bool) -> None:
        """Configure, then activate if that succeeded, when ``enabled``; call last in __init__."""
        if enabled and self.trigger_configure() == TransitionCallbackReturn.SUCCESS:
            self.trigger_activate()

    def on_deactivate(self, state: State) -> TransitionCallbackReturn:
        self._halt()
        return TransitionCallbackReturn.SUCCESS

    def on_cleanup(self, state: State) -> TransitionCallbackReturn:
        self._release()
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: State) -> TransitionCallbackReturn:
        self._release()
        return TransitionCallbackReturn.SUCCESS

    def _halt(self) -> None:
        raise NotImplementedError

    def _release(self) -> None:
        raise NotImplementedError

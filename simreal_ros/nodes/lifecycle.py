"""The lifecycle shape the graph's lifecycle nodes (sim_bridge, safety, policy) share.

In the graph the lifecycle manager brings them up in order; run alone, each may configure
and activate itself (its ``autostart`` parameter). They undo their transitions the same
way: deactivate stops what activate started, cleanup and shutdown free what configure made.
Every hook hands on to rclpy's own, so lifecycle publishers follow the node's state.
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
        return super().on_deactivate(state)

    def on_cleanup(self, state: State) -> TransitionCallbackReturn:
        self._release()
        return super().on_cleanup(state)

    def on_shutdown(self, state: State) -> TransitionCallbackReturn:
        self._release()
        return super().on_shutdown(state)

    def _halt(self) -> None:
        raise NotImplementedError

    def _release(self) -> None:
        raise NotImplementedError

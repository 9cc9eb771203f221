"""Freshness watchdog of one input stream (policy actions or joint states)."""

from __future__ import annotations

import math


class Watchdog:
    """Tracks the newest accepted input's time; trips when it is older than ``timeout``.

    A trip is counted once per fresh-to-stale transition, not once per stale tick.
    """

    def __init__(self, name: str, timeout: float) -> None:
        if not timeout > 0:
            raise ValueError(f"{name} timeout {timeout!r} must be positive.")
        self.name = name
        self.timeout = float(timeout)
        self.last_time: float | None = None
        self.tripped = False
        self.trips = 0

    def feed(self, time: float) -> None:
        """Record the time (stamp or arrival) of an accepted input."""
        self.last_time = time

    def age(self, now: float) -> float:
        return math.inf if self.last_time is None else now - self.last_time

    def is_fresh(self, now: float) -> bool:
        return self.age(now) <= self.timeout

    def check(self, now: float) -> bool:
        """Update the tripped state; True exactly on the tick it trips."""
        stale = not self.is_fresh(now)
        newly = stale and not self.tripped and self.last_time is not None
        if newly:
            self.trips += 1
        self.tripped = stale
        return newly

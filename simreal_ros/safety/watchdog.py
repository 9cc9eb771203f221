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
        self.last_age = math.inf  # the age found by the newest ``check``

    def feed(self, time: float) -> None:
        """Record the time (stamp or arrival) of an accepted input."""
        self.last_time = time

    def age(self, now: float) -> float:
        return math.inf if self.last_time is None else now - self.last_time

    def is_fresh(self, now: float) -> bool:
        return self.age(now) <= self.timeout

    def check(self, now: float) -> bool:
        """Update the tripped state; True exactly on the tick it trips."""
        last = self.last_time
        self.last_age = age = math.inf if last is None else now - last
        stale = not age <= self.timeout
        newly = stale and not self.tripped and last is not None
        if newly:
            self.trips += 1
        self.tripped = stale
        return newly

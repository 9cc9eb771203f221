"""What a fault-injection run measures from outside the graph: the safety filter's watchdog
latency after the policy dies, the braking that follows, commands outside the limits and
the time until the graph drives again. Used by the graph test of supervision and by
bench/supervision_faults.py, on what ``nodes/fault_watch.py`` recorded. Plain Python.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

# SafetyStatus.state values that mean the filter follows the policy.
DRIVING_STATES = (0, 1)


@dataclasses.dataclass(frozen=True)
class StatusSample:
    received: float  # wall clock, time.monotonic() of the watcher
    stamp: float  # the status's header stamp (the safety node's clock), seconds
    state: int
    watchdog_tripped: bool
    engaged: bool


@dataclasses.dataclass(frozen=True)
class PolicyKill:
    """One policy kill as seen from outside."""

    trip_latency_s: float  # watchdog trip stamp - newest action stamp before it
    trip_bound_s: float  # command_timeout + 2 control periods
    braking_distance: np.ndarray  # per joint, commanded travel from the trip to rest
    braking_bound: np.ndarray  # per joint, v^2 / (2 A) + 2 |v| dt at the trip
    came_to_rest: bool  # the command stood still before the policy was back
    back_after_s: float  # kill -> the filter follows fresh actions again (wall clock)

    @property
    def within_bounds(self) -> bool:
        return (
            self.trip_latency_s <= self.trip_bound_s
            and bool(np.all(self.braking_distance <= self.braking_bound))
            and self.came_to_rest
        )


def commands_outside(commands: Sequence[np.ndarray], lower, upper) -> int:
    """How many commands have a joint outside [lower, upper] (exactly: no tolerance)."""
    lower, upper = np.asarray(lower, float), np.asarray(upper, float)
    return sum(bool(np.any(c < lower) or np.any(c > upper)) for c in commands)


def braking_bound(velocity, acceleration, dt: float) -> np.ndarray:
    """Per joint: the farthest a command moving at ``velocity`` may travel while braking at
    ``acceleration`` to rest (v^2 / 2A), plus two control periods at v (the tick that
    notices and one of timing slack)."""
    v = np.abs(np.asarray(velocity, float))
    return v * v / (2.0 * np.asarray(acceleration, float)) + 2.0 * v * dt


def measure_policy_kill(
    killed_at: float,
    actions: Sequence[tuple[float, float]],
    statuses: Sequence[StatusSample],
    commands: Sequence[tuple[float, np.ndarray]],
    command_timeout: float,
    dt: float,
    acceleration,
) -> PolicyKill:
    """From recordings (``actions``: (received, stamp); ``commands``: (received, values),
    in arrival order) around a policy SIGKILL at ``killed_at`` (watcher's clock)."""
    trip = next((s for s in statuses if s.received >= killed_at and s.watchdog_tripped), None)
    if trip is None:
        raise AssertionError("no watchdog trip was published after the policy was killed")
    before = [stamp for received, stamp in actions if received <= trip.received]
    if not before:
        raise AssertionError("no policy action was seen before the trip")
    latency = trip.stamp - max(before)
    back = next(
        (
            s
            for s in statuses
            if s.received > trip.received and s.state in DRIVING_STATES and not s.watchdog_tripped
        ),
        None,
    )
    back_after = math.inf if back is None else back.received - killed_at
    # The commanded speed at the trip: the fastest step in the 0.1 s before it (arrival
    # times of two topics only line up to a few ms, so the window is generous).
    index = next((i for i, (r, _c) in enumerate(commands) if r >= trip.received), None)
    if index is None or index < 3:
        raise AssertionError("too few commands around the watchdog trip to judge braking")
    first = next(i for i, (r, _c) in enumerate(commands) if r >= trip.received - 0.1)
    window = np.array([c for _r, c in commands[min(first, index - 3) : index + 1]])
    velocity = np.max(np.abs(np.diff(window, axis=0)), axis=0) / dt
    # At rest: three equal commands in a row, before the respawned policy moved it again.
    end = (
        len(commands)
        if back is None
        else next((i for i, (r, _c) in enumerate(commands) if r >= back.received), len(commands))
    )
    held = [c for _r, c in commands[index:end]]
    rest = next(
        (
            i
            for i in range(len(held) - 2)
            if np.array_equal(held[i], held[i + 1]) and np.array_equal(held[i], held[i + 2])
        ),
        None,
    )
    rested = rest is not None
    path = np.array(held[: (rest if rested else len(held) - 1) + 1]) if held else window[-1:]
    distance = np.max(np.abs(path - path[0]), axis=0)
    return PolicyKill(
        trip_latency_s=latency,
        trip_bound_s=command_timeout + 2.0 * dt,
        braking_distance=distance,
        braking_bound=braking_bound(velocity, acceleration, dt),
        came_to_rest=rested,
        back_after_s=back_after,
    )


# lifecycle_msgs/State ids seen in a TransitionEvent's goal_state.
ACTIVE, _INACTIVE, ACTIVATING = 3, 2, 13


@dataclasses.dataclass(frozen=True)
class Transition:
    received: float  # time.monotonic() of the watcher
    node: str
    start_id: int  # lifecycle_msgs/State id the transition left
    goal_id: int  # lifecycle_msgs/State id it reached
    # Witnessed by the node's own /rosout line (transient local, so a watcher still
    # discovering a new process gets it late), timed by its stamp on this clock.
    logged: bool = False


def _first(
    transitions: Sequence[Transition], node: str, goal: int, after: float
) -> Transition | None:
    """``node``'s first transition to ``goal`` received after ``after``."""
    found = [t for t in transitions if (t.node, t.goal_id) == (node, goal) and t.received > after]
    return min(found, key=lambda t: t.received, default=None)


def _filter_death_events(killed_at: float, transitions: Sequence[Transition]):
    """The events ``judge_filter_death`` reads, each None until seen: the policy held, its
    activation after that, and the new filter's activation."""
    held = _first(transitions, "policy", _INACTIVE, killed_at)
    resumed = None if held is None else _first(transitions, "policy", ACTIVATING, held.received)
    return held, resumed, _first(transitions, "safety", ACTIVE, killed_at)


def filter_death_seen(killed_at: float, transitions: Sequence[Transition]) -> bool:
    """Whether the events ``judge_filter_death`` reads have all arrived. Each process's
    events reach a watcher on their own path: the filter's statuses can say it drives
    before the policy's activation event is in (seen on a loaded host)."""
    return None not in _filter_death_events(killed_at, transitions)


def judge_filter_death(
    killed_at: float,
    actions: Sequence[tuple[float, float]],
    transitions: Sequence[Transition],
    in_flight_s: float = 0.1,
) -> dict:
    """After the safety filter was SIGKILLed at ``killed_at``: the policy was deactivated, no
    action of it arrived while it was held (``in_flight_s`` allows for what was already on
    the wire), and it was activated again only after the new filter. The order comes from
    the nodes' lifecycle transition events, so no gap length is assumed: a filter that
    respawns fast gives a short, correct hold. The new filter's activation event is often
    missed by a watcher still discovering the new process; its logged activation (a
    ``logged`` transition, timed by the line's own stamp) then stands in, so discovery's
    delay never counts. Raises AssertionError saying what went wrong; returns the hold's
    timings."""

    seen = [
        (round(t.received - killed_at, 3), t.node, t.start_id, t.goal_id, t.logged)
        for t in transitions
        if t.received > killed_at
    ]
    held, resumed, filter_active = _filter_death_events(killed_at, transitions)
    if held is None:
        raise AssertionError(
            "the policy was never deactivated while the safety filter was down; transitions "
            f"after the kill (s, node, from, to, logged): {seen}"
        )
    if resumed is None:
        raise AssertionError(
            f"the policy was never activated again after the filter's death; transitions: {seen}"
        )
    if filter_active is None:
        raise AssertionError(
            "no activation of the new safety filter was seen, neither its transition event "
            f"nor its logged line; transitions: {seen}"
        )
    # Two subscriptions' callbacks in one wait set run a few microseconds apart in either
    # order; the manager's service round trips put the real order milliseconds apart.
    if resumed.received < filter_active.received - in_flight_s:
        raise AssertionError(
            f"the policy was activated {filter_active.received - resumed.received:.3f} s "
            f"before the new safety filter; transitions: {seen}"
        )
    leaked = [r for r, _stamp in actions if held.received + in_flight_s < r < resumed.received]
    if leaked:
        raise AssertionError(
            f"{len(leaked)} policy actions arrived while it was held, "
            f"{[round(r - held.received, 3) for r in leaked]} s after its deactivation "
            f"(in flight allowed: {in_flight_s:g} s); transitions: {seen}"
        )
    return {
        "policy_held_after_s": round(held.received - killed_at, 3),
        "policy_held_for_s": round(resumed.received - held.received, 3),
        "filter_seen_by": "its log line" if filter_active.logged else "its transition event",
    }

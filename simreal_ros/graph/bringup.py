"""The order and the lifecycle transitions that bring the graph's managed nodes up and down.

The lifecycle manager node executes these plans; this module only decides them, so the
order is testable without ROS. The arm comes first (its joint states feed everything),
then the safety filter (so nothing reaches the arm unfiltered), then the policy. Going
down is the reverse: the policy stops first and the safety filter brakes the arm last.
``recovery_plan`` decides what to do when a managed node died and came back (supervision):
nothing downstream of a node that is not active stays active. Plain Python: no rclpy.
"""

from __future__ import annotations

import dataclasses

from simreal_ros.config_schema import setting, validate

# lifecycle_msgs/State primary state ids and lifecycle_msgs/Transition ids.
STATE_IDS = {"unconfigured": 1, "inactive": 2, "active": 3, "finalized": 4}
STATE_NAMES = {value: key for key, value in STATE_IDS.items()}
TRANSITION_IDS = {"configure": 1, "cleanup": 2, "activate": 3, "deactivate": 4}
TRANSITION_RESULTS = {
    "configure": "inactive",
    "cleanup": "unconfigured",
    "activate": "active",
    "deactivate": "inactive",
}
# Which transition takes a node one step up (toward active) or down from each state.
_UP = {"unconfigured": ("configure", "inactive"), "inactive": ("activate", "active")}
_DOWN = {"active": ("deactivate", "inactive"), "inactive": ("cleanup", "unconfigured")}
_RANK = {"unconfigured": 0, "inactive": 1, "active": 2}
OPERATIONS = {
    # operation: (goal state, whether the nodes go in bring-up order or in reverse)
    "startup": ("active", True),
    "pause": ("inactive", False),
    "resume": ("active", True),
    "cleanup": ("unconfigured", False),
}
# The graph's lifecycle nodes in bring-up order (those a profile has).
BRING_UP_ORDER = ("sim_bridge", "safety", "policy")


# The lifecycle manager's exit code when its autostart failed: a managed node never became
# active. `simreal up` then stops the graph and exits with it.
STARTUP_FAILED_EXIT_CODE = 3


@dataclasses.dataclass
class LifecycleManagerConfig:
    node_names: list = setting(
        list(BRING_UP_ORDER),
        "Managed lifecycle nodes in bring-up order (brought down in reverse)",
    )
    autostart: bool = setting(False, "Configure and activate every managed node at start-up")
    exit_on_failed_autostart: bool = setting(
        True,
        "Exit (code 3) when autostart fails, so `simreal up` stops the graph with that code; "
        "under ros2 launch the manager is respawned and tries again",
    )
    service_timeout_s: float = setting(
        30.0,
        "Wait this long for a managed node's lifecycle services to appear",
        low=0.1,
        high=600.0,
        unit="s",
        dynamic=True,
    )
    transition_timeout_s: float = setting(
        60.0,
        "Wait this long for one transition to finish",
        low=0.1,
        high=3600.0,
        unit="s",
        dynamic=True,
    )
    watch_period_s: float = setting(
        0.25,
        "After startup, check the managed nodes' states this often; a node that died and "
        "came back is brought up again (and what follows it is held inactive meanwhile)",
        low=0.05,
        high=60.0,
        unit="s",
    )
    probe_timeout_s: float = setting(
        1.0,
        "A managed node that does not answer get_state within this long is taken for dead",
        low=0.05,
        high=30.0,
        unit="s",
        dynamic=True,
    )
    busy_grace_s: float = setting(
        5.0,
        "With `simreal up`'s status file: a managed node that does not answer get_state while "
        "the runner says its process still runs (busy in a long callback, e.g. a sim reset "
        "under load) is taken for dead only after this long",
        low=0.0,
        high=60.0,
        unit="s",
        dynamic=True,
    )
    supervision_status_file: str = setting(
        "",
        "JSON file where `simreal up` writes each node's restarts and last exit code, "
        "reported on /diagnostics (empty: restarts are counted from what this node sees)",
    )

    def __post_init__(self) -> None:
        validate(self)
        if not self.node_names or len(set(self.node_names)) != len(self.node_names):
            raise ValueError(
                f"node_names={self.node_names}: give each managed node once, in bring-up order."
            )


def transitions_between(current: str, goal: str) -> list[str]:
    """The transitions from ``current`` to ``goal`` (both unconfigured, inactive or active)."""
    for state in (current, goal):
        if state not in _RANK:
            raise ValueError(
                f"lifecycle state {state!r} cannot be managed; a node must be unconfigured, "
                "inactive or active (a finalized node has to be restarted)."
            )
    steps: list[str] = []
    while current != goal:
        table = _UP if _RANK[goal] > _RANK[current] else _DOWN
        transition, current = table[current]
        steps.append(transition)
    return steps


# A managed node that does not answer (its process died, or has not started yet).
GONE = "gone"


def recovery_plan(nodes: list[str], states: dict[str, str]) -> list[tuple[str, str]]:
    """(node, transition) that bring ``nodes`` (in bring-up order) back to active after one
    of them died: every node after the first one that is not active is taken down to
    unconfigured (in reverse: the policy stops while the filter is missing, and each starts
    afresh from what the restarted node publishes, its clock included), then the nodes from
    that one on are brought up in order, stopping before any node that is ``GONE``. Empty
    when every node is active. A node in any other state (finalized, unknown) counts as
    gone: it has to be restarted."""
    known = {name: states.get(name, GONE) for name in nodes}
    known = {name: state if state in _RANK else GONE for name, state in known.items()}
    first_down = next((i for i, name in enumerate(nodes) if known[name] != "active"), None)
    if first_down is None:
        return []
    steps = [
        (name, step)
        for name in reversed(nodes[first_down + 1 :])
        if known[name] != GONE
        for step in transitions_between(known[name], "unconfigured")
    ]
    for name in nodes[first_down:]:
        state = known[name]
        if state == GONE:
            break
        state = "unconfigured" if name != nodes[first_down] else state
        steps += [(name, step) for step in transitions_between(state, "active")]
    return steps


def plan(operation: str, nodes: list[str], states: dict[str, str]) -> list[tuple[str, str]]:
    """(node, transition) in the order to run them, for ``operation`` on ``nodes`` (given in
    bring-up order) whose current states are ``states``."""
    if operation not in OPERATIONS:
        raise ValueError(f"unknown operation {operation!r}; choose one of {sorted(OPERATIONS)}.")
    goal, forward = OPERATIONS[operation]
    missing = [node for node in nodes if node not in states]
    if missing:
        raise ValueError(f"no lifecycle state known for {', '.join(missing)}.")
    if goal == "active":
        first_down = next((i for i, n in enumerate(nodes) if states[n] != "active"), len(nodes))
        if any(states[n] == "active" for n in nodes[first_down + 1 :]):
            # A node restarted while nothing watched (a respawned manager finds the arm side
            # new and the filter still active): what follows it starts afresh from what it
            # publishes, its clock included, as after a death seen by supervision.
            return recovery_plan(nodes, states)
    ordered = nodes if forward else list(reversed(nodes))
    return [(node, step) for node in ordered for step in transitions_between(states[node], goal)]

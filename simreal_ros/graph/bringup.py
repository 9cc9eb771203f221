"""The order and the lifecycle transitions that bring the graph's managed nodes up and down.

The lifecycle manager node executes these plans; this module only decides them, so the
order is testable without ROS. The arm comes first (its joint states feed everything),
then the safety filter (so nothing reaches the arm unfiltered), then the policy. Going
down is the reverse: the policy stops first and the safety filter brakes the arm last.
Plain Python: no rclpy.
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


@dataclasses.dataclass
class LifecycleManagerConfig:
    node_names: list = setting(
        list(BRING_UP_ORDER),
        "Managed lifecycle nodes in bring-up order (brought down in reverse)",
    )
    autostart: bool = setting(False, "Configure and activate every managed node at start-up")
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


def plan(operation: str, nodes: list[str], states: dict[str, str]) -> list[tuple[str, str]]:
    """(node, transition) in the order to run them, for ``operation`` on ``nodes`` (given in
    bring-up order) whose current states are ``states``."""
    if operation not in OPERATIONS:
        raise ValueError(f"unknown operation {operation!r}; choose one of {sorted(OPERATIONS)}.")
    goal, forward = OPERATIONS[operation]
    missing = [node for node in nodes if node not in states]
    if missing:
        raise ValueError(f"no lifecycle state known for {', '.join(missing)}.")
    ordered = nodes if forward else list(reversed(nodes))
    return [(node, step) for node in ordered for step in transitions_between(states[node], goal)]

"""The lifecycle manager's plans: bring-up order, reverse order down, from any state."""

import pytest

from simreal_ros.graph.bringup import LifecycleManagerConfig, plan, transitions_between

NODES = ["sim_bridge", "safety", "policy"]


BRING_UP = [
    ("sim_bridge", "configure"),
    ("sim_bridge", "activate"),
    ("safety", "configure"),
    ("safety", "activate"),
    ("policy", "configure"),
    ("policy", "activate"),
]


def test_startup_configures_and_activates_in_bring_up_order():
    states = dict.fromkeys(NODES, "unconfigured")
    assert plan("startup", NODES, states) == BRING_UP


def test_pause_deactivates_in_reverse_so_the_policy_stops_before_the_filter_brakes():
    states = dict.fromkeys(NODES, "active")
    assert plan("pause", NODES, states) == [
        ("policy", "deactivate"),
        ("safety", "deactivate"),
        ("sim_bridge", "deactivate"),
    ]


def test_plans_start_from_each_node_s_own_state_and_skip_what_is_done():
    states = {"sim_bridge": "active", "safety": "inactive", "policy": "unconfigured"}
    assert plan("resume", NODES, states) == [
        ("safety", "activate"),
        ("policy", "configure"),
        ("policy", "activate"),
    ]
    assert plan("cleanup", NODES, states) == [
        ("safety", "cleanup"),
        ("sim_bridge", "deactivate"),
        ("sim_bridge", "cleanup"),
    ]
    assert transitions_between("active", "active") == []


def test_startup_after_an_unwatched_restart_brings_what_follows_it_up_afresh():
    # A respawned manager's autostart finds a new sim bridge (a new sim clock from 0) behind
    # a filter and a policy still active on the old clock: the filter refused every newer
    # state as out of order until the new clock caught up (a minute in a test).
    states = {"sim_bridge": "unconfigured", "safety": "active", "policy": "active"}
    down = [
        ("policy", "deactivate"),
        ("policy", "cleanup"),
        ("safety", "deactivate"),
        ("safety", "cleanup"),
    ]
    expected = down + BRING_UP
    assert plan("startup", NODES, states) == plan("resume", NODES, states) == expected
    # In order (nothing active after a node that is down): only what is missing.
    states = {"sim_bridge": "active", "safety": "unconfigured", "policy": "unconfigured"}
    assert plan("startup", NODES, states)[0] == ("safety", "configure")


def test_bad_states_operations_and_node_lists_are_refused_with_reasons():
    with pytest.raises(ValueError, match="finalized node has to be restarted"):
        plan("startup", ["policy"], {"policy": "finalized"})
    with pytest.raises(ValueError, match="unknown operation"):
        plan("reboot", NODES, dict.fromkeys(NODES, "active"))
    with pytest.raises(ValueError, match="no lifecycle state known for policy"):
        plan("startup", NODES, {"sim_bridge": "active", "safety": "active"})
    with pytest.raises(ValueError, match="give each managed node once"):
        LifecycleManagerConfig(node_names=["safety", "safety"])

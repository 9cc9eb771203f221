"""Bag-driven regression: replaying a recorded session through the filter gives the same
interventions as were recorded.

The test records a session the way the graph would (policy actions at 20 Hz, joint states
and safety ticks at 100 Hz, including a jump, a NaN action, a short action, an out-of-order
stamp, a joint-state gap and policy silence) into a real rosbag2 MCAP bag written with
rosbags, its typestore registered from the .msg text in msg/. It then reads the bag back
and feeds a fresh filter from it alone: every tick's interventions and state must match
the recorded /safety/status, and the expected reasons must all be there.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from simreal_ros.robot.description import load_robot_description
from simreal_ros.safety import SafetyConfig, SafetyFilter

ROOT = Path(__file__).resolve().parents[2]
ROBOT = load_robot_description()
NAMES = list(ROBOT.joint_names)
HOME = np.asarray(ROBOT.home_position, dtype=float)
CONFIG = SafetyConfig(command_timeout=0.12, state_timeout=0.05)
START = 1_000.0
PROJECT_TYPES = ("SafetyIntervention", "PolicyAction", "SafetyStatus")
EXPECTED_REASONS = {
    "acceleration",
    "velocity",
    "position",
    "non_finite",
    "wrong_size",
    "out_of_order",
    "stale_state",
    "stale_command",
}


def typestore():
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    store = get_typestore(Stores.ROS2_JAZZY)
    types = {}
    for name in PROJECT_TYPES:
        text = (ROOT / "msg" / f"{name}.msg").read_text()
        types.update(get_types_from_msg(text, f"simreal_ros/msg/{name}"))
    store.register(types)
    return store


def ns(seconds: float) -> int:
    return round(seconds * 1e9)


def header(store, seconds: float):
    time_cls = store.types["builtin_interfaces/msg/Time"]
    sec = math.floor(seconds)
    stamp = time_cls(sec=sec, nanosec=round((seconds - sec) * 1e9))
    return store.types["std_msgs/msg/Header"](stamp=stamp, frame_id="")


def seconds_of(stamp) -> float:
    return stamp.sec + stamp.nanosec * 1e-9


def session():
    """The scripted session: (time, kind, payload) in time order."""
    events = []
    arm = HOME.copy()
    for k in range(200):  # 2 s at 100 Hz
        t = START + k * 0.01
        gap = 80 <= k < 90  # joint states stop for 100 ms
        if not gap:
            events.append((t + 0.0001, "state", None))
        if k % 5 == 0 and not 150 <= k < 190:  # policy at 20 Hz, silent 1.5 s..1.9 s
            target = HOME + 0.05 * np.sin(0.2 * k + np.arange(7))
            target[-1] = 0.01
            names, stamp = (), t
            if 20 <= k < 50:  # a jump of the pan joint, long enough to reach top speed
                target = HOME.copy()
                target[0] += 1.2
                target[-1] = 0.07  # the gripper past its 0.04 m limit
            if k == 50:
                target = target.copy()
                target[3] = math.nan
            if k == 60:
                target = target[:5]
            if k == 110:
                stamp = t - 0.08  # fresh enough, but older than the last accepted stamp
            if k == 120:
                stamp = t - 0.2  # stale
            events.append((t + 0.0002, "action", (target, names, stamp)))
        events.append((t + 0.0005, "tick", None))
    del arm
    return events


def record(bag: Path, store) -> int:
    """Run the session live through a filter and write inputs and statuses to the bag."""
    from rosbags.rosbag2 import StoragePlugin, Writer

    live = SafetyFilter.from_description(ROBOT, CONFIG)
    action_t, state_t, status_t = (
        "simreal_ros/msg/PolicyAction",
        "sensor_msgs/msg/JointState",
        "simreal_ros/msg/SafetyStatus",
    )
    Action, State, Status = (store.types[t] for t in (action_t, state_t, status_t))
    Intervention = store.types["simreal_ros/msg/SafetyIntervention"]
    arm = HOME.copy()
    ticks = 0
    with Writer(bag, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        c_action = writer.add_connection("/policy/action", action_t, typestore=store)
        c_state = writer.add_connection("/joint_states", state_t, typestore=store)
        c_status = writer.add_connection("/safety/status", status_t, typestore=store)
        for t, kind, payload in session():
            now = ns(t) * 1e-9  # exactly what a replay reads back from the bag
            if kind == "state":
                order = list(reversed(NAMES))  # the arm publishes in its own order
                msg = State(
                    header=header(store, t),
                    name=order,
                    position=np.array([arm[NAMES.index(n)] for n in order]),
                    velocity=np.zeros(0),
                    effort=np.zeros(0),
                )
                live.submit_named_state(msg.name, msg.position, seconds_of(msg.header.stamp), now)
                writer.write(c_state, ns(t), store.serialize_cdr(msg, state_t))
            elif kind == "action":
                target, names, stamp = payload
                msg = Action(
                    header=header(store, stamp),
                    policy_version="v1",
                    sequence=0,
                    joint_names=list(names),
                    values=np.asarray(target, dtype=float),
                    human_intervention=False,
                )
                live.submit_command(msg.values, seconds_of(msg.header.stamp), now, names, "v1")
                writer.write(c_action, ns(t), store.serialize_cdr(msg, action_t))
            else:
                result = live.tick(seconds_of(header(store, t).stamp))
                arm += 0.5 * (result.command - arm)  # a lagging arm
                msg = Status(
                    header=header(store, t),
                    state=result.state,
                    interventions=[
                        Intervention(
                            limit=i.limit,
                            joint=i.joint,
                            requested=i.requested,
                            allowed=i.allowed,
                            excess=i.excess,
                        )
                        for i in result.interventions
                    ],
                    limited_joints=list(result.limited_joints),
                    watchdog_tripped=result.watchdog_tripped,
                    estop_latched=result.estop_latched,
                    engaged=result.engaged,
                    policy_version=result.policy_version,
                    command_age=min(result.command_age, 1e9),
                    state_age=min(result.state_age, 1e9),
                    interventions_total=sum(live.counts.values()),
                )
                writer.write(c_status, ns(t), store.serialize_cdr(msg, status_t))
                ticks += 1
    return ticks


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def test_replaying_a_recorded_bag_gives_the_same_interventions(tmp_path):
    from rosbags.rosbag2 import Reader

    store = typestore()
    bag = tmp_path / "session"
    recorded_ticks = record(bag, store)
    assert (bag / "metadata.yaml").is_file()
    assert list(bag.glob("*.mcap"))

    replay = SafetyFilter.from_description(ROBOT, CONFIG)
    compared, seen = 0, set()
    with Reader(bag) as reader:
        for connection, timestamp, raw in reader.messages():
            msg = store.deserialize_cdr(raw, connection.msgtype)
            now = timestamp * 1e-9
            if connection.topic == "/joint_states":
                replay.submit_named_state(
                    msg.name, msg.position, seconds_of(msg.header.stamp), now
                )
            elif connection.topic == "/policy/action":
                replay.submit_command(
                    msg.values,
                    seconds_of(msg.header.stamp),
                    now,
                    msg.joint_names,
                    msg.policy_version,
                )
            else:
                result = replay.tick(seconds_of(msg.header.stamp))
                got = [
                    (i.limit, i.joint, i.requested, i.allowed, i.excess)
                    for i in result.interventions
                ]
                want = [
                    (i.limit, i.joint, i.requested, i.allowed, i.excess) for i in msg.interventions
                ]
                assert len(got) == len(want), (now, got, want)
                for g, w in zip(got, want, strict=True):
                    assert g[:2] == w[:2] and all(map(same, g[2:], w[2:])), (now, g, w)
                assert result.state == msg.state, now
                assert result.watchdog_tripped == msg.watchdog_tripped, now
                seen.update(i.limit for i in msg.interventions)
                compared += 1
    assert compared == recorded_ticks == 200
    missing = EXPECTED_REASONS - seen
    assert not missing, f"the recorded session lacks interventions: {sorted(missing)}"


def test_the_bag_typestore_matches_the_interface_files():
    store = typestore()
    fields = [name for name, _ in store.fielddefs["simreal_ros/msg/SafetyIntervention"][1]]
    assert fields == ["limit", "joint", "requested", "allowed", "excess"]
    with pytest.raises(KeyError):
        store.types["simreal_ros/msg/NoSuchType"]

"""kill -9 of the recorder process mid-episode, then recover: every flushed message is there.

The guarantee under test: once ``~/flush`` answers "flushed K messages" (or once a periodic
flush, every ``flush_period_s``, has run), those K messages survive a SIGKILL. Messages
received after the last flush may or may not be in the file; the test prints how many were.
"""

from __future__ import annotations

import re

import pytest
import rclpy
from mcap.reader import make_reader
from rostest_helpers import spin_until, wait_for_subscribers
from sensor_msgs.msg import JointState
from simreal_ros.srv import StartEpisode
from std_srvs.srv import Trigger

from simreal_ros.episodes.bag_reader import bag_state
from simreal_ros.episodes.recovery import recover_bag
from simreal_ros.episodes.typestore import project_typestore
from simreal_ros.graph.processes import NodeProcess, graph_environment, python_module_argv
from simreal_ros.nodes import qos

pytestmark = pytest.mark.graph


def call(executor, node, srv_type, name, timeout=10.0, **fields):
    client = node.create_client(srv_type, name)
    assert spin_until(executor, client.service_is_ready, 20.0), f"{name} not available"
    future = client.call_async(srv_type.Request(**fields))
    assert spin_until(executor, future.done, timeout), f"{name} did not answer"
    node.destroy_client(client)
    return future.result()


def test_sigkill_mid_episode_loses_nothing_that_was_flushed(executor, rclpy_context, tmp_path):
    recorder = NodeProcess(
        "recorder",
        python_module_argv(
            "simreal_ros.nodes.recorder",
            [
                "-p", f"data_dir:={tmp_path}",
                "-p", "min_free_disk_mb:=0.0",
                "-p", "flush_period_s:=0.05",
            ],
        ),
        graph_environment(),
    )  # fmt: skip
    try:
        assert recorder.wait_for_output("recorder ready", 30.0), recorder.output()
        node = rclpy.create_node("kill_test", context=rclpy_context)
        executor.add_node(node)
        pub = node.create_publisher(JointState, "/joint_states", qos.STATUS)
        assert wait_for_subscribers(executor, pub, timeout=20.0)
        started = call(executor, node, StartEpisode, "/recorder/start", episode_id="killed")
        assert started.success, started.message

        def send(first, count):
            for i in range(first, first + count):
                msg = JointState(name=["a"], position=[float(i)])
                msg.header.stamp.sec = 1 + i
                pub.publish(msg)
                executor.spin_once(timeout_sec=0.0005)

        # "Written" = what the recorder reported flushed. Send in batches no deeper than the
        # publisher's history (STATUS keeps 50), each confirmed by ~/flush, so DDS cannot
        # overwrite a sample on a loaded machine before the recorder got it.
        before, batch = 300, 50
        flushed = 0

        def flushed_at_least(n):
            nonlocal flushed
            answer = call(executor, node, Trigger, "/recorder/flush")
            flushed = int(re.search(r"flushed (\d+)", answer.message).group(1))
            return flushed >= n

        for first in range(0, before, batch):
            send(first, batch)
            spin_until(executor, lambda n=first + batch: flushed_at_least(n), 10.0)
        # The recorder reports how many it has flushed; that is the guarantee's "written".
        assert flushed_at_least(0) and flushed > 0
        reported = flushed
        after = 200
        send(before, after)  # in flight when the kill comes
        recorder.kill()  # SIGKILL to the whole process group
        recorder.process.wait(timeout=10)
        assert recorder.returncode == -9

        bag = tmp_path / "killed"
        assert bag_state(bag) == "unclosed"
        report = recover_bag(bag)
        assert report.metadata.outcome == "incomplete"
        with open(bag / "killed.mcap", "rb") as f:
            payloads = []
            for _, _channel, message in make_reader(f).iter_messages(topics=["/joint_states"]):
                payloads.append(message.data)
        store = project_typestore()
        positions = [
            store.deserialize_cdr(data, "sensor_msgs/msg/JointState").position[0]
            for data in payloads
        ]
        # Every message the recorder reported flushed is there: the first `reported`
        # messages it received, all with positions below `before`, in order.
        early = [p for p in positions if p < before]
        assert len(early) >= reported, (len(early), reported)
        assert early == sorted(set(early))
        # After the flush: whatever DDS delivered and the OS got before the kill, in order.
        tail = positions[len(early) :]
        assert tail == sorted(set(tail)) and all(before <= p < before + after for p in tail)
        survived = len(tail)
        print(
            f"\nkill -9: {len(early)} recovered of {reported} reported flushed "
            f"({before} sent before the flush); "
            f"{survived}/{after} sent after the last explicit flush survived "
            f"(periodic flush every 50 ms)"
        )
    finally:
        recorder.stop()


def test_ctrl_c_closes_the_running_episode_as_aborted(executor, rclpy_context, tmp_path):
    recorder = NodeProcess(
        "recorder",
        python_module_argv(
            "simreal_ros.nodes.recorder",
            ["-p", f"data_dir:={tmp_path}", "-p", "min_free_disk_mb:=0.0"],
        ),
        graph_environment(),
    )
    try:
        assert recorder.wait_for_output("recorder ready", 30.0), recorder.output()
        node = rclpy.create_node("ctrl_c_test", context=rclpy_context)
        executor.add_node(node)
        started = call(executor, node, StartEpisode, "/recorder/start", episode_id="interrupted")
        assert started.success, started.message
    finally:
        recorder.stop()  # SIGINT first, as Ctrl-C
    assert "episode interrupted: aborted" in recorder.output(), recorder.output()
    assert bag_state(tmp_path / "interrupted") == "closed"
    from simreal_ros.episodes.dataset import read_episode_metadata

    meta = read_episode_metadata(tmp_path / "interrupted")
    assert meta.outcome == "aborted" and "shut down" in meta.note

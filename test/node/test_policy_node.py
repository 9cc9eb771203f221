"""policy node in one process: lifecycle, actions from observations, hot swap, rollback."""

from __future__ import annotations

import copy

import numpy as np
import torch
from geometry_msgs.msg import PoseStamped
from peft import LoraConfig, get_peft_model
from policy_world import PolicyWorld, make_policy
from rclpy.lifecycle import LifecyclePublisher, TransitionCallbackReturn
from rclpy.parameter import Parameter
from rostest_helpers import spin_until, wait_for_subscribers
from sensor_msgs.msg import JointState
from simreal_ros.msg import PolicyUpdate, TaskStatus
from simreal_ros.srv import Rollback

from simreal_ros.adapters.store import AdapterStore
from simreal_ros.nodes import qos
from simreal_ros.nodes.policy import PolicyNode
from simreal_ros.policy import checkpoint as ckpt
from simreal_ros.policy.inference import deploy_base
from simreal_ros.policy.spec import SpecConverter
from simreal_ros.robot.description import load_robot_description
from simreal_ros.training.torch_checkpoint import load_checkpoint, make_untrained_checkpoint

ROBOT = load_robot_description()


def deployed_base(checkpoint):
    return deploy_base(
        checkpoint, SpecConverter.for_robot(checkpoint.spec, ROBOT).forward_kinematics
    )


OBJECT = np.array([0.55, 0.05, 0.025])
GOAL = np.array([0.6, -0.1, 0.025])
# Joint states arrive in an order other than the controller's; the node must reorder.
SHUFFLED = list(reversed(ROBOT.joint_names))


class World(PolicyWorld):
    """Test-side arm: publishes observations on a timer and collects the node's actions."""

    def __init__(self, rclpy_context, executor, rate_hz: float = 50.0) -> None:
        super().__init__(rclpy_context, executor, "fake_arm")
        self.pose = self.node.create_publisher(PoseStamped, "/object/pose", qos.STATE)
        self.position = np.asarray(ROBOT.home_position, dtype=float) + 0.05
        self.position[-1] = 0.01
        self.pose_seen = True  # False: /object/pose stops, as when perception loses the cube
        self.node.create_timer(1.0 / rate_hz, self.publish)

    def observation(self) -> dict:
        return {
            "joint_position": self.position,
            "joint_velocity": np.zeros(7),
            "object_position": OBJECT,
            "object_orientation": np.array([1.0, 0.0, 0.0, 0.0]),
            "goal_position": GOAL,
        }

    def publish(self) -> None:
        js = JointState()
        js.header.stamp = self.node.get_clock().now().to_msg()
        order = [ROBOT.joint_names.index(n) for n in SHUFFLED]
        js.name = SHUFFLED
        js.position = self.position[order].tolist()
        js.velocity = [0.0] * 7
        self.joints.publish(js)
        pose = PoseStamped()
        pose.pose.position.x, pose.pose.position.y, pose.pose.position.z = OBJECT.tolist()
        pose.pose.orientation.w = 1.0
        if self.pose_seen:
            self.pose.publish(pose)
        status = TaskStatus()
        status.task = "reach"
        status.goal.x, status.goal.y, status.goal.z = GOAL.tolist()
        self.status.publish(status)


def make_adapter(base_dir, adapter_dir, version):
    """What the learner does: peft LoRA on the actor, (here random) training, save_pretrained."""
    base = load_checkpoint(base_dir)
    torch.manual_seed(7)
    peft_actor = get_peft_model(
        copy.deepcopy(base.model.actor),
        LoraConfig(r=4, lora_alpha=8, target_modules=["trunk.0", "trunk.2", "mean_head"]),
    )
    with torch.no_grad():
        for name, parameter in peft_actor.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0.0, 0.3)
    peft_actor.save_pretrained(str(adapter_dir))
    return ckpt.write_adapter_metadata(adapter_dir, base, version, base.version)


def commit_adapter(base_dir, store: AdapterStore, version, promoted=True, activate=True):
    """What the learner does with a screened candidate: commit it, activate it if promoted."""
    with store.staging(version) as staging:
        metadata = make_adapter(base_dir, staging, version)
        screening = {"promoted": promoted, "reason": "test" if promoted else "broke the gate"}
        stored = store.commit(staging, version, metadata, screening, robot=ROBOT)
    if promoted and activate:
        store.activate(version, "promoted")
    return stored


def test_lifecycle_transitions_and_actions_match_the_core_policy(
    rclpy_context, executor, tmp_path
):
    base_dir = make_untrained_checkpoint(tmp_path / "base", ROBOT, version="base-v1")
    world = World(rclpy_context, executor)
    node = make_policy(rclpy_context, executor, checkpoint=str(base_dir))
    assert node.versions.active_version == ""
    assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
    assert node.versions.active_version == "base-v1"
    # Configured but inactive: nothing is published, and the lifecycle publisher is off.
    assert isinstance(node._action_pub, LifecyclePublisher)
    assert not node._action_pub.is_activated
    spin_until(executor, lambda: False, 0.4)
    assert world.actions == []
    assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS
    assert node._action_pub.is_activated
    assert spin_until(executor, lambda: len(world.actions) >= 10, 10.0)
    action = world.actions[-1]
    assert action.policy_version == "base-v1"
    assert list(action.joint_names) == list(ROBOT.joint_names)
    # Same numbers as the core policy on the same observation, despite shuffled joint_states.
    expected = deployed_base(load_checkpoint(base_dir)).act(world.observation())
    np.testing.assert_allclose(action.values, expected, atol=1e-9)
    sequences = [a.sequence for a in world.actions]
    assert sequences == sorted(set(sequences))
    assert node.trigger_deactivate() == TransitionCallbackReturn.SUCCESS
    assert not node._action_pub.is_activated
    spin_until(executor, lambda: False, 0.2)  # let in-flight messages land
    count = len(world.actions)
    node._action_pub.publish(action)  # even a direct publish is dropped while inactive
    spin_until(executor, lambda: False, 0.5)
    assert len(world.actions) == count, "published while inactive"
    publisher = node._action_pub
    assert node.trigger_cleanup() == TransitionCallbackReturn.SUCCESS
    assert node.versions.active_version == "" and node.versions.checkpoint is None
    assert node._action_pub is None and publisher not in node._managed_entities


def test_a_stale_object_pose_skips_ticks_while_the_joints_are_fresh(
    rclpy_context, executor, tmp_path
):
    # A perception node that loses the marker publishes nothing: the policy must not keep
    # acting on the cube's last pose.
    base_dir = make_untrained_checkpoint(tmp_path / "base", ROBOT)
    world = World(rclpy_context, executor)
    node = make_policy(
        rclpy_context, executor, checkpoint=str(base_dir), autostart=True, max_observation_age=0.3
    )
    assert spin_until(executor, lambda: len(world.actions) >= 5, 10.0)
    assert node.statistics()["skipped_stale_observation"] == 0
    world.pose_seen = False
    assert spin_until(executor, lambda: node.statistics()["skipped_stale_observation"] >= 4, 5.0)
    acted = len(world.actions)
    assert spin_until(executor, lambda: node.statistics()["skipped_stale_observation"] >= 8, 5.0)
    assert len(world.actions) == acted, "acted on a stale object pose"
    assert node.statistics()["joint_state_age_ms"] < 300.0  # the joints stayed fresh
    world.pose_seen = True
    assert spin_until(executor, lambda: len(world.actions) > acted, 5.0)


def test_configure_refuses_a_checkpoint_with_another_rate(rclpy_context, executor, tmp_path):
    base_dir = make_untrained_checkpoint(tmp_path / "base", ROBOT, control_rate_hz=20.0)
    node = make_policy(rclpy_context, executor, checkpoint=str(base_dir), control_rate_hz=100.0)
    assert node.trigger_configure() == TransitionCallbackReturn.FAILURE
    assert "control_rate_hz" in node.versions.last_error
    assert node.versions.active_version == ""


class SimClock:
    """Drives the node's clock (use_sim_time) in lockstep: one 100 Hz tick per advance.

    The policy's timer runs on this clock, so a tick is missed only if the node skips it,
    never because the shared test machine was busy (wall-clock jitter is the benchmark's
    business: bench/policy_node.py counts missed ticks at 100 Hz in real time).
    """

    PERIOD_NS = 10_000_000

    def __init__(self, world: World, executor) -> None:
        from rosgraph_msgs.msg import Clock

        self.world, self.executor, self.now_ns = world, executor, 0
        self.statistics = dict  # the node's, once there is one: what a failure reports
        self.publisher = world.node.create_publisher(Clock, "/clock", 10)
        self.message = Clock()

    def advance(self, ticks: int = 1) -> None:
        for _ in range(ticks):
            self.now_ns += self.PERIOD_NS
            self.message.clock.sec, self.message.clock.nanosec = divmod(self.now_ns, 10**9)
            self.publisher.publish(self.message)
            expected = self.now_ns // self.PERIOD_NS
            assert spin_until(self.executor, lambda e=expected: self.last_sequence() >= e, 5.0), (
                f"no action for tick {expected} (the node's statistics: {self.statistics()})"
            )

    def last_sequence(self) -> int:
        return self.world.actions[-1].sequence if self.world.actions else -1

    def advance_until(self, condition, timeout_s: float) -> bool:
        """Tick until ``condition()``; the limit is wall time, because what ticks wait for
        (an adapter merging on the worker thread) runs in wall time, and a quiet machine
        ticks fast."""
        import time

        end = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() > end:
                return False
            self.advance()
        return True


def test_hot_swap_at_100_hz_misses_no_tick_and_rollback_returns(rclpy_context, executor, tmp_path):
    base_dir = make_untrained_checkpoint(
        tmp_path / "base", ROBOT, control_rate_hz=100.0, version="base-v1"
    )
    # a2 is kept in the store (merged at configure); a1 is committed later and arrives by
    # update (merged while ticking).
    store = AdapterStore(tmp_path / "store")
    commit_adapter(base_dir, store, "a2", activate=False)
    world = World(rclpy_context, executor, rate_hz=100.0)
    clock = SimClock(world, executor)
    node = make_policy(
        rclpy_context,
        executor,
        checkpoint=str(base_dir),
        autostart=True,
        use_sim_time=True,
        adapter_store=str(tmp_path / "store"),
        diagnostics_period=0.2,
        # The observations' freshness is judged in wall time, and a loaded test host can
        # stall the world's publisher for 0.5 s between two lockstep ticks: the tick is then
        # skipped as stale (right, and tested in test_policy_runtime.py), not missed.
        max_observation_age=60.0,
    )
    clock.statistics = node.statistics
    assert node.versions.active_version == "base-v1"
    assert wait_for_subscribers(executor, clock.publisher)
    # Observations first (they arrive on their own, in wall time), then tick.
    assert spin_until(
        executor, lambda: all(m.received for m in (node._joints, node._object, node._status)), 10.0
    )
    clock.advance(100)
    assert wait_for_subscribers(executor, world.updates)
    a1 = commit_adapter(base_dir, store, "a1")
    update = PolicyUpdate(
        version="a1",
        parent_version="base-v1",
        adapter_path=str(a1.path),
        checksum=a1.checksum,
        promoted=True,
        method="bc",
        reason="test",
    )
    world.updates.publish(update)
    # Ticks continue while the adapter loads off the executor thread.
    ticks_before = len(world.actions)
    assert clock.advance_until(lambda: world.actions[-1].policy_version == "a1", 60.0)
    print(f"swap after {len(world.actions) - ticks_before} ticks of loading")
    clock.advance(100)

    sequences = np.array([a.sequence for a in world.actions])
    gaps = np.diff(sequences)
    assert np.all(gaps == 1), f"missed ticks at {np.flatnonzero(gaps != 1)}: {gaps[gaps != 1]}"
    assert sequences[0] == 1 and node.statistics()["missed_ticks"] == 0
    versions = [a.policy_version for a in world.actions]
    first_new = versions.index("a1")
    assert set(versions[:first_new]) == {"base-v1"} and set(versions[first_new:]) == {"a1"}
    assert not np.allclose(world.actions[first_new - 1].values, world.actions[first_new].values)

    # A failed load keeps the running version and says why.
    world.updates.publish(
        PolicyUpdate(
            version="a2",
            adapter_path=str(tmp_path / "store" / "a2"),
            checksum="0" * 64,
            promoted=True,
        )
    )
    assert spin_until(executor, lambda: "checksum" in node.versions.last_error, 10.0)
    assert node.versions.active_version == "a1"
    assert spin_until(
        executor,
        lambda: any("checksum" in s.message for d in world.diagnostics for s in d.status),
        5.0,
    )

    client = world.node.create_client(Rollback, "/policy/rollback")
    assert client.wait_for_service(timeout_sec=5.0)

    def call(version: str) -> Rollback.Response:
        future = client.call_async(Rollback.Request(version=version))
        assert spin_until(executor, future.done, 10.0)
        return future.result()

    # The version before a1, by the store's history: the base; the store follows.
    response = call("")
    assert response.success, response.message
    assert response.active_version == "base-v1" and store.current() is None
    clock.advance(5)
    assert world.actions[-1].policy_version == "base-v1"
    response = call("a1")
    assert response.success, response.message
    assert node.versions.active_version == "a1" and store.current() == "a1"
    # a2 is kept in the store, but the checksum it was announced with still does not hold.
    response = call("a2")
    assert not response.success and "checksum" in response.message
    response = call("nope")
    assert not response.success and "nope" in response.message
    assert node.versions.active_version == "a1" and store.current() == "a1"


def rollback(node: PolicyNode, version: str) -> Rollback.Response:
    """The ~/rollback callback, called as the service would call it."""
    return node._on_rollback(Rollback.Request(version=version), Rollback.Response())


def test_rollback_moves_the_store_and_the_running_version_together(
    rclpy_context, executor, tmp_path
):
    base_dir = make_untrained_checkpoint(tmp_path / "base", ROBOT, version="base-v1")
    store = AdapterStore(tmp_path / "store")
    commit_adapter(base_dir, store, "v0001")
    commit_adapter(base_dir, store, "v0002")
    commit_adapter(base_dir, store, "v0003", promoted=False)
    make_adapter(base_dir, tmp_path / "store" / "by_hand", "by_hand")  # no MANIFEST
    (tmp_path / "store" / ".staging-v0004.x").mkdir()  # a killed save's debris
    node = make_policy(
        rclpy_context, executor, checkpoint=str(base_dir), adapter_store=str(store.root)
    )
    assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
    # Preloaded: the store's kept versions, never a rejected one nor what it does not know.
    assert set(node.versions.cache) == {"base-v1", "v0001", "v0002"}

    def together(version: str) -> None:
        assert node.versions.active_version == version
        assert store.current() == (None if version == "base-v1" else version)

    assert rollback(node, "v0002").success
    together("v0002")
    # Empty: the version before, by the store's history, walking back (not toggling).
    response = rollback(node, "")
    assert response.success and response.active_version == "v0001", response.message
    together("v0001")
    assert rollback(node, "").active_version == "base-v1"
    together("base-v1")
    response = rollback(node, "")
    assert not response.success and "no earlier version" in response.message
    together("base-v1")

    # Refused: the running version and the store stay as they were, and the node says why.
    for version, why in (
        ("v0003", "rejected by screening (broke the gate)"),
        ("by_hand", "no MANIFEST.json"),
        ("v0042", "not in"),
    ):
        response = rollback(node, version)
        assert not response.success and why in response.message, response.message
        assert response.active_version == "base-v1"
        assert why in node.versions.last_error
        together("base-v1")

    assert rollback(node, "v0002").success
    together("v0002")
    assert node.versions.last_error == ""
    # A kept version modified on disk is refused, though it is cached.
    weights = store.root / "v0001" / ckpt.ADAPTER_WEIGHTS
    weights.write_bytes(weights.read_bytes()[:-8])
    response = rollback(node, "v0001")
    assert not response.success and "checksum" in response.message
    together("v0002")
    # A configure starts from what the store says runs.
    assert node.trigger_cleanup() == TransitionCallbackReturn.SUCCESS
    assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
    together("v0002")
    # The base by its name is the store's "no adapter".
    assert rollback(node, "base-v1").success
    together("base-v1")
    assert store.active()["history"][-1]["reason"] == "rollback"


def test_rollback_without_a_store_is_refused(rclpy_context, executor, tmp_path):
    base_dir = make_untrained_checkpoint(tmp_path / "base", ROBOT, version="base-v1")
    node = make_policy(rclpy_context, executor, checkpoint=str(base_dir))
    response = rollback(node, "")
    assert not response.success and "configure" in response.message
    assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
    response = rollback(node, "")
    assert not response.success and "adapter_store" in response.message
    assert node.versions.active_version == "base-v1"


def test_exploration_is_a_run_time_switch_capped_by_its_std(rclpy_context, executor, tmp_path):
    """explore on: actions scatter around the deterministic one, no further than the std
    cap allows; off again: exactly the deterministic action. Collection episodes use it."""
    base_dir = make_untrained_checkpoint(tmp_path / "base", ROBOT, version="base-v1")
    world = World(rclpy_context, executor)
    node = make_policy(rclpy_context, executor, checkpoint=str(base_dir), autostart=True)
    expected = deployed_base(load_checkpoint(base_dir)).act(world.observation())
    assert spin_until(executor, lambda: len(world.actions) >= 3, 10.0)
    np.testing.assert_allclose(world.actions[-1].values, expected, atol=1e-9)
    cap = 0.05
    result = node.set_parameters(
        [Parameter("exploration_std_max", value=cap), Parameter("explore", value=True)]
    )
    assert all(r.successful for r in result)
    start = len(world.actions)
    assert spin_until(executor, lambda: len(world.actions) >= start + 40, 10.0)
    spin_until(executor, lambda: False, 0.1)
    explored = np.array([a.values for a in world.actions[start + 2 :]])
    scale = np.asarray(node.versions.checkpoint.spec.action_scale)
    deviation = (explored - expected) / scale  # in normalised action units
    assert np.abs(deviation).max() > 1e-3, "explore on, but actions did not change"
    # tanh is 1-Lipschitz: |tanh(m + s e) - tanh(m)| <= cap * |e|, and |e| < 5 here.
    assert np.abs(deviation).max() <= 5 * cap
    assert np.std(deviation[:, :6]) < 2 * cap
    assert node.set_parameters([Parameter("explore", value=False)])[0].successful
    start = len(world.actions)
    assert spin_until(executor, lambda: len(world.actions) >= start + 5, 10.0)
    np.testing.assert_allclose(world.actions[-1].values, expected, atol=1e-9)

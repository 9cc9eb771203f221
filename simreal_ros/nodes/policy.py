"""policy: lifecycle node that runs the arm policy at the control rate and hot-swaps adapters.

Transitions
    configure   load the base checkpoint and check its conventions against the robot
                description and the configured rate (a mismatch fails the transition,
                naming the field); subscribe to observations and policy updates
    activate    start the control timer: every tick publishes /policy/action from the
                newest /joint_states, /object/pose and /task/status goal
    deactivate  stop the timer (nothing is published)
    cleanup     drop subscriptions and free the model

The node never imports torch or peft: the base is read with safetensors' numpy backend and
adapters are merged in numpy (policy/lora_merge.py, peft's LoRA merge, checked against it),
so neither start-up nor the first hot swap pays seconds of imports holding the GIL
(bench/policy_startup.py --swap counts the ticks a swap misses).

/policy/action is a lifecycle publisher: enabled on activate, disabled on deactivate.

Hot swap: a promoted /learner/policy_update is loaded on a worker thread (checksum,
conventions, numpy LoRA merge into a copy of the base); the control tick reads
one reference per tick, so the new version takes over between two ticks. A failed load
keeps the running policy and says why in the log and on /diagnostics.

Versions on disk are the adapter store's (`adapter_store`, the learner's store_root): the
newest kept ones are merged at configure, the node starts with the store's current one,
and ~/rollback goes through the store, so the store's active.json and the running version
move together: the store picks the version (an empty request: the one before, by its
history), the node loads it, and only then is it activated in the store and swapped in.
A refusal changes neither.

`sequence` of each PolicyAction is the index of its tick on the timer's grid, so a gap
is a missed tick.
"""

from __future__ import annotations

import collections
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.clock import Clock, ClockType
from rclpy.lifecycle import State, TransitionCallbackReturn
from rclpy.serialization import deserialize_message
from sensor_msgs.msg import JointState

from simreal_ros import stats
from simreal_ros.adapters.store import (
    BASE,
    ROLLBACK,
    AdapterStore,
    StoredVersion,
    foreign_version_reason,
    scoped_store_root,
)
from simreal_ros.msg import PolicyAction, PolicyUpdate, TaskStatus
from simreal_ros.nodes import qos
from simreal_ros.nodes.diagnostics import OK, WARN, diagnostic_array
from simreal_ros.nodes.lifecycle import AutostartLifecycleNode
from simreal_ros.nodes.observation import joint_arrays, observation_from_messages
from simreal_ros.nodes.params import declare_config, declare_robot
from simreal_ros.nodes.runtime import run_node
from simreal_ros.policy import checkpoint as ckpt
from simreal_ros.policy.config import PolicyNodeConfig
from simreal_ros.policy.inference import DeployedPolicy, deploy_adapter, deploy_base
from simreal_ros.robot.joint_order import JointOrder
from simreal_ros.srv import Rollback

MAX_CACHED_VERSIONS = 8


class PolicyNode(AutostartLifecycleNode):
    def __init__(self, **kwargs) -> None:
        super().__init__("policy", **kwargs)
        self.config: PolicyNodeConfig = declare_config(
            self, PolicyNodeConfig, apply=self._apply_config
        )
        self._explore_rng = np.random.default_rng()
        self.robot = declare_robot(self)
        self._loader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="policy-loader")
        self._lock = threading.Lock()  # guards the version tables, not the control path
        self._checkpoint: ckpt.NumpyCheckpoint | None = None
        self._checkpoint_path: Path | None = None
        self._policy: DeployedPolicy | None = None  # swapped atomically between ticks
        self._cache: collections.OrderedDict[str, DeployedPolicy] = collections.OrderedDict()
        self._adapters: dict[str, tuple[str, str]] = {}  # announced: version -> (dir, sha256)
        self._store: AdapterStore | None = None
        self._pending: Future | None = None
        self._last_error = ""
        self._swaps = 0
        # Newest observation messages (converted at the tick, in controller order).
        self._joint_msg: JointState | None = None
        self._joint_raw: bytes | None = None
        self._joint_raw_used: bytes | None = None
        self._joint_time = 0.0
        self._object_msg: PoseStamped | None = None
        self._object_raw: bytes | None = None
        self._object_raw_used: bytes | None = None
        self._object_time = 0.0
        self._status_msg: TaskStatus | None = None
        self._goal_time = 0.0
        self._joint_order = JointOrder(self.robot.joint_names)
        # Control tick bookkeeping.
        self._timer = None
        self._period_ns = 0
        self._grid_origin_ns = 0
        self._last_sequence = -1
        self._ticks = 0
        self._missed = 0
        self._skipped_waiting = 0
        self._skipped_stale = 0
        self._act_errors = 0
        self._inference_us: collections.deque[float] = collections.deque(maxlen=2000)
        self._subscriptions_ = []
        self._action_pub = None
        self._rollback_group = MutuallyExclusiveCallbackGroup()
        self._diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", qos.STATUS)
        # Steady clock: diagnostics keep flowing while sim time is paused (lockstep).
        self._diag_timer = self.create_timer(
            self.config.diagnostics_period,
            self._publish_diagnostics,
            clock=Clock(clock_type=ClockType.STEADY_TIME),
        )
        self._rollback_srv = self.create_service(
            Rollback, "~/rollback", self._on_rollback, callback_group=self._rollback_group
        )
        self.autostart(self.config.autostart)

    def _apply_config(self, config: PolicyNodeConfig) -> None:
        if config.explore != self.config.explore:
            self.get_logger().info(f"exploration {'on' if config.explore else 'off'}")
        self.config = config

    # --- lifecycle -------------------------------------------------------------------

    def _checkpoint_dir(self) -> Path:
        if self.config.checkpoint:
            return Path(self.config.checkpoint).expanduser()
        return ckpt.shipped_checkpoint(self.config.task)

    def on_configure(self, state: State) -> TransitionCallbackReturn:
        rate = self.config.control_rate_hz or None
        try:  # any failure here is said in the log and on /diagnostics, never dropped
            directory = self._checkpoint_dir()
            checkpoint = ckpt.load_numpy_checkpoint(
                directory, description=self.robot, control_rate_hz=rate
            )
            base = deploy_base(checkpoint)
            store = self.config.adapter_store
            store_root = scoped_store_root(store, self.robot.name, directory) if store else None
        except Exception as error:
            self._last_error = f"configure refused: {error}"
            self.get_logger().error(self._last_error)
            self._publish_diagnostics()
            return TransitionCallbackReturn.FAILURE
        self._checkpoint = checkpoint
        self._checkpoint_path = directory
        self._period_ns = round(1e9 / checkpoint.spec.control_rate_hz)
        with self._lock:
            self._cache.clear()
            self._cache[base.version] = base
        self._policy = base
        self._store = AdapterStore(store_root) if store_root is not None else None
        # Before any tick runs: merge the adapters kept on disk, so rollbacks are swaps.
        self._preload_store()
        self._policy = self._store_current(base)
        self._action_pub = self.create_lifecycle_publisher(
            PolicyAction, "/policy/action", qos.COMMAND
        )
        self._subscriptions_ = [
            # Raw (serialized) messages: at up to 500 Hz only the newest one per tick is
            # ever used, so it is deserialized at the tick, once.
            self.create_subscription(
                JointState, "/joint_states", self._on_joint_state, qos.SENSOR_DATA, raw=True
            ),
            self.create_subscription(
                PoseStamped, "/object/pose", self._on_object_pose, qos.SENSOR_DATA, raw=True
            ),
            self.create_subscription(TaskStatus, "/task/status", self._on_task_status, qos.STATUS),
            self.create_subscription(
                PolicyUpdate, "/learner/policy_update", self._on_policy_update, qos.LATCHED
            ),
        ]
        self.get_logger().info(
            f"configured: running {self.version_source} "
            f"({checkpoint.spec.task}, {checkpoint.spec.control_rate_hz:g} Hz, "
            f"{checkpoint.spec.action_mode} actions; adapter store "
            f"{self._store.root if self._store else 'none'})"
        )
        return super().on_configure(state)

    def on_activate(self, state: State) -> TransitionCallbackReturn:
        if self._checkpoint is None or self._period_ns <= 0:
            self._last_error = "activate refused: the node is not configured (no checkpoint)."
            self.get_logger().error(self._last_error)
            return TransitionCallbackReturn.FAILURE
        self._last_sequence = -1
        self._grid_origin_ns = self.get_clock().now().nanoseconds
        self._timer = self.create_timer(self._period_ns / 1e9, self._on_tick)
        self.get_logger().info(
            f"active: publishing /policy/action at {1e9 / self._period_ns:g} Hz, running "
            f"{self.version_source}"
        )
        return super().on_activate(state)  # enables the lifecycle publisher

    def _halt(self) -> None:
        if self._timer is not None:
            self.destroy_timer(self._timer)
            self._timer = None

    def _release(self) -> None:
        self._halt()
        for subscription in self._subscriptions_:
            self.destroy_subscription(subscription)
        self._subscriptions_ = []
        if self._action_pub is not None:
            self.destroy_lifecycle_publisher(self._action_pub)
            self._action_pub = None
        self._policy = None
        self._checkpoint = None
        with self._lock:
            self._cache.clear()
            self._adapters.clear()
        self._store = None
        self._joint_msg = self._object_msg = self._status_msg = None
        self._joint_raw = self._joint_raw_used = None
        self._object_raw = self._object_raw_used = None

    def destroy_node(self) -> None:
        self._loader.shutdown(wait=True, cancel_futures=True)
        super().destroy_node()

    # --- observations ------------------------------------------------------------------

    # Callbacks only keep the newest message (joint states arrive at up to 500 Hz); the
    # tick converts what it uses, once.

    def _on_joint_state(self, raw: bytes) -> None:
        self._joint_raw = raw
        self._joint_time = time.monotonic()

    def _newest_joint_state(self) -> JointState | None:
        raw = self._joint_raw
        if raw is not None and raw is not self._joint_raw_used:
            self._joint_msg = deserialize_message(raw, JointState)
            self._joint_raw_used = raw
        return self._joint_msg

    def _newest_object_pose(self) -> PoseStamped | None:
        raw = self._object_raw
        if raw is not None and raw is not self._object_raw_used:
            self._object_msg = deserialize_message(raw, PoseStamped)
            self._object_raw_used = raw
        return self._object_msg

    def _joint_arrays(self, msg: JointState) -> tuple[np.ndarray, np.ndarray] | None:
        arrays = joint_arrays(self._joint_order, msg)
        if arrays is None:
            _index, missing = self._joint_order.index(msg.name)
            if missing:
                self.get_logger().error(
                    f"/joint_states lacks joint(s) {missing}; the policy needs all of "
                    f"{list(self.robot.joint_names)}. Ignoring these messages.",
                    throttle_duration_sec=5.0,
                )
        return arrays

    def _on_object_pose(self, raw: bytes) -> None:
        self._object_raw = raw
        self._object_time = time.monotonic()

    def _on_task_status(self, msg: TaskStatus) -> None:
        self._status_msg = msg
        self._goal_time = time.monotonic()

    # --- control tick ------------------------------------------------------------------

    def _on_tick(self) -> None:
        policy = self._policy  # one read: a swap lands between ticks, never inside one
        if policy is None or self._action_pub is None:
            return
        now_ns = self.get_clock().now().nanoseconds
        sequence = max((now_ns - self._grid_origin_ns) // self._period_ns, self._last_sequence + 1)
        if self._last_sequence >= 0 and sequence > self._last_sequence + 1:
            self._missed += sequence - self._last_sequence - 1
        self._last_sequence = sequence
        self._ticks += 1
        joint_msg, object_msg = self._newest_joint_state(), self._newest_object_pose()
        status_msg = self._status_msg
        joints = None if joint_msg is None else self._joint_arrays(joint_msg)
        if joints is None or object_msg is None or status_msg is None:
            self._skipped_waiting += 1
            return
        if time.monotonic() - self._joint_time > self.config.max_observation_age:
            self._skipped_stale += 1
            return
        observation = observation_from_messages(joints, object_msg, status_msg.goal)
        start = time.perf_counter()
        config = self.config  # one read: a parameter change lands between ticks
        try:
            rng = self._explore_rng if config.explore else None
            target = policy.act(observation, config.exploration_std_max, rng)
        except ValueError as error:
            self._act_errors += 1
            self.get_logger().error(f"no action this tick: {error}", throttle_duration_sec=2.0)
            return
        self._inference_us.append((time.perf_counter() - start) * 1e6)
        msg = PolicyAction()
        msg.header.stamp = joint_msg.header.stamp
        msg.policy_version = policy.version
        msg.sequence = int(sequence)
        msg.joint_names = list(self.robot.joint_names)
        msg.values = target.tolist()
        self._action_pub.publish(msg)

    # --- versions: hot swap and rollback -----------------------------------------------

    def _on_policy_update(self, msg: PolicyUpdate) -> None:
        if not msg.promoted:
            self.get_logger().info(f"candidate {msg.version} not promoted: {msg.reason}")
            return
        policy = self._policy
        if policy is not None and policy.version == msg.version:
            return  # a latched update we already run
        with self._lock:
            self._adapters[msg.version] = (msg.adapter_path, msg.checksum)
        self.get_logger().info(f"loading promoted adapter {msg.version} from {msg.adapter_path}")
        self._pending = self._loader.submit(self._load_version, msg.version)
        self._pending.add_done_callback(self._finish_swap)

    def _load_version(self, version: str) -> DeployedPolicy:
        """Build a runnable version (cache hit, base, or adapter merge): on the loader
        thread for a swap or a rollback, on the executor thread (from on_configure) for
        the adapters the store keeps."""
        with self._lock:
            cached = self._cache.get(version)
            known = self._adapters.get(version)
        expected = known[1] if known else ""
        if cached is not None:
            if expected and cached.adapter_sha256 and expected != cached.adapter_sha256:
                raise ckpt.CheckpointError(
                    f"checksum: {version} was announced with sha256 {expected[:16]}… but the "
                    f"adapter on disk has {cached.adapter_sha256[:16]}…; refusing it."
                )
            return cached
        checkpoint = self._checkpoint
        if checkpoint is None:
            raise ckpt.CheckpointError("the node is not configured; no base to merge into.")
        if known is None:
            stored = self._stored(version)
            known = (str(stored.path), stored.checksum)
        adapter_dir, checksum = known
        deployed = deploy_adapter(
            checkpoint,
            adapter_dir,
            version,
            expected_sha256=checksum or None,
            forward_kinematics=self._policy.converter.forward_kinematics if self._policy else None,
        )
        with self._lock:
            self._cache[version] = deployed
            while len(self._cache) > MAX_CACHED_VERSIONS:
                oldest = next(v for v in self._cache if v != checkpoint.version)
                del self._cache[oldest]
        return deployed

    def _finish_swap(self, future: Future) -> None:
        try:
            deployed = future.result()
        except Exception as error:  # keep running the current policy, say why
            self._last_error = f"update refused, still running {self.active_version}: {error}"
            self.get_logger().error(self._last_error)
            return
        self._activate_version(deployed)

    def _activate_version(self, deployed: DeployedPolicy) -> None:
        if self._checkpoint is None:
            return
        self._policy = deployed  # atomic reference swap
        self._swaps += 1
        self._last_error = ""
        self.get_logger().info(f"now running {deployed.version} ({self.version_source})")

    def _preload_store(self) -> None:
        """At configure: merge the newest versions the store keeps (rejected ones never
        run), so a rollback to one of them is a reference swap, not a merge."""
        if self._store is None:
            return
        kept = []
        for item in self._store.list():
            reason = self._foreign_reason(item)
            if reason:
                self.get_logger().warning(f"not offered: {reason}")
            elif not item.rejected:
                kept.append(item.version)
        for version in kept[-(MAX_CACHED_VERSIONS - 1) :]:
            try:
                self._load_version(version)
            except Exception as error:  # a broken adapter on disk must not stop the node
                self.get_logger().warning(f"adapter {version} in the store not loadable: {error}")

    def _store_current(self, base: DeployedPolicy) -> DeployedPolicy:
        """What the store says runs (its active.json), or the base if it names none or
        that version cannot be loaded (the base is the safe fallback, and the log says)."""
        try:
            version = self._store.current() if self._store is not None else None
            return base if version is None else self._load_version(version)
        except Exception as error:
            self._last_error = f"the store's current version not loadable, running base: {error}"
            self.get_logger().error(self._last_error)
            return base

    def _stored(self, version: str) -> StoredVersion:
        """``version`` from the store, checked (complete, intact, not rejected, made for
        this robot and base)."""
        if self._store is None:
            raise ckpt.CheckpointError(
                f"version {version!r} was never announced on /learner/policy_update and no "
                "adapter_store is set to find it in."
            )
        stored = self._store.runnable(version)
        reason = self._foreign_reason(stored)
        if reason:
            raise ckpt.CheckpointError(reason)
        return stored

    def _foreign_reason(self, stored: StoredVersion) -> str:
        checkpoint = self._checkpoint
        if checkpoint is None:
            return ""
        return foreign_version_reason(stored, checkpoint.metadata, self.robot)

    @property
    def version_source(self) -> str:
        """What runs and where it came from: the base checkpoint or an adapter's path."""
        policy, checkpoint = self._policy, self._checkpoint
        if policy is None or checkpoint is None:
            return "nothing (not configured)"
        base = f"base {checkpoint.version} from {self._checkpoint_path}"
        if policy.version == checkpoint.version:
            return base
        path = ""
        with self._lock:
            if policy.version in self._adapters:
                path = self._adapters[policy.version][0]
        if not path and self._store is not None:
            path = str(self._store.root / policy.version)
        return f"adapter {policy.version} from {path} on {base}"

    @property
    def active_version(self) -> str:
        policy = self._policy
        return policy.version if policy is not None else ""

    def _on_rollback(self, request: Rollback.Request, response: Rollback.Response):
        current = self.active_version
        response.active_version = current
        response.success = False
        checkpoint, store = self._checkpoint, self._store
        if checkpoint is None:
            response.message = "not configured: configure the node before rolling back."
            return response
        version = request.version or "the version before"
        try:
            if store is None:
                raise ckpt.CheckpointError(
                    "no adapter_store is set; ~/rollback follows the adapter store's history "
                    "(active.json): set adapter_store to the learner's store_root."
                )
            # The base checkpoint is the store's None (no adapter).
            target = (
                None
                if request.version in (checkpoint.version, BASE)
                else store.rollback_target(request.version or None)
            )
            version = target or checkpoint.version
            # Preloaded and swapped-from versions are cached: a reference swap. Anything
            # else is merged here (tens of ms), delaying the next tick once.
            deployed = self._loader.submit(self._load_version, version).result(timeout=30.0)
            store.activate(target, ROLLBACK)
        except Exception as error:  # keep running the current policy, say why
            self._last_error = f"rollback to {version} refused, still running {current}: {error}"
            self.get_logger().error(self._last_error)
            response.message = self._last_error
            return response
        self._activate_version(deployed)
        response.success = True
        response.message = f"rolled back from {current} to {version}"
        response.active_version = version
        return response

    # --- diagnostics -------------------------------------------------------------------

    def statistics(self) -> dict[str, float]:
        samples = list(self._inference_us)
        now = time.monotonic()

        def age(stamp: float) -> float:
            return (now - stamp) * 1000.0 if stamp else float("nan")

        return {
            "ticks": self._ticks,
            "missed_ticks": self._missed,
            "skipped_waiting_for_observations": self._skipped_waiting,
            "skipped_stale_observation": self._skipped_stale,
            "inference_p50_us": stats.percentile(samples, 50),
            "inference_p99_us": stats.percentile(samples, 99),
            "joint_state_age_ms": age(self._joint_time),
            "object_pose_age_ms": age(self._object_time),
            "task_status_age_ms": age(self._goal_time),
            "swaps": self._swaps,
        }

    def _publish_diagnostics(self) -> None:
        state = (
            "active"
            if self._timer is not None
            else ("configured" if self._checkpoint is not None else "unconfigured")
        )
        values = {
            "state": state,
            "version": self.active_version,
            "version_source": self.version_source,
            "adapter_store": str(self._store.root) if self._store is not None else "",
        }
        values.update(
            {
                k: f"{v:.1f}" if isinstance(v, float) else str(v)
                for k, v in self.statistics().items()
            }
        )
        values["last_error"] = self._last_error
        if self._last_error:
            level, message = WARN, self._last_error
        elif state != "active":
            level, message = OK, state
        elif self._skipped_stale or self._missed:
            level = WARN
            message = f"running {self.active_version}; missed {self._missed} tick(s)"
        else:
            level, message = OK, f"running {self.version_source}"
        self._diag_pub.publish(
            diagnostic_array(self, "policy: inference", self.robot.name, level, message, values)
        )


def main(args=None) -> None:
    run_node(PolicyNode, args)


if __name__ == "__main__":
    main()

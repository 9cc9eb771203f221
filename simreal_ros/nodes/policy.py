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
keeps the running policy and says why in the log and on /diagnostics. ~/rollback switches
to any earlier version (the base, adapters seen on updates, adapters in `adapter_store`).

`sequence` of each PolicyAction is the index of its tick on the timer's grid, so a gap
is a missed tick.
"""

from __future__ import annotations

import collections
import json
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
from simreal_ros.msg import PolicyAction, PolicyUpdate, TaskStatus
from simreal_ros.nodes import qos
from simreal_ros.nodes.diagnostics import OK, WARN, diagnostic_array
from simreal_ros.nodes.lifecycle import AutostartLifecycleNode
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
        self._policy: DeployedPolicy | None = None  # swapped atomically between ticks
        self._cache: collections.OrderedDict[str, DeployedPolicy] = collections.OrderedDict()
        self._adapters: dict[str, tuple[str, str]] = {}  # version -> (adapter dir, sha256)
        self._history: list[str] = []  # versions activated, oldest first
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
        directory = self._checkpoint_dir()
        rate = self.config.control_rate_hz or None
        try:
            checkpoint = ckpt.load_numpy_checkpoint(
                directory, description=self.robot, control_rate_hz=rate
            )
            base = deploy_base(checkpoint)
        except (ValueError, OSError) as error:
            self._last_error = f"configure refused: {error}"
            self.get_logger().error(self._last_error)
            return TransitionCallbackReturn.FAILURE
        self._checkpoint = checkpoint
        self._period_ns = round(1e9 / checkpoint.spec.control_rate_hz)
        with self._lock:
            self._cache.clear()
            self._cache[base.version] = base
            self._history = [base.version]
        self._policy = base
        # Before any tick runs: merge the adapters kept on disk, so rollbacks are swaps.
        self._preload_store()
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
            f"configured: {checkpoint.version} from {directory} "
            f"({checkpoint.spec.task}, {checkpoint.spec.control_rate_hz:g} Hz, "
            f"{checkpoint.spec.action_mode} actions)"
        )
        return super().on_configure(state)

    def on_activate(self, state: State) -> TransitionCallbackReturn:
        self._last_sequence = -1
        self._grid_origin_ns = self.get_clock().now().nanoseconds
        self._timer = self.create_timer(self._period_ns / 1e9, self._on_tick)
        self.get_logger().info(
            f"active: publishing /policy/action at {1e9 / self._period_ns:g} Hz"
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
            self._history = []
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
        position = self._joint_order.reorder(msg.name, msg.position)
        if position is None:
            _index, missing = self._joint_order.index(msg.name)
            if missing:
                self.get_logger().error(
                    f"/joint_states lacks joint(s) {missing}; the policy needs all of "
                    f"{list(self.robot.joint_names)}. Ignoring these messages.",
                    throttle_duration_sec=5.0,
                )
            return None
        velocity = self._joint_order.reorder(msg.name, msg.velocity)
        return position, np.zeros(len(position)) if velocity is None else velocity

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
        p, o, g = object_msg.pose.position, object_msg.pose.orientation, status_msg.goal
        observation = {
            "joint_position": joints[0],
            "joint_velocity": joints[1],
            "object_position": np.array([p.x, p.y, p.z]),
            "object_orientation": np.array([o.w, o.x, o.y, o.z]),
            "goal_position": np.array([g.x, g.y, g.z]),
        }
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
        thread for a swap, at configure for the adapters kept on disk."""
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
            known = self._scan_store().get(version)
        if known is None:
            raise ckpt.CheckpointError(
                f"version {version!r} is not kept on disk: known versions are "
                f"{self.known_versions()}."
            )
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
        with self._lock:
            self._history.append(deployed.version)
        self._swaps += 1
        self._last_error = ""
        self.get_logger().info(f"now running {deployed.version}")

    def _preload_store(self) -> None:
        """At configure: merge the newest adapters kept on disk, so a rollback to one of
        them is a reference swap and never a load inside the service callback."""
        for version in list(self._scan_store())[-(MAX_CACHED_VERSIONS - 1) :]:
            try:
                self._load_version(version)
            except Exception as error:  # a broken adapter on disk must not stop the node
                self.get_logger().warning(f"adapter {version} on disk not loadable: {error}")

    def _scan_store(self) -> dict[str, tuple[str, str]]:
        found: dict[str, tuple[str, str]] = {}
        if not self.config.adapter_store:
            return found
        store = Path(self.config.adapter_store).expanduser()
        if not store.is_dir():
            return found
        for directory in sorted(store.iterdir()):
            # Skip the learner's half-written staging directories and rejected candidates:
            # neither is a version that ever ran.
            if directory.name.startswith(".") or _rejected(directory):
                continue
            if (directory / ckpt.ADAPTER_CONFIG).is_file():
                try:
                    meta = ckpt.read_adapter_metadata(directory)
                except ValueError:
                    continue
                found[str(meta.get("version") or directory.name)] = (str(directory), "")
        return found

    def known_versions(self) -> list[str]:
        with self._lock:
            versions = list(dict.fromkeys([*self._cache, *self._adapters]))
        return list(dict.fromkeys([*versions, *self._scan_store()]))

    @property
    def active_version(self) -> str:
        policy = self._policy
        return policy.version if policy is not None else ""

    def _on_rollback(self, request: Rollback.Request, response: Rollback.Response):
        current = self.active_version
        response.active_version = current
        if self._checkpoint is None:
            response.success = False
            response.message = "not configured: configure the node before rolling back."
            return response
        version = request.version
        if not version:
            with self._lock:
                earlier = [v for v in reversed(self._history) if v != current]
            if not earlier:
                response.success = False
                response.message = f"{current} is the only version run so far."
                return response
            version = earlier[0]
        try:
            # Preloaded and swapped-from versions are cached: a reference swap. Anything
            # else is merged here (tens of ms), delaying the next tick once.
            deployed = self._loader.submit(self._load_version, version).result(timeout=30.0)
        except Exception as error:
            response.success = False
            response.message = f"rollback to {version!r} refused, still running {current}: {error}"
            self.get_logger().error(response.message)
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
        values = {"state": state, "version": self.active_version}
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
            level, message = OK, f"running {self.active_version}"
        self._diag_pub.publish(
            diagnostic_array(self, "policy: inference", self.robot.name, level, message, values)
        )


def _rejected(directory: Path) -> bool:
    screening = directory / "screening.json"
    if not screening.is_file():
        return False
    try:
        return json.loads(screening.read_text()).get("promoted") is False
    except (OSError, ValueError):
        return True  # unreadable decision: not a version to run


def main(args=None) -> None:
    run_node(PolicyNode, args)


if __name__ == "__main__":
    main()

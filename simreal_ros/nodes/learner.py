"""learner node: recorded episodes in, screened LoRA adapters out.

Subscribes /episodes/recorded (EpisodeEvent). Rounds run on the core ``OnlineLearner``'s
worker thread, never on the executor: after every ``round_every_episodes`` real episodes
(or ``round_every_seconds``) it fine-tunes (bc, rl or sgft), screens the candidate in sim
over seeds, stores it atomically, and publishes the decision on /learner/policy_update
(latched; rejected candidates too, with promoted=false and the reason). ~/train_now
(std_srvs/Trigger) starts a round at once; its message names the request's number. Each
request is answered with a decision, or, without enough arm data, by ``waiting`` on
/diagnostics (with ``requests_answered``) saying which labels the episodes carry.
/diagnostics: round, loss, samples/s, buffer sizes by source, last gate result.
"""

from __future__ import annotations

import logging
import math

from diagnostic_msgs.msg import DiagnosticArray
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from std_srvs.srv import Trigger

from simreal_ros.adapters.store import StoredVersion
from simreal_ros.learner.config import LearnerConfig
from simreal_ros.learner.gate import GateDecision
from simreal_ros.learner.online import EpisodeInfo, OnlineLearner
from simreal_ros.learner.session import RoundResult
from simreal_ros.msg import EpisodeEvent, PolicyUpdate, ScreenResult
from simreal_ros.nodes import qos
from simreal_ros.nodes.diagnostics import ERROR, LEARNER_STATUS, OK, WARN, diagnostic_array
from simreal_ros.nodes.params import declare_config, declare_robot
from simreal_ros.nodes.runtime import run_node

# How long a stopping node waits for the learner's worker to finish what it is doing.
STOP_WAIT_S = 1.0


class _RosLogHandler(logging.Handler):
    """Core learner logs (per-episode r / V_sim / r~, round summaries) to the node's log."""

    def __init__(self, node: Node) -> None:
        super().__init__(logging.INFO)
        self._logger = node.get_logger()

    def emit(self, record: logging.LogRecord) -> None:
        text = self.format(record)
        if record.levelno >= logging.ERROR:
            self._logger.error(text)
        elif record.levelno >= logging.WARNING:
            self._logger.warning(text)
        else:
            self._logger.info(text)


def update_message(stored: StoredVersion, decision: GateDecision, method: str) -> PolicyUpdate:
    msg = PolicyUpdate()
    msg.version = stored.version
    msg.parent_version = stored.parent_version or ""
    msg.adapter_path = str(stored.path)
    msg.checksum = stored.checksum
    msg.promoted = bool(decision.promoted)
    msg.reason = decision.reason
    msg.method = method
    for result in decision.results:
        item = ScreenResult()
        item.condition = result.condition
        item.profile = result.profile
        item.episodes = int(result.episodes)
        item.successes = int(result.successes)
        item.success_rate = float(result.success_rate)
        item.ci_low = float(result.ci_low)
        item.ci_high = float(result.ci_high)
        item.mean_return = float(result.mean_return)
        item.baseline_success_rate = float(result.baseline_success_rate)
        msg.screening.append(item)
    return msg


class LearnerNode(Node):
    def __init__(self, **kwargs) -> None:
        super().__init__("learner", **kwargs)
        # Created once the parameters are declared; their apply callback runs before that.
        self.learner: OnlineLearner | None = None
        self.robot = declare_robot(self)
        self._store_template = ""
        self.config: LearnerConfig = declare_config(self, LearnerConfig, apply=self._apply_config)
        self._store_template = self.config.store_root
        self.config = self._scoped(self.config)
        self._update_pub = self.create_publisher(
            PolicyUpdate, "/learner/policy_update", qos.LATCHED
        )
        self._diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", qos.STATUS)
        self.create_subscription(EpisodeEvent, "/episodes/recorded", self._on_episode, qos.STATUS)
        self.create_service(Trigger, "~/train_now", self._on_train_now)
        # On the wall clock: in sim the loop pauses /clock while a round trains, and the
        # learner's answers must still reach it.
        self.create_timer(
            1.0, self._publish_diagnostics, clock=Clock(clock_type=ClockType.STEADY_TIME)
        )
        self._log_handler = _RosLogHandler(self)
        core_log = logging.getLogger("simreal_ros.learner")
        core_log.setLevel(logging.INFO)
        core_log.addHandler(self._log_handler)
        self.learner = OnlineLearner(
            self.config,
            on_result=self._on_result,
            session_factory=self._checked_session,
            robot=self.robot,
        )
        self.learner.start()
        self._announce_running_version()
        self.get_logger().info(
            f"learner ready: method {self.config.method}, horizon {self.config.horizon or 'inf'}, "
            f"store {self.config.store_root}"
        )

    def _checkpoint_dir(self) -> str:
        from simreal_ros.policy.checkpoint import shipped_checkpoint

        return self.config.checkpoint_dir or str(shipped_checkpoint(self.config.task))

    def _scoped(self, config: LearnerConfig) -> LearnerConfig:
        """``config`` with its store root's {robot}/{base} filled in: this arm's and base's
        own store, the one the policy node reads too."""
        import dataclasses

        from simreal_ros.adapters.store import scoped_store_root
        from simreal_ros.policy.checkpoint import read_metadata

        template = self._store_template or config.store_root
        if "{" not in template:
            return config
        try:
            base = read_metadata(self._checkpoint_dir())
            root = scoped_store_root(template, self.robot.name, base)
        except (OSError, ValueError) as error:  # the session's start says it again
            self.get_logger().error(f"no adapter store for this base: {error}")
            return config
        return dataclasses.replace(config, store_root=str(root))

    def _checked_session(self):
        """The learner's session, after refusing a running version that belongs to another
        robot or base (it would fail deep in torch with a size mismatch)."""
        from simreal_ros.adapters.store import AdapterStore, StoreError, foreign_version_reason
        from simreal_ros.policy.checkpoint import read_metadata

        store = AdapterStore(self.config.store_root)
        current = store.current()
        if current:
            stored = store.load(current, verify=False)
            reason = foreign_version_reason(
                stored, read_metadata(self._checkpoint_dir()), self.robot
            )
            if reason:
                raise StoreError(f"refusing the store's running version: {reason}")
        return self.learner._default_session()

    def _announce_running_version(self) -> None:
        """After a restart, latch the version the store says runs, so late joiners get it."""
        from simreal_ros.adapters.store import AdapterStore, StoreError

        store = AdapterStore(self.config.store_root)
        version = store.current()
        if not version:
            return
        try:
            stored = store.load(version)
        except StoreError as error:
            self.get_logger().error(f"the store's running version is unusable: {error}")
            return
        try:
            from simreal_ros.adapters.store import foreign_version_reason
            from simreal_ros.policy.checkpoint import read_metadata

            reason = foreign_version_reason(
                stored, read_metadata(self._checkpoint_dir()), self.robot
            )
        except (OSError, ValueError) as error:
            reason = str(error)
        if reason:  # never announce a version the policy must refuse
            self.get_logger().error(f"not announcing the store's running version: {reason}")
            return
        decision = GateDecision.from_dict(stored.screening)
        msg = update_message(stored, decision, str(stored.metadata.get("method", "")))
        msg.reason = f"running version at learner start-up ({decision.reason})"
        self._publish(msg)

    def _apply_config(self, config: LearnerConfig) -> None:
        """A run-time change of a dynamic setting: it applies from the next round."""
        config = self._scoped(config)
        self.config = config
        if self.learner is not None:
            self.learner.update_config(config)

    def _on_episode(self, msg: EpisodeEvent) -> None:
        if not msg.bag_path:
            self.get_logger().warning(f"episode {msg.episode_id!r} has no bag_path; ignored.")
            return
        self.learner.offer(
            EpisodeInfo(msg.episode_id, msg.bag_path, msg.source, msg.success, msg.outcome)
        )

    def _on_train_now(self, request, response):
        status = self.learner.status()
        if status.state == "failed":
            response.success = False
            response.message = status.last_error
            return response
        request = self.learner.request_round()
        response.success = True
        # "request N": the number /diagnostics' requests_answered reaches once it is answered.
        response.message = (
            f"round requested: request {request} ({status.episodes_pending} episode(s) "
            f"pending; buffers {status.buffer_sizes})"
        )
        return response

    def _on_result(self, result: RoundResult) -> None:
        """Worker thread: publish every decision (promoted or not)."""
        msg = update_message(result.stored, result.decision, result.candidate.method)
        self._publish(msg)
        level = "promoted" if msg.promoted else "rejected"
        self.get_logger().info(f"candidate {msg.version} {level}: {msg.reason}")

    def _publish(self, msg: PolicyUpdate) -> None:
        msg.header.stamp = self.get_clock().now().to_msg()
        self._update_pub.publish(msg)

    def _publish_diagnostics(self) -> None:
        status = self.learner.status()
        values = {
            "state": status.state,
            "round": str(status.round),
            "loss": _fmt(status.loss),
            "samples_per_s": _fmt(status.samples_per_s),
            "episodes_seen": str(status.episodes_seen),
            "episodes_pending": str(status.episodes_pending),
            "running_version": status.running_version,
            "last_gate": status.last_gate,
            "last_gate_reason": status.last_gate_reason,
            "last_error": status.last_error,
            "waiting": status.waiting,
            "requests": str(status.requests),
            "requests_answered": str(status.requests_answered),
            "skipped_episodes": str(status.skipped_episodes),
            "method": self.config.method,
            "sim_replay": str(self.config.sim_replay),
            "ewc": str(self.config.ewc),
        }
        for source, count in sorted(status.buffer_sizes.items()):
            values[f"buffer_{source}"] = str(count)
        values["critic_warning"] = status.critic_warning
        if status.state == "failed" or status.last_error:
            level, message = ERROR, status.last_error
        elif status.critic_warning:
            level, message = WARN, status.critic_warning
        else:
            level, message = OK, f"{status.state}; running {status.running_version}"
        self._diag_pub.publish(
            diagnostic_array(self, LEARNER_STATUS, "learner", level, message, values)
        )

    def destroy_node(self) -> None:
        # A round (or the session's start) in progress is abandoned, not waited for: it can
        # take minutes, and `simreal up` sends SIGTERM to a node not gone in its stop grace
        # (graph.runner.STOP_GRACE_S). Its episodes are not lost (the bags are the data
        # plane); nothing half-written is kept (the store writes versions atomically).
        state = self.learner.state
        self.learner.stop(timeout=STOP_WAIT_S)
        if state not in ("idle", "failed"):
            self.get_logger().info(
                f"stopped while {state}: that work is abandoned (recorded episodes stay in "
                "their bags)"
            )
        logging.getLogger("simreal_ros.learner").removeHandler(self._log_handler)
        super().destroy_node()


def _fmt(value: float) -> str:
    return "nan" if value is None or not math.isfinite(value) else f"{value:.4g}"


def main(args=None) -> None:
    run_node(LearnerNode, args)


if __name__ == "__main__":
    main()

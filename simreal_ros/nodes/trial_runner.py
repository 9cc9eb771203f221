"""trial_runner node: drives labelled episodes through the running graph.

Implements ``simreal_ros.trials.runner.TrialGraph`` over ROS: the sim bridge's reset
service (or an operator prompt on the real profile), the recorder's start/stop services,
/task/status for the end of an episode and /operator/takeover for human interventions.
``~/label`` (StopEpisode) lets an operator end and label the running episode. The trial
loop itself (``run_trials``) is core code; ``main`` runs it with this node's parameters.
"""

from __future__ import annotations

import select
import sys
import threading
import time

import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from std_srvs.srv import SetBool, Trigger

from simreal_ros.episodes.metadata import new_episode_id, normalize_failure_mode
from simreal_ros.msg import PolicyAction, TaskStatus
from simreal_ros.nodes import qos
from simreal_ros.nodes.diagnostics import OK, diagnostic_array
from simreal_ros.nodes.params import declare_config
from simreal_ros.nodes.services import call_service
from simreal_ros.srv import GetDynamics, ResetEpisode, Resync, StartEpisode, StopEpisode
from simreal_ros.trials.config import TrialRunnerConfig
from simreal_ros.trials.runner import (
    EpisodeResult,
    KeyboardOperator,
    Label,
    TaskEnd,
    label_from_task,
    run_trials,
    summarize,
)

# On the real profile the safety filter holds the arm until engaged: an episode's start is
# the operator's request to move.
SAFETY_ENGAGE_SERVICE = "/safety/engage"
# A request not answered within this long is sent again: longer than the recorder's start
# takes (it waits up to its match_timeout_s, 2 s, for publishers).
RESEND_AFTER_S = 3.0


class TrialRunnerNode(Node):
    def __init__(self, operator: KeyboardOperator | None = None, **kwargs) -> None:
        super().__init__("trial_runner", **kwargs)
        # The dynamic settings (episodes, condition, seed, ...) are read at each run.
        self.config: TrialRunnerConfig = declare_config(
            self, TrialRunnerConfig, apply=lambda config: setattr(self, "config", config)
        )
        group = ReentrantCallbackGroup()
        cfg = self.config
        self._reset = self.create_client(ResetEpisode, cfg.reset_service, callback_group=group)
        self._dynamics = self.create_client(
            GetDynamics, cfg.dynamics_service, callback_group=group
        )
        self._pause = self.create_client(SetBool, cfg.pause_service, callback_group=group)
        self._resync = (
            self.create_client(Resync, cfg.resync_service, callback_group=group)
            if cfg.resync_service
            else None
        )
        self._start = self.create_client(StartEpisode, cfg.start_service, callback_group=group)
        self._stop = self.create_client(StopEpisode, cfg.stop_service, callback_group=group)
        self._engage = (
            self.create_client(Trigger, SAFETY_ENGAGE_SERVICE, callback_group=group)
            if cfg.profile == "real"
            else None
        )
        self.create_subscription(
            TaskStatus, cfg.task_status_topic, self._on_status, qos.STATUS, callback_group=group
        )
        # Best-effort matches both reliable and best-effort takeover publishers.
        self.create_subscription(
            PolicyAction, cfg.takeover_topic, self._on_takeover, qos.SENSOR_DATA
        )
        self.create_service(StopEpisode, "~/label", self._on_label, callback_group=group)
        self._diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", qos.STATUS)
        self.create_timer(1.0, self._on_diagnostics)
        self.operator = operator
        if operator is None and cfg.profile == "real" and cfg.keyboard:
            self.operator = KeyboardOperator()
        self._cond = threading.Condition()
        self._episode_id = ""
        self._end = TaskEnd()
        self._last_step = -1
        self._takeovers = 0
        self._recording = False
        self._source, self._dyn_profile = cfg.source, ""
        self._dynamics_available = True
        self._pause_available = cfg.profile == "sim"
        self._services_seen: set[str] = set()
        self._paused = False
        self.results: list[EpisodeResult] = []

    # ---- ROS plumbing ---------------------------------------------------------------------

    def _call(
        self, client, request, what: str, timeout: float | None = None, idempotent: bool = True
    ):
        # Every request but the recorder's stop may be sent twice (services.call_service).
        resend = RESEND_AFTER_S if idempotent else None
        return call_service(
            client, request, timeout or self.config.service_timeout_s, what, resend
        )

    def _call_optional(self, client, request, what: str):
        """Call a service the graph may lack; TimeoutError when it is not there.

        Until a service has answered once, the wait is the whole ``service_timeout_s``: a
        process that joins a running graph takes seconds to discover it, and a short wait
        would wrongly conclude the service is missing for the rest of the run.
        """
        timeout = None if client.srv_name not in self._services_seen else 2.0
        answer = self._call(client, request, what, timeout)
        self._services_seen.add(client.srv_name)
        return answer

    def _on_status(self, msg: TaskStatus) -> None:
        with self._cond:
            if not self._episode_id or (msg.episode_id and msg.episode_id != self._episode_id):
                return
            end = self._end
            if end.done or end.truncated:
                return  # the episode is over: a later status must not change its result
            if msg.step != self._last_step:  # count each control step's reward once
                self._last_step = msg.step
                end.total_reward += msg.reward
            end.steps = max(end.steps, int(msg.step))
            # The episode is over on a true termination (done) or on its time limit.
            if msg.done or msg.truncated:
                end.done, end.success, end.truncated = msg.done, bool(msg.success), msg.truncated
                self._cond.notify_all()

    def _on_takeover(self, msg: PolicyAction) -> None:
        with self._cond:
            if self._episode_id and msg.human_intervention:
                self._takeovers += 1

    def _on_label(self, request, response):
        outcome = request.outcome or ("success" if request.success else "failure")
        with self._cond:
            if not self._recording:
                response.success, response.message = False, "no episode is running."
                return response
            if outcome not in ("success", "failure", "aborted"):
                response.success = False
                response.message = f"outcome {outcome!r} must be success, failure or aborted."
                return response
            self._end.label = Label(
                outcome,
                outcome == "success",
                normalize_failure_mode(request.failure_mode),
                request.note,
            )
            self._cond.notify_all()
        response.success = True
        response.message = f"episode {self._episode_id} labelled {outcome}; it ends now."
        return response

    # ---- TrialGraph -----------------------------------------------------------------------

    def _source_labels(self) -> tuple[str, str, object]:
        """(source label, dynamics profile, the sim clock now or None)."""
        if self.config.profile == "real":
            return self.config.source or "real", "", None
        profile, stand_in, sim_time = "", False, None
        if self._dynamics_available:
            try:
                answer = self._call_optional(self._dynamics, GetDynamics.Request(), "get_dynamics")
                profile, stand_in, sim_time = answer.profile, answer.stand_in, answer.sim_time
            except TimeoutError:
                self._dynamics_available = False
                self.get_logger().warning(
                    f"{self.config.dynamics_service} not available: episodes are labelled "
                    f"{self.config.source or 'sim'!r} (set the source parameter to "
                    "'real_twin' if the bridge plays a stand-in)"
                )
        # The bridge says whether its profile plays the arm: a profile given by path has a
        # name no lookup here can resolve. A stand-in is simulated, never the physical arm.
        source = self.config.source or ("real_twin" if stand_in else "sim")
        return source, profile, sim_time

    def _set_paused(self, paused: bool) -> None:
        if not self._pause_available:
            return
        try:
            answer = self._call_optional(self._pause, SetBool.Request(data=paused), "pause")
        except TimeoutError:
            self._pause_available = False  # a bridge without pause: record from the reset on
            self.get_logger().warning(
                f"{self.config.pause_service} not available: episodes start running before "
                "recording starts (a few ms of each episode may be missing from its bag)"
            )
            return
        self._paused = paused and answer.success

    def _resync_safety(self, reset_stamp) -> None:
        """The sim arm jumped to a new start pose: the safety filter starts from it, and
        refuses what was measured or computed at or before the reset's stamp."""
        if self._resync is None:
            return
        try:
            answer = self._call_optional(self._resync, Resync.Request(after=reset_stamp), "resync")
        except TimeoutError:
            self._resync = None  # a graph without the safety node (or an older one)
            self.get_logger().warning(
                f"{self.config.resync_service} not available: the safety filter (if any) "
                "starts each episode from the previous episode's last command"
            )
            return
        if not answer.success:
            self.get_logger().warning(answer.message)

    def reset(self, seed: int, condition: str, episode_id: str) -> str:
        # Our own id, set before the reset, so the first /task/status of the episode counts.
        episode_id = episode_id or new_episode_id(self.config.profile)
        with self._cond:
            self._episode_id, self._end, self._last_step = episode_id, TaskEnd(), -1
            self._takeovers = 0
        if self.config.profile == "real":
            self._source, self._dyn_profile, _ = self._source_labels()
            if self.operator is not None:
                self.operator.confirm_reset(len(self.results), seed, condition)
            return episode_id
        self._set_paused(True)
        self._source, self._dyn_profile, frozen = self._source_labels()
        # Paused, the sim clock stands still at the time the reset will be stamped with.
        # Resyncing the safety filter at it before the reset means nothing it computes
        # from the old episode goes out after the reset (nor into the new episode's bag).
        resync_first = self._paused and frozen is not None
        if resync_first:
            self._resync_safety(frozen)
        request = ResetEpisode.Request(seed=seed, condition=condition, episode_id=episode_id)
        answer = self._call(self._reset, request, "reset")
        if not answer.success:
            self._set_paused(False)
            raise RuntimeError(f"sim bridge refused the reset: {answer.message}")
        stamp = answer.stamp
        if not resync_first or (stamp.sec, stamp.nanosec) != (frozen.sec, frozen.nanosec):
            self._resync_safety(stamp)  # no pause (or the clock moved): resync after it
        if answer.episode_id and answer.episode_id != episode_id:
            with self._cond:
                self._episode_id = answer.episode_id
        return answer.episode_id or episode_id

    @property
    def recording(self) -> bool:
        """Whether an episode is being recorded now (also on /diagnostics)."""
        return self._recording

    def start_recording(self, episode_id: str, condition: str, seed: int) -> str:
        request = StartEpisode.Request(
            episode_id=episode_id,
            condition=condition,
            source=self._source,
            profile=self._dyn_profile,
            task=self.config.task,
            seed=seed,
        )
        try:
            answer = self._call(self._start, request, "recorder start")
        finally:
            if self._paused:
                self._set_paused(False)
        if not answer.success:
            raise RuntimeError(f"recorder refused to start: {answer.message}")
        self._recording = True
        self._engage_safety()
        return answer.bag_path

    def _engage_safety(self) -> None:
        """Real profile: the recorded episode starts, so the arm may move (safety ~/engage)."""
        if self._engage is None:
            return
        try:
            answer = self._call_optional(self._engage, Trigger.Request(), "safety engage")
        except TimeoutError:
            self._engage = None
            self.get_logger().warning(
                f"{SAFETY_ENGAGE_SERVICE} not available: engage the safety filter by hand "
                "(it holds the arm until engaged)"
            )
            return
        # rclpy refuses two severities from one call site: two calls.
        if answer.success:
            self.get_logger().info(f"safety: {answer.message}")
        else:
            self.get_logger().warning(f"safety: {answer.message}")

    def wait_for_end(self, episode_id: str, timeout_s: float) -> TaskEnd:
        deadline = time.monotonic() + timeout_s
        keyboard = self.config.profile == "real" and self.operator is not None
        if keyboard:
            print(
                "Running. Press Enter to end the episode (it also ends on /task/status done, "
                "~/label or the timeout).",
                file=sys.stderr,
                flush=True,
            )
        with self._cond:
            while True:
                end = self._end
                if end.done or end.truncated or end.label is not None:
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    end.timed_out = True
                    break
                self._cond.wait(min(remaining, 0.1))
                if keyboard and _enter_pressed():
                    break
        return end

    def label(self, end: TaskEnd) -> Label:
        if end.label is not None:
            return end.label
        if self.config.profile == "real" and self.operator is not None:
            return self.operator.ask_label(end)
        return label_from_task(end, self.config.timeout_s)

    def stop_recording(self, label: Label) -> dict:
        request = StopEpisode.Request(
            outcome=label.outcome,
            success=label.success,
            failure_mode=label.failure_mode,
            note=label.note,
        )
        answer = self._call(self._stop, request, "recorder stop", idempotent=False)
        self._recording = False
        if not answer.success:
            raise RuntimeError(f"recorder refused to stop: {answer.message}")
        e = answer.episode
        return {
            "episode_id": e.episode_id,
            "bag_path": e.bag_path,
            "messages": e.messages,
            "dropped": e.dropped,
            "policy_versions": list(e.policy_versions),
            "steps": e.steps,
        }

    def human_interventions(self) -> int:
        with self._cond:
            return self._takeovers

    # ---- running --------------------------------------------------------------------------

    def run(self, progress: bool = True) -> list[EpisodeResult]:
        """Run the configured episodes (seeds seed .. seed + episodes - 1)."""
        cfg = self.config
        seeds = [cfg.seed + k for k in range(cfg.episodes)]
        return self.run_trials(cfg.episodes, cfg.condition, seeds, cfg.timeout_s, progress)

    def run_trials(
        self,
        episodes: int,
        condition: str,
        seeds: list[int] | None = None,
        timeout_s: float | None = None,
        progress: bool = True,
    ) -> list[EpisodeResult]:
        """``run_trials`` through this node (the executor must be spinning elsewhere, e.g.
        ``SpinningNode``); a Ctrl-C stops the running recording as aborted."""
        timeout_s = self.config.timeout_s if timeout_s is None else timeout_s
        try:
            results = run_trials(self, episodes, condition, seeds, timeout_s, self.label, progress)
        except KeyboardInterrupt:
            if self._recording:
                self.stop_recording(Label("aborted", False, "", "trial runner interrupted"))
            raise
        self.results.extend(results)
        return results

    def _on_diagnostics(self) -> None:
        successes = sum(r.success for r in self.results)
        values = {
            "profile": self.config.profile,
            "condition": self.config.condition,
            "episodes_done": len(self.results),
            "successes": successes,
            "recording": str(self._recording).lower(),
        }
        message = f"episode {self._episode_id}" if self._recording else "idle"
        self._diag_pub.publish(
            diagnostic_array(self, "trial_runner: trials", "trial_runner", OK, message, values)
        )


def _enter_pressed() -> bool:
    try:
        ready, _, _ = select.select([sys.stdin], [], [], 0)
    except (OSError, ValueError):
        return False
    if ready:
        sys.stdin.readline()
        return True
    return False


class SpinningNode:
    """A node spun in a background thread, so the caller's thread may block on it.

    One executor thread, never rclpy's MultiThreadedExecutor: that one's wait thread wakes
    with nothing ready (its workers took what woke it) and rebuilds the wait set in Python
    each time. The busy loop holds the GIL and delays every callback in the process, and
    the node's callbacks never block, so one thread serves them all.
    """

    def __init__(self, node: Node) -> None:
        self.node = node
        self.executor = SingleThreadedExecutor(context=node.context)
        self.executor.add_node(node)
        self._thread = threading.Thread(target=self.executor.spin, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.executor.shutdown()
        self._thread.join(timeout=5.0)
        self.node.destroy_node()


def run_with_overrides(overrides: dict) -> list[EpisodeResult]:
    """Run the configured trials in this process (`simreal trials`), then shut down."""
    from rclpy.parameter import Parameter

    rclpy.init()
    spinning = None
    try:
        node = TrialRunnerNode(
            parameter_overrides=[Parameter(k, value=v) for k, v in overrides.items()]
        )
        spinning = SpinningNode(node)
        return node.run(progress=True)
    finally:
        if spinning is not None:
            spinning.close()
        rclpy.try_shutdown()


def main(args=None) -> int:
    rclpy.init(args=args)
    spinning = None
    try:
        node = TrialRunnerNode()
        spinning = SpinningNode(node)
        results = node.run()
        print(summarize(results), flush=True)
        return 1 if any(r.error for r in results) else 0
    except KeyboardInterrupt:
        return 130
    except (ValueError, TimeoutError) as error:
        print(f"trial_runner: {error}", file=sys.stderr, flush=True)
        return 2
    finally:
        if spinning is not None:
            spinning.close()
        rclpy.try_shutdown()


if __name__ == "__main__":
    sys.exit(main())

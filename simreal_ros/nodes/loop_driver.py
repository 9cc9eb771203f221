"""The fine-tuning loop's side of the graph: asks the learner for rounds and watches results.

Not a long-running node of the graph: `simreal loop` creates it in-process next to the
trial runner. It calls /learner/train_now, collects /learner/policy_update decisions
(latched), follows the policy version on /policy/action, switches the policy node's
version through /policy/rollback (the arm's paired comparison), and counts safety
interventions.
"""

from __future__ import annotations

import re
import threading
import time

from diagnostic_msgs.msg import DiagnosticArray
from lifecycle_msgs.msg import Transition
from lifecycle_msgs.srv import ChangeState
from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
from rcl_interfaces.srv import SetParameters
from rclpy.node import Node
from std_srvs.srv import SetBool, Trigger

from simreal_ros.loop.state import LearnerDecision
from simreal_ros.loop.stops import NoArmData
from simreal_ros.msg import EpisodeEvent, PolicyAction, PolicyUpdate, SafetyStatus
from simreal_ros.nodes import qos
from simreal_ros.nodes.diagnostics import LEARNER_STATUS
from simreal_ros.nodes.episode_event import episode_event
from simreal_ros.nodes.services import call_service
from simreal_ros.srv import Rollback


def decision_from_message(msg: PolicyUpdate) -> LearnerDecision:
    return LearnerDecision(
        version=msg.version,
        promoted=bool(msg.promoted),
        method=msg.method,
        reason=msg.reason,
        parent_version=msg.parent_version,
        adapter_path=msg.adapter_path,
        checksum=msg.checksum,
        screening=tuple(
            {
                "condition": item.condition,
                "profile": item.profile,
                "episodes": int(item.episodes),
                "successes": int(item.successes),
                "success_rate": float(item.success_rate),
                "ci_low": float(item.ci_low),
                "ci_high": float(item.ci_high),
                "mean_return": float(item.mean_return),
                "baseline_success_rate": float(item.baseline_success_rate),
            }
            for item in msg.screening
        ),
    )


class LoopDriverNode(Node):
    def __init__(self, **kwargs) -> None:
        super().__init__("loop_driver", **kwargs)
        self._lock = threading.Lock()
        self._updates: list[LearnerDecision] = []
        self._policy_version = ""
        self._actions = 0
        self._interventions = 0
        self._learner_status: dict[str, str] = {}  # the learner's newest /diagnostics values
        self._train_now = self.create_client(Trigger, "/learner/train_now")
        self._policy_state = self.create_client(ChangeState, "/policy/change_state")
        self._sim_pause = self.create_client(SetBool, "/sim_bridge/pause")
        self._policy_parameters = self.create_client(SetParameters, "/policy/set_parameters")
        self._policy_rollback = self.create_client(Rollback, "/policy/rollback")
        self.create_subscription(
            PolicyUpdate, "/learner/policy_update", self._on_update, qos.LATCHED
        )
        self.create_subscription(PolicyAction, "/policy/action", self._on_action, qos.STATUS)
        self.create_subscription(SafetyStatus, "/safety/status", self._on_safety, qos.STATUS)
        self.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, qos.STATUS)
        self._episodes_pub = self.create_publisher(EpisodeEvent, "/episodes/recorded", qos.STATUS)

    def _on_update(self, msg: PolicyUpdate) -> None:
        with self._lock:
            self._updates.append(decision_from_message(msg))

    def _on_action(self, msg: PolicyAction) -> None:
        with self._lock:
            self._policy_version = msg.policy_version
            self._actions += 1

    def _on_safety(self, msg: SafetyStatus) -> None:
        with self._lock:
            self._interventions = max(self._interventions, int(msg.interventions_total))

    def _on_diagnostics(self, msg: DiagnosticArray) -> None:
        for status in msg.status:
            if status.name == LEARNER_STATUS:
                with self._lock:
                    self._learner_status = {kv.key: kv.value for kv in status.values}

    def _no_arm_data(self, request: int | None) -> str:
        """The learner's reason when it answered ``request`` by waiting for arm data."""
        if request is None:
            return ""
        with self._lock:
            status = dict(self._learner_status)
        try:
            answered = int(status.get("requests_answered", "0"))
        except ValueError:
            return ""
        return status.get("waiting", "") if answered >= request else ""

    @property
    def policy_version(self) -> str:
        with self._lock:
            return self._policy_version

    @property
    def safety_interventions(self) -> int:
        with self._lock:
            return self._interventions

    def updates_seen(self) -> int:
        with self._lock:
            return len(self._updates)

    def _sleep(self, seconds: float) -> None:
        if not self.context.ok():
            raise RuntimeError("the ROS context was shut down while the loop was waiting.")
        time.sleep(seconds)

    def wait_until_ready(self, timeout_s: float) -> None:
        """Block until the policy is acting and the learner answers; say what is missing."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                acting = self._actions > 0
            if acting and self._train_now.service_is_ready():
                return
            self._sleep(0.1)
        missing = []
        if not self._actions:
            missing.append("no /policy/action from the policy node")
        if not self._train_now.service_is_ready():
            missing.append("no /learner/train_now service")
        raise TimeoutError(
            f"the graph did not come up within {timeout_s:.0f} s: {'; '.join(missing)}. "
            "See graph.log in the run directory."
        )

    def announce_recorded(self, data_dir: str, timeout_s: float = 10.0) -> int:
        """Re-announce the closed bags of ``data_dir`` (resume: the restarted learner
        starts with an empty buffer; the bags are the data plane). Returns the count."""
        from simreal_ros.episodes.catalog import list_episodes

        deadline = time.monotonic() + timeout_s
        while self._episodes_pub.get_subscription_count() < 1:
            if time.monotonic() > deadline:
                raise TimeoutError("no learner subscribes to /episodes/recorded.")
            self._sleep(0.05)
        count = 0
        for entry in list_episodes(data_dir):
            meta = entry.metadata
            if entry.state != "closed" or meta is None:
                continue
            msg = episode_event(meta, entry.bag_dir, self.get_clock().now().to_msg())
            msg.note = "re-announced by simreal loop on resume"
            self._episodes_pub.publish(msg)
            count += 1
        return count

    def train_round(self, timeout_s: float, exclude: set[str] | frozenset = frozenset()):
        """Ask the learner for a round; return its decision (promoted or rejected).

        The decision is the first update with a version never seen before (nor in
        ``exclude``): a restarted learner's latched start-up announcement of the running
        version is not a round's decision, whenever it arrives."""
        with self._lock:
            known = set(exclude) | {u.version for u in self._updates}
            seen = len(self._updates)
            self._learner_status = {}  # a restarted learner counts its requests anew
        future = self._train_now.call_async(Trigger.Request())
        deadline = time.monotonic() + timeout_s
        while not future.done() and time.monotonic() < deadline:
            self._sleep(0.05)
        if not future.done():
            raise TimeoutError(
                f"the learner did not answer /learner/train_now within {timeout_s:.0f} s."
            )
        answer = future.result()
        if not answer.success:
            raise RuntimeError(f"the learner refused a round: {answer.message}")
        match = re.search(r"\brequest (\d+)\b", answer.message)
        request = int(match.group(1)) if match else None  # an older learner: no number
        while time.monotonic() < deadline:
            with self._lock:
                fresh = [u for u in self._updates[seen:] if u.version not in known]
            if fresh:
                return fresh[0]
            reason = self._no_arm_data(request)
            if reason:
                raise NoArmData(reason)
            self._sleep(0.2)
        raise TimeoutError(
            f"the learner gave no decision within {timeout_s:.0f} s (round_timeout_s); "
            "see the learner's lines in graph.log in the run directory."
        )

    def switch_policy(self, version: str, timeout_s: float = 30.0) -> None:
        """Make the policy node run ``version`` (its ~/rollback takes any version it knows)
        and wait until its actions carry it; raises with the node's answer if refused."""
        request = Rollback.Request(version=version)
        answer = call_service(self._policy_rollback, request, timeout_s, "policy rollback")
        if not answer.success:
            raise RuntimeError(f"the policy node refused to run {version}: {answer.message}")
        if not self.wait_for_policy_version(version, timeout_s):
            raise TimeoutError(f"the policy's actions did not switch to {version} in time.")

    def learner_subscribed(self) -> int:
        """Subscribers of /episodes/recorded: the learner, when it is up."""
        return self._episodes_pub.get_subscription_count()

    def wait_for_learner(self, timeout_s: float) -> None:
        """After a learner restart: until it subscribes and its ~/train_now answers."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.learner_subscribed() and self._train_now.service_is_ready():
                return
            self._sleep(0.1)
        raise TimeoutError(f"the restarted learner did not come up within {timeout_s:.0f} s.")

    def pause_sim(self, paused: bool, timeout_s: float = 5.0) -> bool:
        """Pause or resume the stand-in's physics (the sim bridge's ~/pause); False if
        the bridge did not do it. Paused, the bridge publishes nothing and the nodes on
        /clock wait, so a learner round gets the CPU the idle graph would otherwise use."""
        try:
            answer = call_service(self._sim_pause, SetBool.Request(data=paused), timeout_s)
        except TimeoutError:
            return False
        return bool(answer.success)

    def set_policy_active(self, active: bool, timeout_s: float = 10.0) -> None:
        """Activate or deactivate the policy node (lifecycle), e.g. around demonstrations."""
        request = ChangeState.Request()
        request.transition.id = (
            Transition.TRANSITION_ACTIVATE if active else Transition.TRANSITION_DEACTIVATE
        )
        answer = call_service(self._policy_state, request, timeout_s, "policy lifecycle")
        if not answer.success:
            state = "activate" if active else "deactivate"
            raise RuntimeError(f"the policy node refused to {state}.")

    def set_policy_exploration(self, explore: bool, timeout_s: float = 10.0) -> None:
        """Turn the policy node's exploration on (collection) or off (evaluation)."""
        value = ParameterValue(type=ParameterType.PARAMETER_BOOL, bool_value=explore)
        request = SetParameters.Request(parameters=[Parameter(name="explore", value=value)])
        answer = call_service(self._policy_parameters, request, timeout_s, "policy parameters")
        result = answer.results[0]
        if not result.successful:
            raise RuntimeError(f"the policy node refused explore={explore}: {result.reason}")

    def wait_for_policy_version(self, version: str, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.policy_version == version:
                return True
            self._sleep(0.05)
        return False

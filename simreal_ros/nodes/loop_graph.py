"""The ROS side of `simreal loop`: ``loop.orchestrator.LoopGraph`` over the running graph.

``ros_loop_graph`` starts the loop's graph as processes (``graph.runner.GraphRunner``) and,
in this process, the trial runner, the loop driver and, in runs that demonstrate, the
scripted expert, in their own ROS context on the graph's domain; ``RosLoopGraph`` is the
port the orchestrator drives.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import rclpy
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.parameter import Parameter
from rclpy.signals import SignalHandlerOptions

from simreal_ros.graph.description import graph
from simreal_ros.graph.runner import GraphRunner
from simreal_ros.loop.config import LoopConfig
from simreal_ros.loop.orchestrator import graph_overrides
from simreal_ros.loop.state import LearnerDecision, RunDirectory
from simreal_ros.nodes.expert_driver import ExpertDriverNode
from simreal_ros.nodes.loop_driver import LoopDriverNode
from simreal_ros.nodes.trial_runner import TrialRunnerNode
from simreal_ros.trials.runner import TrialGraph

LEARNER = "learner"
# Fast DDS and rcl read these from the process environment when the context starts (there
# is no init option for them), so this process's participants take the graph's. The
# domain id is not among them: it is passed to rclpy.init.
DDS_SETTINGS = ("ROS_AUTOMATIC_DISCOVERY_RANGE", "FASTDDS_")


class RosLoopGraph:
    """``LoopGraph`` over ROS: the loop driver for services and topics, the graph runner
    for the learner's process."""

    def __init__(
        self,
        runner: GraphRunner,
        trial: TrialRunnerNode,
        driver: LoopDriverNode,
        expert: ExpertDriverNode | None,
        log_file: Path,
    ) -> None:
        self._runner = runner
        self._trial = trial
        self._driver = driver
        self._expert = expert
        self._log_file = log_file
        self._restarted: list[GraphRunner] = []  # keep their parameter files alive
        self._learner_stopped = False  # stopped by the loop, not dead

    @property
    def trials(self) -> TrialGraph:
        return self._trial

    @property
    def policy_version(self) -> str:
        return self._driver.policy_version

    @property
    def safety_interventions(self) -> int:
        return self._driver.safety_interventions

    def check_nodes(self) -> None:
        if _STOP_REQUESTED.is_set():  # the KeyboardInterrupt may have been lost (below)
            raise KeyboardInterrupt
        stopped = self._learner_index() if self._learner_stopped else None
        died = self._runner.first_exited(ignore=stopped)
        if died is not None:
            process = self._runner.processes[died]
            raise RuntimeError(
                f"node '{process.name}' exited with code {process.returncode}; see "
                f"{self._log_file}. Resume with the same command after fixing it."
            )

    def announce_recorded(self, bags: Path) -> int:
        return self._driver.announce_recorded(str(bags))

    def _learner_index(self) -> int:
        return next(i for i, n in enumerate(self._runner.nodes) if n.name == LEARNER)

    def stop_learner(self) -> None:
        self._learner_stopped = True
        self._runner.processes[self._learner_index()].stop()
        deadline = time.monotonic() + 15.0
        while self._driver.learner_subscribed() and time.monotonic() < deadline:
            time.sleep(0.1)  # the old learner's endpoints leave discovery

    def start_learner(self, method: str) -> None:
        index = self._learner_index()
        node = self._runner.nodes[index]
        spec = dataclasses.replace(node, parameters={**node.parameters, "method": method})
        single = GraphRunner([spec], self._runner.profile, log=self._runner.log)
        single.env = self._runner.env  # the same domain and DDS settings
        single.start()
        self._restarted.append(single)
        self._runner.nodes[index], self._runner.processes[index] = spec, single.processes[0]
        self._learner_stopped = False
        self._driver.wait_for_learner(180.0)

    def train_round(self, timeout_s: float, known: set[str]) -> LearnerDecision:
        return self._driver.train_round(timeout_s, known)

    def wait_for_policy_version(self, version: str, timeout_s: float) -> bool:
        return self._driver.wait_for_policy_version(version, timeout_s)

    def switch_policy(self, version: str) -> None:
        self._driver.switch_policy(version)

    def set_policy_exploration(self, explore: bool) -> None:
        self._driver.set_policy_exploration(explore)

    def hand_to_expert(self, expert: bool) -> None:
        if self._expert is None:
            raise RuntimeError("this run has no scripted expert (method bc, --expert-demos).")
        if expert:
            self._driver.set_policy_active(False)
            self._expert.enabled = True
        else:
            self._expert.enabled = False
            self._driver.set_policy_active(True)

    def pause_sim(self, paused: bool) -> bool:
        return self._driver.pause_sim(paused)


# Set by SIGTERM. The KeyboardInterrupt its handler raises is lost when it lands inside a
# finalizer (Python prints "Exception ignored" and goes on), so the loop also checks this at
# every phase (``check_nodes``).
_STOP_REQUESTED = threading.Event()


def _raise_keyboard_interrupt(signum, frame):
    _STOP_REQUESTED.set()
    raise KeyboardInterrupt


@contextlib.contextmanager
def ros_loop_graph(
    config: LoopConfig, run: RunDirectory, method: str, say: Callable[[str], None]
) -> Iterator[RosLoopGraph]:
    """The loop's graph with the learner on ``method``, up and answering; stopped on exit,
    also after Ctrl-C or SIGTERM."""
    overrides = graph_overrides(config, run, method)
    nodes = graph("sim", overrides, task=config.task, checkpoint=config.base_checkpoint())
    domain = None if config.domain_id < 0 else config.domain_id
    with open(run.log_file, "a", encoding="utf-8") as graph_log:
        runner = GraphRunner(nodes, "sim", domain_id=domain, log=graph_log)
        runner.start()
        say(f"graph up ({', '.join(n.name for n in nodes)}); logs in {graph_log.name}")
        try:
            with _in_process_nodes(config, runner.env, domain) as (trial, driver, expert):
                driver.wait_until_ready(timeout_s=180.0)
                yield RosLoopGraph(runner, trial, driver, expert, run.log_file)
        finally:
            runner.stop()


@contextlib.contextmanager
def _in_process_nodes(config: LoopConfig, graph_env: dict[str, str], domain: int | None):
    for key, value in graph_env.items():
        if key.startswith(DDS_SETTINGS):
            os.environ.setdefault(key, value)
    # Ctrl-C and SIGTERM raise KeyboardInterrupt here, so the graph is stopped in
    # `finally` (rclpy's own handlers would only shut the context down under us).
    context = Context()
    rclpy.init(context=context, domain_id=domain, signal_handler_options=SignalHandlerOptions.NO)
    _STOP_REQUESTED.clear()
    previous_sigterm = signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    executor = SingleThreadedExecutor(context=context)  # why one thread: trial_runner.SpinningNode
    # The trial runner and the loop driver time everything on the wall clock, so they
    # stay off /clock: every sim-time node here handles each /clock message in this
    # executor, and the graph's nodes need that CPU to keep up when the sim runs faster
    # than real time. The expert stamps its actions, so it follows sim time; it exists
    # only in runs that demonstrate.
    trial = TrialRunnerNode(
        context=context,
        parameter_overrides=[
            Parameter("task", value=config.task),
            Parameter("timeout_s", value=float(config.episode_timeout_s)),
            Parameter("keyboard", value=False),
        ],
    )
    driver = LoopDriverNode(context=context)
    expert = None
    if config.uses_expert():
        expert = ExpertDriverNode(
            task=config.task,
            context=context,
            parameter_overrides=[Parameter("use_sim_time", value=True)],
        )
    nodes = [node for node in (trial, driver, expert) if node is not None]
    for node in nodes:
        executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    try:
        yield trial, driver, expert
    finally:
        executor.shutdown()
        spinner.join(timeout=5.0)
        for node in nodes:
            node.destroy_node()
        rclpy.try_shutdown(context=context)
        signal.signal(signal.SIGTERM, previous_sigterm)

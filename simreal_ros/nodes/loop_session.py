"""`simreal loop`: rounds of the sim-to-real loop through the running ROS graph.

The graph is the sim profile with the sim bridge in the ``real_twin`` dynamics profile: a
simulated stand-in for the physical arm (never called real). Every episode goes
policy -> safety -> sim bridge and is recorded by the recorder; the learner node trains
on the recorded bags, screens in sim, and the policy node hot-swaps promoted adapters.

Per round: collect episodes aimed at the last diagnosis (round 0 skips this), ask the
learner for a round (with the round's method) and wait for its decision, evaluate on the
stand-in in both conditions (recorded episodes). After a promotion the arm decides
(``loop.arm_decision``): the incumbent plays the same seeds and a candidate that loses is
rolled back, in the policy node (~/rollback) and in the learner's store, and diagnosed.
Then diagnose the running version, save the summary and the report.

The learner learns of a rollback by a restart: it is stopped, the store's active version
is set back, and it starts again, continuing from what the store says runs (as after any
restart), with the recorded bags re-announced. A change of method restarts it the same
way; both are between rounds, when it holds nothing but what the bags and store hold.
"""

from __future__ import annotations

import dataclasses
import signal
import sys
import threading
import time
from typing import Any

import rclpy
from rclpy.executors import SingleThreadedExecutor
from rclpy.parameter import Parameter
from rclpy.signals import SignalHandlerOptions

from simreal_ros.graph.description import graph
from simreal_ros.graph.runner import GraphRunner
from simreal_ros.loop.arm_decision import decide_on_arm
from simreal_ros.loop.config import LoopConfig
from simreal_ros.loop.plan import plan_collection
from simreal_ros.loop.report import write_report
from simreal_ros.loop.state import (
    ConditionScore,
    LoopSummary,
    RoundRecord,
    RunDirectory,
    describe_identification,
    latest_identification,
    running_update,
)
from simreal_ros.nodes.expert_driver import ExpertDriverNode
from simreal_ros.nodes.loop_driver import LoopDriverNode
from simreal_ros.nodes.trial_runner import TrialRunnerNode
from simreal_ros.policy.checkpoint import shipped_checkpoint
from simreal_ros.trials.runner import run_trials

CONDITIONS = ("train", "shifted")


def graph_overrides(config: LoopConfig, run: RunDirectory, method: str | None = None) -> dict:
    """Per-node parameters of the loop's graph (the task and checkpoint are graph-level)."""
    learner = {
        "method": method or config.method_of_round(1),
        "horizon": config.horizon,
        "store_root": str(run.models),
        "updates_per_round": config.updates_per_round,
        "screen_seeds": config.screen_seeds,
        "sim_episodes": config.sim_episodes,
        "screen_workers": config.screen_workers,
        "round_every_episodes": 0,
        "seed": config.seed,
        "identify_dynamics": config.identify_dynamics,
        "sysid_max_episodes": config.sysid_max_episodes,
        "sysid_evaluations": config.sysid_evaluations,
        "sysid_restarts": 2,
    }
    learner.update(config.learner_overrides())
    return {
        "sim_bridge": {
            "profile": config.stand_in_profile,
            "real_time_factor": config.real_time_factor,
            "joint_state_rate_hz": config.joint_state_rate_hz,
        },
        "recorder": {"data_dir": str(run.bags)},
        "learner": learner,
    }


def _trial_row(result) -> dict[str, Any]:
    """A trial's result as the arm decision reads it."""
    return {
        "condition": result.condition,
        "seed": result.seed,
        "success": bool(result.success),
        "episode_return": float(result.total_reward),
    }


def _raise_keyboard_interrupt(signum, frame):
    raise KeyboardInterrupt


class LoopSession:
    def __init__(self, config: LoopConfig, run: RunDirectory, log=sys.stdout) -> None:
        self.config = config
        self.run = run
        self.log = log
        self.checkpoint = config.checkpoint or str(shipped_checkpoint(config.task))
        # The promoted update the policy node runs (empty: the base checkpoint).
        self._running_update: dict[str, Any] = {}
        self._learner_method = ""
        self._restarted: list[GraphRunner] = []  # keep their parameter files alive

    def say(self, text: str) -> None:
        self.log.write(f"[simreal loop] {text}\n")
        self.log.flush()

    # ------------------------------------------------------------------ graph
    def execute(self) -> LoopSummary:
        config_dict = dataclasses.asdict(self.config)
        summary = self.run.load_summary()
        if summary is None:
            self.run.create(config_dict)
            summary = LoopSummary(self.run.run_id, config_dict)
        elif summary.config != config_dict:
            raise ValueError(
                f"run {self.run.run_id!r} exists with another configuration; resume it with "
                "the same options or choose another --run-id."
            )
        done = len(summary.completed_rounds())
        if done > self.config.rounds:
            self.say(f"run {self.run.run_id} is complete ({done - 1} rounds)")
            return summary
        summary.rounds = summary.completed_rounds()
        self._running_update = running_update(summary.rounds)
        self._learner_method = self.config.method_of_round(len(summary.rounds))
        overrides = graph_overrides(self.config, self.run, self._learner_method)
        nodes = graph("sim", overrides, task=self.config.task, checkpoint=self.checkpoint)
        domain = None if self.config.domain_id < 0 else self.config.domain_id
        with open(self.run.log_file, "a", encoding="utf-8") as graph_log:
            runner = GraphRunner(nodes, "sim", domain_id=domain, log=graph_log)
            runner.start()
            self.say(f"graph up ({', '.join(n.name for n in nodes)}); logs in {graph_log.name}")
            try:
                self._rounds(summary, runner)
            finally:
                runner.stop()
        return summary

    def _rounds(self, summary: LoopSummary, runner: GraphRunner) -> None:
        import os

        if self.config.domain_id >= 0:
            os.environ["ROS_DOMAIN_ID"] = str(self.config.domain_id)
        os.environ.update({k: v for k, v in runner.env.items() if k.startswith(("ROS_", "FAST"))})
        # Ctrl-C and SIGTERM raise KeyboardInterrupt here, so the graph is stopped in
        # `finally` (rclpy's own handlers would only shut the context down under us).
        rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
        signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
        executor = SingleThreadedExecutor()  # why one thread: trial_runner.SpinningNode
        # The trial runner and the loop driver time everything on the wall clock, so they
        # stay off /clock: every sim-time node here handles each /clock message in this
        # executor, and that CPU (half a core for these two) is what the graph's nodes need
        # to keep up when the sim runs faster than real time. The expert stamps its
        # actions, so it follows sim time; it exists only in runs that demonstrate (its
        # /joint_states subscription alone costs a tenth of a core).
        trial = TrialRunnerNode(
            parameter_overrides=[
                Parameter("task", value=self.config.task),
                Parameter("timeout_s", value=float(self.config.episode_timeout_s)),
                Parameter("keyboard", value=False),
            ]
        )
        driver = LoopDriverNode()
        self.expert = None
        if "bc" in self.config.round_methods() and self.config.expert_demos > 0:
            self.expert = ExpertDriverNode(
                task=self.config.task, parameter_overrides=[Parameter("use_sim_time", value=True)]
            )
        nodes = [node for node in (trial, driver, self.expert) if node is not None]
        for node in nodes:
            executor.add_node(node)
        spinner = threading.Thread(target=executor.spin, daemon=True)
        spinner.start()
        try:
            driver.wait_until_ready(timeout_s=180.0)
            start = len(summary.rounds)
            if start:
                count = driver.announce_recorded(str(self.run.bags))
                self.say(f"resuming at round {start}: re-announced {count} recorded episodes")
            for index in range(start, self.config.rounds + 1):
                self._check_graph(runner)
                record = self._round(index, summary, trial, driver, runner)
                summary.rounds.append(record)
                self.run.save_summary(summary)
                write_report(summary, self.run.report_file)
                self.say(self._round_line(record))
        finally:
            executor.shutdown()
            spinner.join(timeout=5.0)
            for node in nodes:
                node.destroy_node()
            rclpy.try_shutdown()

    def _check_graph(self, runner: GraphRunner) -> None:
        died = runner.first_exited()
        if died is not None:
            process = runner.processes[died]
            raise RuntimeError(
                f"node '{process.name}' exited with code {process.returncode}; see "
                f"{self.run.log_file}. Resume with the same command after fixing it."
            )

    # ------------------------------------------------------------------ one round
    def _seeds(self, index: int, phase: int, count: int) -> list[int]:
        base = self.config.seed * 1_000_003 + index * 10_000 + phase * 1_000
        return [base + k for k in range(count)]

    def _episodes(self, trial, condition: str, seeds: list[int], what: str) -> list[Any]:
        if not seeds:
            return []
        results = run_trials(
            trial, len(seeds), condition, seeds, self.config.episode_timeout_s, progress=True
        )
        failed = [r for r in results if r.error]
        if failed:
            self.say(f"{len(failed)} {what} episode(s) could not run: {failed[0].error}")
        return [r for r in results if not r.error]

    def _demonstrations(self, trial, driver, index: int, count: int) -> list[Any]:
        """Scripted-expert demonstrations through safety and the recorder (policy paused)."""
        self.say(f"round {index}: {count} scripted-expert demonstrations (policy inactive)")
        driver.set_policy_active(False)
        self.expert.enabled = True
        try:
            return self._episodes(trial, "train", self._seeds(index, 5, count), "demonstration")
        finally:
            self.expert.enabled = False
            driver.set_policy_active(True)

    def _round(self, index, summary, trial, driver, runner) -> RoundRecord:
        started = time.monotonic()
        record = RoundRecord(index)
        previous = summary.rounds[-1] if summary.rounds else None
        interventions_before = driver.safety_interventions
        episodes: list[Any] = []
        incumbent_update, incumbent = dict(self._running_update), driver.policy_version
        if index > 0 and previous is not None:
            record.method = self.config.method_of_round(index)
            demos = self.config.expert_demos if record.method == "bc" else 0
            plan = plan_collection(
                previous.diagnosis.get("label", ""),
                previous.score("train"),
                previous.score("shifted"),
                self.config.collect_episodes,
                demos if self.expert is not None else 0,
            )
            self.say(f"round {index}: collecting {plan.episodes} ({plan.reason})")
            # Collection explores from the policy's own distribution (the learner's rule);
            # evaluation below runs the deterministic policy, as deployment does.
            driver.set_policy_exploration(self.config.explore_collection)
            try:
                for phase, condition in enumerate(CONDITIONS):
                    seeds = self._seeds(index, phase, plan.episodes.get(condition, 0))
                    episodes += self._episodes(trial, condition, seeds, "collection")
            finally:
                driver.set_policy_exploration(False)
            record.collected = dict(plan.episodes)
            if plan.expert_demos:
                episodes += self._demonstrations(trial, driver, index, plan.expert_demos)
                record.collected["expert_demos"] = plan.expert_demos
            if record.method != self._learner_method:
                self._restart_learner(runner, driver, record.method, "method")
            self.say(f"round {index}: learner training ({record.method})")
            # The stand-in rests while the learner works, as an arm would between trials;
            # its 500 Hz topics would otherwise take most of a 2-core machine.
            paused = driver.pause_sim(True)
            try:
                known = {r.update.get("version", "") for r in summary.rounds}
                asked = time.time()
                record.update = driver.train_round(self.config.round_timeout_s, known)
            finally:
                if paused and not driver.pause_sim(False):
                    self.say("the sim bridge did not resume after the learner round")
            record.identification = latest_identification(self.run.models, since=asked)
            if record.identification:
                self.say(f"round {index}: {describe_identification(record.identification)}")
            if record.update.get("promoted"):
                self._running_update = record.update
                version = record.update["version"]
                if not driver.wait_for_policy_version(version, 60.0):
                    self.say(f"policy did not switch to {version} within 60 s")
        candidate = driver.policy_version
        evaluation_episodes = self._evaluation(index, trial)
        running_episodes = evaluation_episodes
        candidate_episodes: list[Any] = []
        incumbent_episodes: list[Any] = []
        swapped = candidate == record.update.get("version")
        if record.update.get("promoted") and self.config.arm_decision and not swapped:
            self.say(f"round {index}: no arm decision: the policy did not switch to the candidate")
        if record.update.get("promoted") and self.config.arm_decision and swapped:
            self.say(f"round {index}: the incumbent {incumbent} plays the same seeds")
            driver.switch_policy(incumbent)
            candidate_episodes = evaluation_episodes
            incumbent_episodes = self._evaluation(index, trial)
            decision = decide_on_arm(
                [_trial_row(r) for r in candidate_episodes],
                [_trial_row(r) for r in incumbent_episodes],
                candidate, incumbent, self.config.arm_inconclusive,
                seed=self.config.seed + index,
            )  # fmt: skip
            record.arm_decision = decision.to_dict()
            self.say(f"round {index}: the arm decides: {decision.reason}")
            if decision.keep:
                driver.switch_policy(candidate)
            else:
                running_episodes = incumbent_episodes
                self._running_update = incumbent_update
                record.arm_diagnosis = self._diagnose_candidate(
                    record, candidate_episodes, record.update
                )
                self._roll_back_learner(runner, driver, incumbent_update, index)
        record.policy_version = driver.policy_version
        scores = [
            ConditionScore.of(c, [r.success for r in running_episodes if r.condition == c])
            for c in CONDITIONS
        ]
        episodes += candidate_episodes or evaluation_episodes
        episodes += incumbent_episodes
        record.evaluation = [dataclasses.asdict(score) for score in scores]
        roles = {id(r): "candidate" for r in candidate_episodes}
        roles.update({id(r): "incumbent" for r in incumbent_episodes})
        record.episodes = [
            {
                "episode_id": r.episode_id,
                "condition": r.condition,
                "seed": r.seed,
                "success": r.success,
                "steps": r.steps,
                "episode_return": r.total_reward,
                "bag_path": r.bag_path,
                "policy_versions": list(r.policy_versions),
                "evaluation": any(r is e for e in running_episodes),
                "role": roles.get(id(r), ""),
            }
            for r in episodes
        ]
        evaluation = [e for e in record.episodes if e["evaluation"]]
        record.diagnosis = self._diagnose(index, evaluation, scores, self._running_update)
        graph_seeds = {
            condition: self._seeds(index, phase, self.config.eval_episodes)
            for phase, condition in enumerate(CONDITIONS, start=2)
        }
        record.check, record.same_seeds = self._check(index, driver, graph_seeds)
        record.safety_interventions = driver.safety_interventions - interventions_before
        used = previous.real_episodes_total if previous else 0
        seconds = previous.stand_in_seconds_total if previous else 0.0
        record.real_episodes_total = used + len(episodes)
        record.stand_in_seconds_total = seconds + sum(r.steps for r in episodes) * self._dt()
        record.wall_seconds = time.monotonic() - started
        record.complete = True
        return record

    def _evaluation(self, index: int, trial) -> list[Any]:
        """The round's evaluation seeds in both conditions (the same for any version)."""
        results = []
        for phase, condition in enumerate(CONDITIONS, start=2):
            seeds = self._seeds(index, phase, self.config.eval_episodes)
            results += self._episodes(trial, condition, seeds, "evaluation")
        return results

    def _restart_learner(self, runner: GraphRunner, driver, method: str, why: str, then=None):
        """Stop the learner node, run ``then()`` (nothing writes the store meanwhile) and
        start it again with ``method``; it continues from the store's active version, and
        the recorded bags are announced to it again."""
        index = next(i for i, n in enumerate(runner.nodes) if n.name == "learner")
        self.say(f"restarting the learner ({why}; method {method})")
        runner.processes[index].stop()
        if then is not None:
            then()
        deadline = time.monotonic() + 15.0
        while driver.learner_subscribed() and time.monotonic() < deadline:
            time.sleep(0.1)  # the old learner's endpoints leave discovery
        node = runner.nodes[index]
        spec = dataclasses.replace(node, parameters={**node.parameters, "method": method})
        single = GraphRunner([spec], "sim", log=runner.log)
        single.env = runner.env  # the same domain and DDS settings
        single.start()
        self._restarted.append(single)
        runner.nodes[index], runner.processes[index] = spec, single.processes[0]
        self._learner_method = method
        driver.wait_for_learner(180.0)
        count = driver.announce_recorded(str(self.run.bags))
        self.say(f"learner up again; re-announced {count} recorded episodes")

    def _roll_back_learner(self, runner, driver, incumbent_update: dict, index: int) -> None:
        """The store's active version back to the incumbent, then the learner restarts
        (with the next round's method), so the next round trains from what runs."""
        from simreal_ros.learner.store import AdapterStore

        store = AdapterStore(self.run.models)
        version = incumbent_update.get("version") or None
        self._restart_learner(
            runner, driver, self.config.method_of_round(index + 1),
            "the arm rolled the candidate back", lambda: store.activate(version, "rollback"),
        )  # fmt: skip

    def _diagnose_candidate(self, record: RoundRecord, results, update) -> dict[str, Any]:
        """Diagnose a candidate the arm rolled back, from its own arm episodes."""
        rows = [_trial_row(r) | {"bag_path": r.bag_path} for r in results]
        scores = [
            ConditionScore.of(c, [r.success for r in results if r.condition == c])
            for c in CONDITIONS
        ]
        return self._diagnose(record.index, rows, scores, update, "the rolled-back candidate", 1)

    def _dt(self) -> float:
        from simreal_ros.policy.checkpoint import read_metadata

        rate = float(read_metadata(self.checkpoint).get("spec", {}).get("control_rate_hz", 20.0))
        return 1.0 / rate

    def _running_source(self):
        """The running version as the evaluation code loads it (base + promoted adapter)."""
        return self._source(self._running_update)

    def _source(self, update: dict[str, Any]):
        """A learner update (empty: the base) as the evaluation code loads it."""
        from simreal_ros.policy.evaluate import PolicySource

        return PolicySource(
            self.checkpoint,
            adapter_dir=update.get("adapter_path") or None,
            adapter_sha256=update.get("checksum") or None,
        )

    def _check(self, index: int, driver, graph_seeds: dict[str, list[int]]) -> tuple:
        """The running version off ROS on the stand-in, behind the safety filter: on the
        same seeds every round (never recorded, so never trained on), and on this round's
        graph evaluation seeds (what the graph's trials should match)."""
        count = self.config.check_episodes
        if count <= 0:
            return [], []
        from simreal_ros.policy.evaluate import evaluate_policy

        source = self._running_source()
        fixed = [self.config.seed * 1_000_003 + 900_000 + k for k in range(count)]
        check, same = [], []
        paused = driver.pause_sim(True)  # the graph waits; the check gets the CPU
        try:
            for scores, seeds_of in ((check, lambda c: fixed), (same, graph_seeds.get)):
                for condition in CONDITIONS:
                    result = evaluate_policy(
                        source,
                        profile=self.config.stand_in_profile,
                        condition=condition,
                        seeds=seeds_of(condition),
                        workers=self.config.screen_workers,
                        safety_filter=True,
                    )
                    outcomes = [r.success for r in result.records]
                    scores.append(dataclasses.asdict(ConditionScore.of(condition, outcomes)))
        except (ValueError, RuntimeError, OSError) as error:
            self.say(f"round {index}: off-ROS check failed: {error}")
        finally:
            if paused and not driver.pause_sim(False):
                self.say("the sim bridge did not resume after the off-ROS check")
        return check, same

    def _diagnose(self, index, rows, scores, update, what="the running version", salt=0):
        """Diagnose ``update``'s version (empty: the base) from recorded episode rows."""
        from simreal_ros.loop.diagnose_round import diagnose_round
        from simreal_ros.policy.evaluate import build_policy

        try:
            return diagnose_round(
                rows, scores, build_policy(self._source(update)), self.config.task,
                self.config.stand_in_profile, self.config.seed + 7919 * index + salt,
            )  # fmt: skip
        except (ValueError, RuntimeError) as error:
            # Diagnosis informs the next collection; its failure must not end the run.
            self.say(f"round {index}: diagnosis of {what} failed: {error}")
            return {"label": "inconclusive", "summary": f"diagnosis failed: {error}"}

    def _round_line(self, record: RoundRecord) -> str:
        parts = [f"round {record.index}"]
        for condition in CONDITIONS:
            score = record.score(condition)
            if score:
                parts.append(
                    f"{condition} {score.successes}/{score.episodes} "
                    f"[{score.ci_low:.0%}, {score.ci_high:.0%}]"
                )
        for label, lookup in (
            ("off-ROS check", record.check_score),
            ("off-ROS on the graph's seeds", record.same_seeds_score),
        ):
            checks = [lookup(condition) for condition in CONDITIONS]
            if all(checks):
                parts.append(
                    f"{label} "
                    + ", ".join(f"{c.condition} {c.successes}/{c.episodes}" for c in checks)
                )
        if record.method:
            parts.insert(1, f"method {record.method}")
        if record.update:
            decision = "promoted" if record.update.get("promoted") else "rejected"
            parts.append(f"{record.update.get('version', '?')} {decision}")
        if record.arm_decision:
            arm = record.arm_decision
            parts.append(
                f"arm: {arm['kind']} (success {arm['candidate_successes']} vs "
                f"{arm['incumbent_successes']} on {arm['pairs']} pairs)"
            )
        parts.append(f"diagnosis {record.diagnosis.get('label', '-')}")
        parts.append(f"{record.real_episodes_total} stand-in episodes used")
        parts.append(f"{record.wall_seconds:.0f} s")
        return " | ".join(parts)

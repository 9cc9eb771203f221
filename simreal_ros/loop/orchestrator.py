"""The rounds of the sim-to-real loop, over any graph that implements ``LoopGraph``.

The graph of `simreal loop` is the sim profile with the sim bridge in the ``real_twin``
dynamics profile: a simulated stand-in for the physical arm (never called real). Every
episode goes policy -> safety -> sim bridge and is recorded by the recorder; the learner
node trains on the recorded bags, screens in sim, and the policy node hot-swaps promoted
adapters. ``nodes.loop_graph`` implements the port over ROS; tests use fakes.

Per round: collect episodes aimed at the last diagnosis (round 0 skips this), ask the
learner for a round (with the round's method) and wait for its decision, evaluate on the
stand-in in both conditions (recorded episodes). After a promotion the arm decides
(``loop.arm_decision``): the incumbent plays the same seeds and a candidate that loses is
rolled back, in the policy node and in the learner's store, and diagnosed. Then diagnose
the running version, save the summary and the report.

The learner learns of a rollback by a restart: it is stopped, the store's active version
is set back, and it starts again, continuing from what the store says runs (as after any
restart), with the recorded bags re-announced. A change of method restarts it the same
way; both are between rounds, when it holds nothing but what the bags and store hold.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

from simreal_ros.episodes.metadata import CONDITIONS
from simreal_ros.learner.methods import method_traits
from simreal_ros.loop.arm_decision import decide_on_arm
from simreal_ros.loop.config import LoopConfig
from simreal_ros.loop.plan import RoundSeeds, plan_collection
from simreal_ros.loop.report import write_report
from simreal_ros.loop.state import (
    ConditionScore,
    LearnerDecision,
    LoopSummary,
    RoundRecord,
    RunDirectory,
    describe_identification,
    latest_identification,
    running_update,
)
from simreal_ros.robot.description_record import RobotDescription
from simreal_ros.trials.runner import EpisodeResult, TrialGraph, run_trials


class LoopGraph(Protocol):
    """What the loop's rounds need from the running graph."""

    @property
    def trials(self) -> TrialGraph:
        """Runs the recorded episodes (``trials.runner.run_trials``)."""

    @property
    def policy_version(self) -> str:
        """The version the policy node's latest actions carry."""

    @property
    def safety_interventions(self) -> int:
        """The safety filter's interventions since the graph started."""

    def check_nodes(self) -> None:
        """Raise RuntimeError, naming the node, when a node of the graph has exited, and
        KeyboardInterrupt when a stop was requested (Ctrl-C, SIGTERM)."""

    def announce_recorded(self, bags: Path) -> int:
        """Announce the closed bags under ``bags`` to the learner; returns their count."""

    def stop_learner(self) -> None:
        """Stop the learner node; returns once it has left the graph."""

    def start_learner(self, method: str) -> None:
        """Start the learner node with ``method``; returns once it takes requests. It
        continues from the store's active version, with an empty episode buffer."""

    def train_round(self, timeout_s: float, known: set[str]) -> LearnerDecision:
        """Ask the learner for a round and return its decision: the first update whose
        version is not in ``known`` (promoted or rejected)."""

    def wait_for_policy_version(self, version: str, timeout_s: float) -> bool:
        """Until the policy's actions carry ``version``; False if they did not in time."""

    def switch_policy(self, version: str) -> None:
        """Make the policy node run ``version``; raises if it refuses or does not switch."""

    def set_policy_exploration(self, explore: bool) -> None:
        """The policy node explores (collection) or acts deterministically (evaluation)."""

    def hand_to_expert(self, expert: bool) -> None:
        """True: the policy node inactive and the scripted expert acting; False: back."""

    def pause_sim(self, paused: bool) -> bool:
        """Pause or resume the stand-in's physics; False if the bridge did not."""


# Opens the graph with the learner's method for the first round it runs, and closes it.
OpenGraph = Callable[[str], AbstractContextManager[LoopGraph]]


def graph_overrides(config: LoopConfig, run: RunDirectory, method: str | None = None) -> dict:
    """Per-node parameters of the loop's graph (the task and checkpoint are graph-level)."""
    learner = {
        "store_root": str(run.models),
        "round_every_episodes": 0,  # the loop asks for each round
        "seed": config.seed,
        **config.learner_settings(),
        "method": method or config.method_of_round(1),  # --methods cycles it by round
    }
    return {
        "sim_bridge": {
            "profile": config.stand_in_profile,
            "real_time_factor": config.real_time_factor,
            "joint_state_rate_hz": config.joint_state_rate_hz,
        },
        "recorder": {"data_dir": str(run.bags)},
        "policy": {"adapter_store": str(run.models)},  # ~/rollback goes through this store
        "learner": learner,
    }


def trial_row(result: EpisodeResult) -> dict[str, Any]:
    """A trial's result as the arm decision reads it."""
    return {
        "condition": result.condition,
        "seed": result.seed,
        "success": bool(result.success),
        "episode_return": float(result.total_reward),
    }


def condition_scores(results: Sequence[EpisodeResult]) -> list[ConditionScore]:
    return [
        ConditionScore.of(c, [r.success for r in results if r.condition == c]) for c in CONDITIONS
    ]


def diagnose_version(
    config: LoopConfig,
    checkpoint: str,
    update: LearnerDecision | None,
    rows: list[dict[str, Any]],
    scores: list[ConditionScore],
    replay_seeds: list[int],
    robot: RobotDescription,
    identifications: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """Diagnose ``update``'s version (empty: the base) from recorded episode rows of
    ``robot``; ``identifications``: the run's, for the identified sim's residual."""
    from simreal_ros.loop.diagnose_round import diagnose_round
    from simreal_ros.training.evaluate import build_policy

    policy = build_policy(policy_source(checkpoint, update), robot=robot)
    return diagnose_round(
        rows, scores, policy, config.task, config.stand_in_profile, replay_seeds, robot=robot,
        identifications=identifications,
    )  # fmt: skip


def policy_source(checkpoint: str, update: LearnerDecision | None):
    """A learner update (None: the base) as the evaluation code loads it."""
    from simreal_ros.training.evaluate import PolicySource

    if update is None:
        return PolicySource(checkpoint)
    return PolicySource(
        checkpoint,
        adapter_dir=update.adapter_path or None,
        adapter_sha256=update.checksum or None,
    )


class LoopOrchestrator:
    """Runs the rounds of a run directory, resuming after its last completed round."""

    def __init__(
        self,
        config: LoopConfig,
        run: RunDirectory,
        log=sys.stdout,
        executor=None,
        *,
        robot: RobotDescription,
    ) -> None:
        self.config = config
        self.robot = robot  # the arm the graph drives (``--robot``)
        self.run = run
        self.log = log
        # The loop's sim work runs on this ``simreal_ros.executor`` executor (None: local
        # processes, ``screen_workers`` of them, per evaluation).
        self.executor = executor
        self.checkpoint = config.base_checkpoint()
        # The promoted update the policy node runs (None: the base checkpoint).
        self._running_update: LearnerDecision | None = None
        # The running learner's method; None while the loop has it stopped.
        self._learner_method: str | None = ""

    def say(self, text: str) -> None:
        self.log.write(f"[simreal loop] {text}\n")
        self.log.flush()

    def execute(self, open_graph: OpenGraph) -> LoopSummary:
        summary = self._load_summary()
        done = len(summary.completed_rounds())
        if done > self.config.rounds:
            self.say(f"run {self.run.run_id} is complete ({done - 1} rounds)")
            return summary
        summary.rounds = summary.completed_rounds()
        self._running_update = running_update(summary.rounds)
        self._learner_method = self.config.method_of_round(len(summary.rounds))
        with open_graph(self._learner_method) as graph:
            self._rounds(summary, graph)
        return summary

    def _load_summary(self) -> LoopSummary:
        config_dict = dataclasses.asdict(self.config)
        summary = self.run.load_summary()
        if summary is None:
            self.run.create(config_dict)
            return LoopSummary(self.run.run_id, config_dict)
        if summary.config != config_dict:
            raise ValueError(
                f"run {self.run.run_id!r} exists with another configuration; resume it with "
                "the same options or choose another --run-id."
            )
        return summary

    def _rounds(self, summary: LoopSummary, graph: LoopGraph) -> None:
        start = len(summary.rounds)
        graph.pause_sim(True)  # until the first trials (_stand_in_running)
        if start:
            count = graph.announce_recorded(self.run.bags)
            self.say(f"resuming at round {start}: re-announced {count} recorded episodes")
        for index in range(start, self.config.rounds + 1):
            graph.check_nodes()
            record = self._round(index, summary, graph)
            summary.rounds.append(record)
            self.run.save_summary(summary)
            write_report(summary, self.run.report_file)
            self.say(round_line(record))

    # ------------------------------------------------------------------ one round
    def _round(self, index: int, summary: LoopSummary, graph: LoopGraph) -> RoundRecord:
        started = time.monotonic()
        seeds = RoundSeeds(self.config.seed, index)
        record = RoundRecord(index)
        previous = summary.rounds[-1] if summary.rounds else None
        interventions_before = graph.safety_interventions
        episodes: list[EpisodeResult] = []
        incumbent_update, incumbent = self._running_update, graph.policy_version
        if index > 0 and previous is not None:
            with self._phase(record, "collection", graph):
                episodes += self._collect(record, previous, seeds, graph)
            with self._phase(record, "learner (identify, train, screen)", graph):
                self._train(record, summary, graph)
            record.learning_episodes = self._learning_episodes(record, previous, episodes)
        candidate = graph.policy_version
        with self._phase(record, "evaluation", graph):
            evaluation_episodes = self._evaluation(seeds, graph)
        running_episodes = evaluation_episodes
        candidate_episodes: list[EpisodeResult] = []
        incumbent_episodes: list[EpisodeResult] = []
        promoted = record.update is not None and record.update.promoted
        judged = promoted and self.config.arm_decision
        swapped = record.update is not None and candidate == record.update.version
        if judged and not swapped:
            self.say(f"round {index}: no arm decision: the policy did not switch to the candidate")
        if judged and swapped:
            self.say(f"round {index}: the incumbent {incumbent} plays the same seeds")
            self._switch_policy(graph, incumbent)
            candidate_episodes = evaluation_episodes
            with self._phase(record, "arm decision (the incumbent's episodes)", graph):
                incumbent_episodes = self._evaluation(seeds, graph)
            decision = decide_on_arm(
                [trial_row(r) for r in candidate_episodes],
                [trial_row(r) for r in incumbent_episodes],
                candidate, incumbent, self.config.arm_inconclusive, seed=seeds.arm_decision,
            )  # fmt: skip
            record.arm_decision = decision.to_dict()
            self.say(f"round {index}: the arm decides: {decision.reason}")
            if decision.keep:
                self._switch_policy(graph, candidate)
            else:
                running_episodes = incumbent_episodes
                self._running_update = incumbent_update
                record.arm_diagnosis = self._diagnose_candidate(seeds, record, candidate_episodes)
                self._roll_back_learner(graph, incumbent_update)
        record.policy_version = graph.policy_version
        scores = condition_scores(running_episodes)
        episodes += candidate_episodes or evaluation_episodes
        episodes += incumbent_episodes
        record.evaluation = [dataclasses.asdict(score) for score in scores]
        record.episodes = episode_rows(
            episodes, running_episodes, candidate_episodes, incumbent_episodes
        )
        evaluation = [e for e in record.episodes if e["evaluation"]]
        identifications = [r.identification for r in (*summary.rounds, record)]
        with self._phase(record, "diagnosis", graph):
            record.diagnosis = self._diagnose(
                seeds, evaluation, scores, self._running_update, identifications
            )
        graph_seeds = {c: seeds.evaluation(c, self.config.eval_episodes) for c in CONDITIONS}
        with self._phase(record, "off-ROS check", graph):
            record.check, record.same_seeds = self._check(seeds, graph, graph_seeds)
        record.safety_interventions = graph.safety_interventions - interventions_before
        used = previous.real_episodes_total if previous else 0
        seconds = previous.stand_in_seconds_total if previous else 0.0
        record.real_episodes_total = used + len(episodes)
        learned = previous.learning_episodes_total if previous else 0
        record.learning_episodes_total = learned + record.learning_episodes
        record.stand_in_seconds_total = seconds + sum(r.steps for r in episodes) * self._dt()
        record.wall_seconds = time.monotonic() - started
        record.complete = True
        return record

    @contextlib.contextmanager
    def _phase(self, record: RoundRecord, name: str, graph: LoopGraph):
        """One line per phase with its wall time, kept in the record."""
        graph.check_nodes()
        started = time.monotonic()
        try:
            yield
        finally:
            seconds = time.monotonic() - started
            record.phase_seconds[name] = round(seconds, 1)
            self.say(f"round {record.index}: {name} took {seconds:.0f} s")

    @contextlib.contextmanager
    def _stand_in_running(self, graph: LoopGraph):
        """The stand-in runs for trials only. Between them it rests, as an arm would, and
        its high-rate topics leave the CPU to the loop's own work (the learner's round,
        diagnosis, the off-ROS check, the report)."""
        if not graph.pause_sim(False):
            self.say("the sim bridge did not resume for the trials")
        try:
            yield
        finally:
            graph.pause_sim(True)

    def _switch_policy(self, graph: LoopGraph, version: str) -> None:
        # The policy names its version on its actions, which need fresh observations.
        with self._stand_in_running(graph):
            graph.switch_policy(version)

    def _learning_episodes(
        self, record: RoundRecord, previous: RoundRecord, collected: list[EpisodeResult]
    ) -> int:
        """Stand-in episodes the round's learning read: identification's (methods sysid and
        adapt train in sim only); for cotrain, also the running version's newest episodes
        it labelled (identification's newest are among them); or every recorded one for a
        method that trains on them all."""
        identified = int(record.identification.get("episodes", 0) or 0)
        traits = method_traits(record.method)
        if traits.trains_in == "identified_sim":
            return identified
        if traits.update == "adaptation":
            metrics = record.update.final_metrics if record.update is not None else {}
            return max(identified, int(metrics.get("adapt_arm_episodes", 0)))
        return max(identified, previous.real_episodes_total + len(collected))

    def _collect(
        self, record: RoundRecord, previous: RoundRecord, seeds: RoundSeeds, graph: LoopGraph
    ) -> list[EpisodeResult]:
        """Episodes aimed at the previous round's diagnosis, and the expert's demonstrations
        where the round's method uses them."""
        index = record.index
        label = previous.diagnosis.get("label", "")
        record.method = self.config.method_after(index, previous.diagnosis)
        if record.method != self.config.method_of_round(index):
            self.say(f"round {index}: {label}: the last mile from the arm's own episodes "
                     f"(method {record.method})")  # fmt: skip
        demos = self.config.expert_demos if method_traits(record.method).uses_expert_demos else 0
        plan = plan_collection(
            previous.diagnosis.get("label", ""),
            previous.score("train"),
            previous.score("shifted"),
            self.config.collect_episodes,
            demos,
        )
        self.say(f"round {index}: collecting {plan.episodes} ({plan.reason})")
        episodes: list[EpisodeResult] = []
        # Collection explores from the policy's own distribution (the learner's rule);
        # evaluation runs the deterministic policy, as deployment does.
        graph.set_policy_exploration(self.config.explore_collection)
        try:
            for condition in CONDITIONS:
                wanted = seeds.collection(condition, plan.episodes.get(condition, 0))
                episodes += self._episodes(graph, condition, wanted, "collection")
        finally:
            graph.set_policy_exploration(False)
        record.collected = dict(plan.episodes)
        if plan.expert_demos:
            self.say(
                f"round {index}: {plan.expert_demos} scripted-expert demonstrations "
                "(policy inactive)"
            )
            graph.hand_to_expert(True)
            try:
                wanted = seeds.demonstrations(plan.expert_demos)
                episodes += self._episodes(graph, "train", wanted, "demonstration")
            finally:
                graph.hand_to_expert(False)
            record.collected["expert_demos"] = plan.expert_demos
        return episodes

    def _train(self, record: RoundRecord, summary: LoopSummary, graph: LoopGraph) -> None:
        """The learner's round with the round's method, and its promotion's hot swap."""
        index = record.index
        if self._learner_method is None:
            self._start_learner(graph, record.method)
        elif record.method != self._learner_method:
            self._restart_learner(graph, record.method, "method")
        self.say(f"round {index}: learner training ({record.method})")
        known = {r.update.version for r in summary.rounds if r.update is not None}
        asked = time.time()
        decision = graph.train_round(self.config.round_timeout_s, known)
        record.update = dataclasses.replace(
            decision, final_metrics=self._final_metrics(decision.version)
        )
        record.identification = latest_identification(self.run.models, since=asked)
        if record.identification:
            self.say(f"round {index}: {describe_identification(record.identification)}")
        if record.update.promoted:
            self._running_update = record.update
            version = record.update.version
            # The policy names its version on its actions, which need fresh observations.
            with self._stand_in_running(graph):
                switched = graph.wait_for_policy_version(version, 60.0)
            if not switched:
                self.say(f"policy did not switch to {version} within 60 s")

    def _final_metrics(self, version: str) -> dict[str, float]:
        """The candidate's last training metrics, from its metadata in the store (read
        only, so its weights are not hashed)."""
        from simreal_ros.adapters.store import AdapterStore, StoreError

        store = AdapterStore(self.run.models)
        try:
            metrics = store.load(version, verify=False).metadata.get("metrics", {})
        except StoreError as error:
            self.say(f"no training metrics for {version}: {error}")
            return {}
        return {str(k): float(v) for k, v in metrics.items()}

    def _episodes(
        self, graph: LoopGraph, condition: str, seeds: list[int], what: str
    ) -> list[EpisodeResult]:
        if not seeds:
            return []
        with self._stand_in_running(graph):
            results = run_trials(
                graph.trials, len(seeds), condition, seeds, self.config.episode_timeout_s,
                progress=True,
            )  # fmt: skip
        failed = [r for r in results if r.error]
        if failed:
            self.say(f"{len(failed)} {what} episode(s) could not run: {failed[0].error}")
        return [r for r in results if not r.error]

    def _evaluation(self, seeds: RoundSeeds, graph: LoopGraph) -> list[EpisodeResult]:
        """The round's evaluation seeds in both conditions (the same for any version)."""
        results = []
        for condition in CONDITIONS:
            wanted = seeds.evaluation(condition, self.config.eval_episodes)
            results += self._episodes(graph, condition, wanted, "evaluation")
        return results

    def _restart_learner(self, graph: LoopGraph, method: str, why: str) -> None:
        self.say(f"restarting the learner ({why}; method {method})")
        graph.stop_learner()
        self._start_learner(graph, method)

    def _start_learner(self, graph: LoopGraph, method: str) -> None:
        """Start the learner on ``method``; it continues from the store's active version,
        and the recorded bags are announced to it again."""
        graph.start_learner(method)
        self._learner_method = method
        count = graph.announce_recorded(self.run.bags)
        self.say(f"learner up (method {method}); re-announced {count} recorded episodes")

    def _roll_back_learner(
        self, graph: LoopGraph, incumbent_update: LearnerDecision | None
    ) -> None:
        """Stop the learner and set the store's active version back to the incumbent (no
        one writes the store meanwhile). The learner starts again when the next round
        trains, so a run whose last round rolls back does not pay for a restart."""
        from simreal_ros.adapters.store import ROLLBACK, AdapterStore

        store = AdapterStore(self.run.models)
        version = incumbent_update.version if incumbent_update is not None else None
        self.say("stopping the learner (the arm rolled the candidate back); it starts again "
                 "when the next round trains")  # fmt: skip
        graph.stop_learner()
        self._learner_method = None
        store.activate(version, ROLLBACK)

    def _dt(self) -> float:
        from simreal_ros.policy.checkpoint import read_metadata

        rate = float(read_metadata(self.checkpoint).get("spec", {}).get("control_rate_hz", 20.0))
        return 1.0 / rate

    def _check(
        self, seeds: RoundSeeds, graph: LoopGraph, graph_seeds: dict[str, list[int]]
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The running version off ROS on the stand-in, behind the safety filter: on the
        same seeds every round (never recorded, so never trained on), and on this round's
        graph evaluation seeds (what the graph's trials should match)."""
        count = self.config.check_episodes
        if count <= 0:
            return [], []
        from simreal_ros.training.evaluate import evaluate_policy

        source = policy_source(self.checkpoint, self._running_update)
        fixed = dict.fromkeys(CONDITIONS, seeds.check(count))
        check: list[dict[str, Any]] = []
        same: list[dict[str, Any]] = []
        paused = graph.pause_sim(True)  # the graph waits; the check gets the CPU
        try:
            for scores, seeds_of in ((check, fixed), (same, graph_seeds)):
                for condition in CONDITIONS:
                    result = evaluate_policy(
                        source,
                        profile=self.config.stand_in_profile,
                        condition=condition,
                        seeds=seeds_of[condition],
                        workers=self.config.screen_workers,
                        safety_filter=True,
                        executor=self.executor,
                        robot=self.robot,
                    )
                    outcomes = [r.success for r in result.records]
                    scores.append(dataclasses.asdict(ConditionScore.of(condition, outcomes)))
        except (ValueError, RuntimeError, OSError) as error:
            self.say(f"round {seeds.index}: off-ROS check failed: {error}")
        finally:
            if paused and not graph.pause_sim(False):
                self.say("the sim bridge did not resume after the off-ROS check")
        return check, same

    def _diagnose_candidate(
        self, seeds: RoundSeeds, record: RoundRecord, results: list[EpisodeResult]
    ) -> dict[str, Any]:
        """Diagnose a candidate the arm rolled back, from its own arm episodes."""
        rows = [trial_row(r) | {"bag_path": r.bag_path} for r in results]
        scores = condition_scores(results)
        return self._diagnose(
            seeds, rows, scores, record.update, [record.identification],
            "the rolled-back candidate", candidate=True,
        )  # fmt: skip

    def _diagnose(
        self,
        seeds: RoundSeeds,
        rows: list[dict[str, Any]],
        scores: list[ConditionScore],
        update: LearnerDecision | None,
        identifications: Sequence[dict[str, Any]] = (),
        what: str = "the running version",
        candidate: bool = False,
    ) -> dict[str, Any]:
        """Diagnose ``update``'s version (None: the base) from recorded episode rows."""
        from simreal_ros.loop.diagnose_round import REPLAY_EPISODES

        replay_seeds = seeds.diagnosis(REPLAY_EPISODES, candidate=candidate)
        try:
            return diagnose_version(
                self.config, self.checkpoint, update, rows, scores, replay_seeds, self.robot,
                [i for i in identifications if i],
            )  # fmt: skip
        except (ValueError, RuntimeError) as error:
            # Diagnosis informs the next collection; its failure must not end the run.
            self.say(f"round {seeds.index}: diagnosis of {what} failed: {error}")
            return {"label": "inconclusive", "summary": f"diagnosis failed: {error}"}


def episode_rows(
    episodes: Sequence[EpisodeResult],
    running: Sequence[EpisodeResult],
    candidate: Sequence[EpisodeResult],
    incumbent: Sequence[EpisodeResult],
) -> list[dict[str, Any]]:
    """The round's episodes for the summary: ``running`` are the evaluation of what runs
    after the round; ``candidate`` and ``incumbent`` the arm's two sides."""
    roles = {id(r): "candidate" for r in candidate}
    roles.update({id(r): "incumbent" for r in incumbent})
    return [
        {
            "episode_id": r.episode_id,
            "condition": r.condition,
            "seed": r.seed,
            "success": r.success,
            "steps": r.steps,
            "episode_return": r.total_reward,
            "bag_path": r.bag_path,
            "policy_versions": list(r.policy_versions),
            "evaluation": any(r is e for e in running),
            "role": roles.get(id(r), ""),
        }
        for r in episodes
    ]


def round_line(record: RoundRecord) -> str:
    """One line on a finished round for the terminal."""
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
    if record.update is not None:
        decision = "promoted" if record.update.promoted else "rejected"
        parts.append(f"{record.update.version} {decision}")
    if record.arm_decision:
        arm = record.arm_decision
        parts.append(
            f"arm: {arm['kind']} (success {arm['candidate_successes']} vs "
            f"{arm['incumbent_successes']} on {arm['pairs']} pairs)"
        )
    parts.append(f"diagnosis {record.diagnosis.get('label', '-')}")
    parts.append(
        f"stand-in episodes: {record.learning_episodes_total} for learning, "
        f"{record.real_episodes_total} in total"
    )
    parts.append(f"{record.wall_seconds:.0f} s")
    return " | ".join(parts)

"""The loop's rounds over a fake graph: arm rollbacks, learner restarts, planned seeds."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json

import pytest

from simreal_ros import config_schema
from simreal_ros.loop import orchestrator as orchestrator_module
from simreal_ros.loop.config import LoopConfig
from simreal_ros.loop.orchestrator import LoopOrchestrator
from simreal_ros.loop.plan import RoundSeeds
from simreal_ros.loop.state import LearnerDecision, RunDirectory
from simreal_ros.robot.description import load_robot_description
from simreal_ros.trials.runner import TaskEnd

BASE = "base"


@dataclasses.dataclass
class Played:
    version: str
    condition: str
    seed: int
    explore: bool
    expert: bool


class FakeTrials:
    """``TrialGraph``: each episode succeeds or fails as the graph's version does."""

    def __init__(self, graph: FakeLoopGraph) -> None:
        self.graph = graph
        self.played: list[Played] = []
        self._episode = None

    def reset(self, seed: int, condition: str, episode_id: str) -> str:
        self._episode = (seed, condition)
        return episode_id or f"episode-{len(self.played)}"

    def start_recording(self, episode_id: str, condition: str, seed: int) -> str:
        return f"/bags/{episode_id}"

    def wait_for_end(self, episode_id: str, timeout_s: float) -> TaskEnd:
        seed, condition = self._episode
        graph = self.graph
        self.played.append(Played(graph.version, condition, seed, graph.explore, graph.expert))
        success = graph.version not in graph.losers
        return TaskEnd(done=True, success=success, steps=10, total_reward=float(success))

    def stop_recording(self, label) -> dict:
        return {"policy_versions": [self.graph.version]}

    def human_interventions(self) -> int:
        return 0


class FakeLoopGraph:
    """``LoopGraph``: the learner answers each round with the next of ``updates``; a
    promoted update is hot-swapped in, as the policy node does."""

    def __init__(self, updates: list[LearnerDecision], losers: tuple[str, ...] = ()) -> None:
        self.updates = list(updates)
        self.losers = set(losers)
        self.version = BASE
        self.explore = False
        self.expert = False
        self.calls: list[tuple] = []
        self.trials = FakeTrials(self)

    @property
    def policy_version(self) -> str:
        return self.version

    @property
    def safety_interventions(self) -> int:
        return 0

    def check_nodes(self) -> None:
        pass

    def announce_recorded(self, bags) -> int:
        self.calls.append(("announce_recorded",))
        return 0

    def stop_learner(self) -> None:
        self.calls.append(("stop_learner",))

    def start_learner(self, method: str) -> None:
        self.calls.append(("start_learner", method))

    def train_round(self, timeout_s: float, known: set[str]) -> LearnerDecision:
        update = self.updates.pop(0)
        self.calls.append(("train_round", update.version))
        if update.promoted:
            self.version = update.version
        return update

    def wait_for_policy_version(self, version: str, timeout_s: float) -> bool:
        return self.version == version

    def switch_policy(self, version: str) -> None:
        self.calls.append(("switch_policy", version))
        self.version = version

    def set_policy_exploration(self, explore: bool) -> None:
        self.explore = explore

    def hand_to_expert(self, expert: bool) -> None:
        self.expert = expert

    def pause_sim(self, paused: bool) -> bool:
        return True


def update(version: str, promoted: bool = True, method: str = "sgft") -> LearnerDecision:
    return LearnerDecision(version, promoted, method)


class Diagnoses(list):
    label = "inconclusive"  # what every diagnosis finds


@pytest.fixture
def diagnoses(monkeypatch):
    """The diagnosis (MuJoCo, the policy's weights) replaced by a record of its calls."""
    calls = Diagnoses()

    def diagnose(config, checkpoint, update, rows, scores, replay_seeds, robot, identifications):
        version = update.version if update is not None else BASE
        calls.append(
            {"version": version, "replay_seeds": replay_seeds, "identifications": identifications}
        )
        return {"label": calls.label, "summary": "fake"}

    monkeypatch.setattr(orchestrator_module, "diagnose_version", diagnose)
    return calls


def run_loop(tmp_path, graph: FakeLoopGraph, **settings):
    settings = {"task": "reach", "check_episodes": 0, "seed": 3, **settings}
    config = LoopConfig(**settings)
    run = RunDirectory(tmp_path / "runs", "t")
    log = io.StringIO()
    opened = []

    @contextlib.contextmanager
    def open_graph(method: str):
        opened.append(method)
        yield graph

    robot = load_robot_description("simreal_arm")
    summary = LoopOrchestrator(config, run, log=log, robot=robot).execute(open_graph)
    return summary, run, log.getvalue(), opened


def test_a_promotion_that_loses_on_the_arm_is_rolled_back_and_the_learner_restarted(
    tmp_path, diagnoses
):
    graph = FakeLoopGraph(
        [update("v0001", method="bc"), update("v0002", False, "rl")], losers=("v0001",)
    )
    summary, run, log, opened = run_loop(
        tmp_path, graph, rounds=2, methods="bc,rl", eval_episodes=3, collect_episodes=2
    )
    assert opened == ["bc"]
    round1 = summary.rounds[1]
    assert round1.arm_decision["kind"] == "passed_sim_lost_on_arm"
    assert round1.arm_decision["candidate"] == "v0001"
    assert round1.arm_decision["incumbent"] == BASE
    # The policy node runs the incumbent again, the store agrees around the stopped
    # learner, and the learner starts again with the next round's method only when that
    # round trains (a run ending on a rollback pays no restart).
    assert round1.policy_version == graph.version == BASE
    assert graph.calls[graph.calls.index(("train_round", "v0001")) :] == [
        ("train_round", "v0001"),
        ("switch_policy", BASE),
        ("stop_learner",),
        ("start_learner", "rl"),
        ("announce_recorded",),
        ("train_round", "v0002"),
    ]
    active = json.loads((run.models / "active.json").read_text())
    assert active["current"] is None and active["history"][-1]["reason"] == "rollback"
    assert "stopping the learner (the arm rolled the candidate back)" in log
    assert "learner up (method rl); re-announced" in log
    # What runs after the round is scored on the incumbent's episodes, and the candidate
    # is diagnosed on its own.
    assert [s["successes"] for s in round1.evaluation] == [3, 3]
    assert [d["version"] for d in diagnoses] == [BASE, "v0001", BASE, BASE]
    roles = [e["role"] for e in round1.episodes]
    assert roles.count("candidate") == 6 and roles.count("incumbent") == 6


def test_a_candidate_that_wins_on_the_arm_keeps_running_without_a_restart(tmp_path, diagnoses):
    graph = FakeLoopGraph([update("v0001")], losers=(BASE,))
    summary, _, log, _ = run_loop(tmp_path, graph, rounds=1, eval_episodes=3)
    assert summary.rounds[1].arm_decision["kind"] == "kept"
    # One line per phase with its wall time, kept in the record; method adapt (the
    # default) learns from identification's episodes only (none identified here).
    assert summary.rounds[1].method == "adapt"
    for phase in ("collection", "learner (identify, train, screen)", "evaluation",
                  "arm decision (the incumbent's episodes)", "diagnosis"):  # fmt: skip
        assert f"round 1: {phase} took" in log and phase in summary.rounds[1].phase_seconds
    assert summary.rounds[1].learning_episodes_total == 0
    assert summary.rounds[1].real_episodes_total > 0
    assert summary.rounds[1].policy_version == "v0001"
    assert ("switch_policy", "v0001") in graph.calls
    assert not [c for c in graph.calls if c[0] in ("stop_learner", "start_learner")]


class StoppedInRoundOne(FakeLoopGraph):
    """A stop (SIGTERM) requested while round 1 collects, whose KeyboardInterrupt was lost
    (raised inside a finalizer): only the graph's ``check_nodes`` still reports it."""

    def check_nodes(self) -> None:
        if len(self.trials.played) > 4:  # after round 0's four evaluation episodes
            raise KeyboardInterrupt


def test_a_stop_whose_interrupt_was_lost_ends_the_run_at_the_next_phase(tmp_path, diagnoses):
    graph = StoppedInRoundOne([update("v0001")])
    with pytest.raises(KeyboardInterrupt):
        run_loop(tmp_path, graph, rounds=1, eval_episodes=2)
    # Round 0 is kept for the resume; round 1 ends after its collection, before training.
    summary = json.loads((tmp_path / "runs" / "t" / "summary.json").read_text())
    assert [r["index"] for r in summary["rounds"] if r["complete"]] == [0]
    assert len(graph.trials.played) > 4 and not graph.calls


def test_a_change_of_method_restarts_the_learner_with_it(tmp_path, diagnoses):
    graph = FakeLoopGraph([update("v0001", False, "sgft"), update("v0002", False, "sysid")])
    summary, _, log, opened = run_loop(tmp_path, graph, rounds=2, methods="sgft,sysid")
    assert opened == ["sgft"]
    assert [r.method for r in summary.rounds] == ["", "sgft", "sysid"]
    restart = [("stop_learner",), ("start_learner", "sysid"), ("announce_recorded",)]
    assert graph.calls == [("train_round", "v0001"), *restart, ("train_round", "v0002")]
    assert "restarting the learner (method; method sysid)" in log


def test_episodes_play_the_planned_seeds(tmp_path, diagnoses):
    diagnoses.label = "mode_collapse"  # round 1 collects in train and demonstrates
    graph = FakeLoopGraph([update("v0001", promoted=False, method="bc")])
    summary, *_ = run_loop(
        tmp_path, graph, rounds=1, method="bc", eval_episodes=2, collect_episodes=4,
        expert_demos=2,
    )  # fmt: skip
    round0, round1 = (RoundSeeds(3, index) for index in (0, 1))
    played = [(p.condition, p.seed, p.explore, p.expert) for p in graph.trials.played]
    evaluation0 = [(c, s, False, False) for c in ("train", "shifted")
                   for s in round0.evaluation(c, 2)]  # fmt: skip
    planned = summary.rounds[1].collected
    collection = [(c, s, True, False) for c in ("train", "shifted")
                  for s in round1.collection(c, planned[c])]  # fmt: skip
    demonstrations = [("train", s, False, True) for s in round1.demonstrations(2)]
    evaluation1 = [(c, s, False, False) for c in ("train", "shifted")
                   for s in round1.evaluation(c, 2)]  # fmt: skip
    assert planned == {"train": 4, "shifted": 0, "expert_demos": 2}
    assert played == evaluation0 + collection + demonstrations + evaluation1
    assert [d["replay_seeds"] for d in diagnoses] == [round0.diagnosis(3), round1.diagnosis(3)]


def test_a_completed_run_resumes_to_nothing_and_another_configuration_is_refused(
    tmp_path, diagnoses
):
    run_loop(tmp_path, FakeLoopGraph([]), rounds=0)
    graph = FakeLoopGraph([])
    summary, _, log, opened = run_loop(tmp_path, graph, rounds=0)
    assert opened == [] and len(summary.rounds) == 1 and "is complete" in log
    with pytest.raises(ValueError, match="another configuration"):
        run_loop(tmp_path, graph, rounds=0, seed=4)


def test_the_loops_learner_settings_are_the_learners_own_and_all_reach_the_node(tmp_path):
    from simreal_ros.learner.config import LearnerConfig

    learner_settings = config_schema.settings(LearnerConfig)
    loop_fields = dataclasses.fields(LoopConfig)
    # Loop field -> the learner setting it sets; a loop field named like a learner setting
    # must be that setting (not a second declaration of it).
    shared = {
        f.name: f.metadata["shared_name"] for f in loop_fields if f.metadata.get("shared_name")
    }
    own = {f.name for f in loop_fields} - set(shared) - {"task", "checkpoint", "seed"}
    assert not own & set(learner_settings)
    assert {"horizon", "sysid.restarts", "screen.seeds", "updates_per_round"} <= set(
        shared.values()
    )
    by_name = {f.name: f for f in loop_fields}
    for name, setting in shared.items():  # one description and range; the default is the loop's
        loop_meta = dict(by_name[name].metadata)
        assert loop_meta.pop("shared_with") == "LearnerConfig", name
        assert loop_meta.pop("shared_name") == setting
        assert loop_meta == dict(learner_settings[setting].metadata), name
    config = LoopConfig(task="reach", sysid_restarts=4, learner_set="screen.seeds=7")
    learner = orchestrator_module.graph_overrides(config, RunDirectory(tmp_path, "s"))["learner"]
    assert {setting: learner[setting] for setting in shared.values()} == {
        setting: 7 if setting == "screen.seeds" else getattr(config, name)
        for name, setting in shared.items()
    }
    assert learner["sysid.restarts"] == 4
    config_schema.from_mapping(LearnerConfig, learner)  # the node's schema accepts it all
    with pytest.raises(ValueError, match="sysid_restarts"):
        LoopConfig(sysid_restarts=0)  # the learner's range holds in the loop too

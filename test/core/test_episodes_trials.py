"""The trial loop (core) against a fake graph: order of calls, labels, errors, operator."""

from __future__ import annotations

import shutil

import pytest

from simreal_ros.episodes.synthetic import JOINTS, write_episode
from simreal_ros.trials.runner import (
    KeyboardOperator,
    Label,
    TaskEnd,
    label_from_task,
    parse_operator_label,
    run_trials,
    summarize,
)


class FakeGraph:
    def __init__(self, ends, fail_reset_at=(), recorded_steps=()):
        self.ends = list(ends)
        self.recorded_steps = list(recorded_steps)  # the recorder's control steps per episode
        self.calls: list[tuple] = []
        self.fail_reset_at = set(fail_reset_at)
        self.n = 0

    def reset(self, seed, condition, episode_id):
        self.n += 1
        self.calls.append(("reset", seed, condition))
        if self.n - 1 in self.fail_reset_at:
            raise TimeoutError("reset service did not answer")
        return f"ep{self.n}"

    def start_recording(self, episode_id, condition, seed):
        self.calls.append(("start", episode_id))
        return f"/bags/{episode_id}"

    def wait_for_end(self, episode_id, timeout_s):
        self.calls.append(("wait", episode_id, timeout_s))
        return self.ends.pop(0)

    def stop_recording(self, label):
        self.calls.append(("stop", label.outcome, label.failure_mode, label.note))
        steps = self.recorded_steps.pop(0) if self.recorded_steps else 0
        event = {"messages": 10, "dropped": 0, "policy_versions": ["v1"], "bag_path": "/b"}
        return {**event, "steps": steps}

    def human_interventions(self):
        return 3 if self.n == 2 else 0


def test_each_episode_is_reset_recorded_waited_and_labelled_in_order():
    ends = [
        TaskEnd(done=True, success=True, steps=40, total_reward=-3.0),
        TaskEnd(done=True, truncated=True, steps=120),
        TaskEnd(timed_out=True, steps=7),
    ]
    graph = FakeGraph(ends, recorded_steps=[38, 120, 5])
    results = run_trials(graph, 3, "shifted", seeds=[5, 6, 7], timeout_s=2.5, progress=False)
    assert [c[0] for c in graph.calls] == ["reset", "start", "wait", "stop"] * 3
    assert graph.calls[0] == ("reset", 5, "shifted")
    assert [r.outcome for r in results] == ["success", "failure", "failure"]
    assert [r.success for r in results] == [True, False, False]
    # The length is the recorder's count of control steps, never the task's tick counter.
    assert [r.steps for r in results] == [38, 120, 5] and results[0].total_reward == -3.0
    assert results[1].human_interventions == 3 and "human takeover on 3 ticks" in results[1].note
    assert results[2].timed_out and "within 2.5 s" in results[2].note
    assert results[0].policy_versions == ("v1",)
    text = summarize(results)
    assert "1/3 successes" in text and "Wilson" in text and "control steps 38" in text


def test_a_failing_episode_is_reported_and_the_loop_goes_on():
    graph = FakeGraph([TaskEnd(done=True, success=True)] * 2, fail_reset_at={0})
    results = run_trials(graph, 2, "train", timeout_s=1.0, progress=False)
    assert "reset service did not answer" in results[0].error and not results[0].success
    assert results[1].success and not results[1].error
    assert "ERROR" in summarize(results)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="condition"):
        run_trials(FakeGraph([]), 1, "sideways", progress=False)
    with pytest.raises(ValueError, match="seeds"):
        run_trials(FakeGraph([]), 3, "train", seeds=[1], progress=False)


def test_operator_labels_by_keyboard():
    assert parse_operator_label("s") == Label("success", True)
    label = parse_operator_label("f Over-specialization -- slid past the goal")
    assert label == Label("failure", False, "over_specialization", "slid past the goal")
    assert parse_operator_label("f gripper slipped").failure_mode == "gripper slipped"
    assert parse_operator_label("a -- cube fell off").outcome == "aborted"
    with pytest.raises(ValueError, match="start with s"):
        parse_operator_label("maybe")
    answers = iter(["", "x", "f mode collapse"])
    said = []
    operator = KeyboardOperator(read=lambda prompt: next(answers), write=said.append)
    assert operator.ask_label(TaskEnd()).failure_mode == "mode_collapse"
    assert len(said) == 2  # two bad answers, each answered with what to type
    # A label the operator already gave wins over the task's view.
    given = Label("aborted", False, "", "e-stop")
    assert label_from_task(TaskEnd(done=True, success=True, label=given), 1.0) is given


class RecordingGraph:
    """The trial loop over a real episode recording: each episode is written as the
    recorder writes it (synthetic messages at 20 Hz, the task done at ``done_at``, a late
    done of the previous episode first, and ticks after the end), and the task reports its
    own tick counter, larger than the episode."""

    def __init__(self, data_dir, steps=12, done_at=7):
        self.data_dir, self.steps, self.done_at = data_dir, steps, done_at
        self.recording = None

    def reset(self, seed, condition, episode_id):
        return f"ep{seed}"

    def start_recording(self, episode_id, condition, seed):
        self.episode_id = episode_id
        return str(self.data_dir / episode_id)

    def wait_for_end(self, episode_id, timeout_s):
        self.recording, _ = write_episode(
            self.data_dir / episode_id, self.steps, episode_id=episode_id,
            done_at=self.done_at, stale_done=True, close=False,
        )  # fmt: skip
        return TaskEnd(done=True, success=True, steps=self.steps + 3)

    def stop_recording(self, label):
        meta = self.recording.stop(label.outcome, label.success)
        event = {"bag_path": str(self.recording.bag_dir), "messages": meta.messages}
        return {**event, "dropped": meta.dropped, "steps": meta.steps}

    def human_interventions(self):
        return 0


def test_trials_and_the_episode_list_count_the_same_control_steps_of_one_bag(tmp_path, capsys):
    from simreal_ros.cli.main import main
    from simreal_ros.episodes.catalog import list_episodes
    from simreal_ros.episodes.dataset import read_episode
    from simreal_ros.episodes.recovery import recover_bag
    from simreal_ros.episodes.steps import CONTROL_STEPS

    graph = RecordingGraph(tmp_path / "episodes", steps=12, done_at=7)
    (result,) = run_trials(graph, 1, "train", seeds=[3], timeout_s=5.0, progress=False)
    (entry,) = list_episodes(tmp_path / "episodes")
    # Actions 0..7: the one after which the task said done is the last; the late done of
    # the previous episode ends nothing, the 4 ticks after the end are not the episode's.
    assert result.steps == entry.metadata.steps == 8
    assert len(read_episode(result.bag_path, JOINTS)) == 8  # the learner's transitions
    assert f"{CONTROL_STEPS} 8 " in summarize([result])
    assert main(["episodes", "list", "--data-dir", str(tmp_path / "episodes")]) == 0
    header, row = capsys.readouterr().out.splitlines()[:2]
    column = header.index(CONTROL_STEPS)
    assert row[column : column + len(CONTROL_STEPS)].strip() == "8"
    # A bag whose recorder was killed (its file as flushed) counts the same way once
    # recovered.
    live, _ = write_episode(
        tmp_path / "live", 12, episode_id="killed", done_at=7, stale_done=True, close=False
    )
    (tmp_path / "killed").mkdir()
    shutil.copy(live.mcap_path, tmp_path / "killed" / "killed.mcap")
    live.stop("aborted", False)
    assert recover_bag(tmp_path / "killed").metadata.steps == 8

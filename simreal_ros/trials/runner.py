"""The trial loop: for each episode reset, record, wait for the end, label, stop.

``run_trials(graph, episodes, condition, seeds, timeout_s)`` is what ``simreal trials``
and the fine-tuning loop call; ``graph`` is anything implementing ``TrialGraph`` (the
trial_runner node over ROS, or a fake in tests).
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from simreal_ros.episodes.metadata import NAMED_FAILURE_MODES, normalize_failure_mode
from simreal_ros.episodes.steps import CONTROL_STEPS
from simreal_ros.stats import wilson_interval


@dataclasses.dataclass
class TaskEnd:
    """How an episode ended, as far as the task (or the operator) saw it."""

    done: bool = False
    success: bool = False
    truncated: bool = False
    timed_out: bool = False
    # The task's own step counter (sim ticks since the reset): not the episode's length,
    # which is its control steps as the recorder counted them (episodes.steps).
    steps: int = 0
    total_reward: float = 0.0
    # Set when the operator labelled the episode (real profile: ~/label or keyboard).
    label: Label | None = None


@dataclasses.dataclass
class Label:
    outcome: str  # success, failure or aborted
    success: bool
    failure_mode: str = ""
    note: str = ""


@dataclasses.dataclass
class EpisodeResult:
    index: int
    episode_id: str
    seed: int
    condition: str
    outcome: str
    success: bool
    failure_mode: str
    note: str
    steps: int  # control steps (episodes.steps), as the recorder counted them in the bag
    total_reward: float
    duration_s: float
    timed_out: bool
    bag_path: str
    messages: int = 0
    dropped: int = 0
    human_interventions: int = 0
    policy_versions: tuple[str, ...] = ()
    error: str = ""


class TrialGraph(Protocol):
    """What the trial loop needs from the running graph."""

    def reset(self, seed: int, condition: str, episode_id: str) -> str:
        """Put the task in a new start state (sim: the bridge's service; real: the operator).
        Returns the episode id the task reports in /task/status."""

    def start_recording(self, episode_id: str, condition: str, seed: int) -> str:
        """Start the recorder on this episode; returns the bag path."""

    def wait_for_end(self, episode_id: str, timeout_s: float) -> TaskEnd:
        """Block until the task says done, the operator labels, or ``timeout_s`` passes."""

    def stop_recording(self, label: Label) -> dict:
        """Stop the recorder with the label; returns the episode event as a dict (bag_path,
        messages, dropped, policy_versions, and steps: the control steps in the bag)."""

    def human_interventions(self) -> int:
        """Takeover messages seen since the last reset."""


def label_from_task(end: TaskEnd, timeout_s: float) -> Label:
    """Outcome of a sim episode from /task/status (success, else failure with the reason)."""
    if end.label is not None:
        return end.label
    if end.success:
        return Label("success", True)
    if end.timed_out:
        return Label("failure", False, "", f"no done from /task/status within {timeout_s:.1f} s")
    if end.truncated:
        return Label("failure", False, "", "time limit reached without success")
    return Label("failure", False, "", "task ended without success")


def parse_operator_label(text: str) -> Label:
    """``s`` / ``f [mode] [-- note]`` / ``a [-- note]`` typed by the operator.

    The failure mode is one of the named modes (over_specialization, mode_collapse,
    action_convention_mismatch; spellings with spaces or dashes are accepted) or free text.
    """
    text = text.strip()
    head, _, note = text.partition("--")
    words = head.split(maxsplit=1)
    if not words:
        raise ValueError("empty answer; type s (success), f [failure mode] or a (aborted).")
    key = words[0].lower()
    rest = words[1].strip() if len(words) > 1 else ""
    if key in ("s", "success", "y", "yes"):
        return Label("success", True, "", note.strip())
    if key in ("f", "failure", "n", "no"):
        return Label("failure", False, normalize_failure_mode(rest), note.strip())
    if key in ("a", "abort", "aborted"):
        return Label("aborted", False, "", note.strip())
    raise ValueError(f"{text!r}: start with s (success), f (failure) or a (aborted).")


class KeyboardOperator:
    """Operator prompts on a terminal (real profile)."""

    def __init__(self, read: Callable[[str], str] = input, write=None) -> None:
        self._read = read
        self._write = write or (lambda text: print(text, file=sys.stderr, flush=True))

    def confirm_reset(self, index: int, seed: int, condition: str) -> None:
        self._write(
            f"\nEpisode {index + 1}: reset the scene for condition '{condition}' "
            f"(seed {seed}), clear the workspace, then press Enter to start."
        )
        self._read("> ")

    def ask_label(self, end: TaskEnd) -> Label:
        modes = ", ".join(NAMED_FAILURE_MODES)
        while True:
            answer = self._read(
                f"Outcome? s = success, f [failure mode: {modes} or free text], a = aborted; "
                "'-- note' adds a note\n> "
            )
            try:
                return parse_operator_label(answer)
            except ValueError as error:
                self._write(str(error))


def run_trials(
    graph: TrialGraph,
    episodes: int,
    condition: str,
    seeds: Sequence[int] | None = None,
    timeout_s: float = 30.0,
    labeler: Callable[[TaskEnd], Label] | None = None,
    progress: bool = True,
    episode_ids: Callable[[int, int], str] | None = None,
) -> list[EpisodeResult]:
    """Run ``episodes`` recorded, labelled episodes; one result per episode, in order.

    ``seeds`` defaults to 0..episodes-1. ``labeler`` turns how an episode ended into its
    label (default: ``graph.label`` when the graph has one, as the trial_runner node does:
    the operator on the real profile; else from /task/status).
    An episode whose reset or recording fails is reported with ``error`` and the loop
    goes on; a recording already started is stopped as ``aborted``.
    """
    if episodes < 0:
        raise ValueError(f"episodes={episodes} must be at least 0.")
    if condition not in ("train", "shifted"):
        raise ValueError(f"condition {condition!r} must be train or shifted.")
    seeds = list(range(episodes)) if seeds is None else [int(s) for s in seeds]
    if len(seeds) < episodes:
        raise ValueError(f"{len(seeds)} seeds given for {episodes} episodes.")
    # A graph that knows how to label (the node: operator on the real profile) does so.
    labeler = labeler or getattr(graph, "label", None)
    labeler = labeler or (lambda end: label_from_task(end, timeout_s))
    results: list[EpisodeResult] = []
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=episodes, desc=f"trials ({condition})", unit="ep", file=sys.stderr)
    try:
        for index in range(episodes):
            result = _run_one(
                graph, index, seeds[index], condition, timeout_s, labeler, episode_ids
            )
            results.append(result)
            if bar is not None:
                successes = sum(r.success for r in results)
                low, high = wilson_interval(successes, len(results))
                bar.set_postfix_str(
                    f"success {successes}/{len(results)} = {successes / len(results):.0%} "
                    f"[{low:.0%}, {high:.0%}]"
                )
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return results


def _run_one(graph, index, seed, condition, timeout_s, labeler, episode_ids) -> EpisodeResult:
    requested_id = episode_ids(index, seed) if episode_ids else ""
    started = time.monotonic()
    result = EpisodeResult(
        index, requested_id, seed, condition, "aborted", False, "", "", 0, 0.0, 0.0, False, ""
    )
    recording = False
    try:
        episode_id = graph.reset(seed, condition, requested_id)
        result.episode_id = episode_id
        result.bag_path = graph.start_recording(episode_id, condition, seed)
        recording = True
        end = graph.wait_for_end(episode_id, timeout_s)
        label = labeler(end)
        result.total_reward, result.timed_out = end.total_reward, end.timed_out
        result.human_interventions = graph.human_interventions()
        if result.human_interventions:
            label.note = (label.note + " " if label.note else "") + (
                f"[human takeover on {result.human_interventions} ticks]"
            )
        event = graph.stop_recording(label)
        recording = False
        result.outcome, result.success = label.outcome, label.success
        result.failure_mode, result.note = label.failure_mode, label.note
        result.messages = int(event.get("messages", 0))
        result.dropped = int(event.get("dropped", 0))
        # The episode's length as `simreal episodes list` shows it: one count, the bag's.
        result.steps = int(event.get("steps", 0))
        result.policy_versions = tuple(event.get("policy_versions", ()))
        result.bag_path = event.get("bag_path", result.bag_path)
    except Exception as error:  # one broken episode must not end the session
        result.error = f"{type(error).__name__}: {error}"
        result.note = result.error
        if recording:
            try:
                graph.stop_recording(Label("aborted", False, "", result.error))
            except Exception as stop_error:
                result.error += f"; stopping the recording failed too: {stop_error}"
    result.duration_s = time.monotonic() - started
    return result


def summarize(results: Sequence[EpisodeResult]) -> str:
    """Success rate with its Wilson 95% interval, then one line per episode with its length
    in control steps (the number `simreal episodes list` shows for the same bag)."""
    n = len(results)
    successes = sum(r.success for r in results)
    low, high = wilson_interval(successes, n)
    lines = [
        f"{successes}/{n} successes ({successes / n:.0%}, Wilson 95% CI {low:.0%}..{high:.0%})"
        if n
        else "no episodes run"
    ]
    for r in results:
        extra = f" ({r.failure_mode})" if r.failure_mode else ""
        error = f" ERROR {r.error}" if r.error else ""
        lines.append(
            f"  {r.index + 1:3d} {r.episode_id:36} seed {r.seed:<6d} {r.outcome}{extra} "
            f"{CONTROL_STEPS} {r.steps} dropped {r.dropped}{error}"
        )
    return "\n".join(lines)

"""The run directory of `simreal loop` and its machine-readable summary.

``runs/<id>/`` holds config.json, bags/ (one rosbag2 per episode), models/ (every
adapter the learner wrote), summary.json (rewritten atomically after every step, so a
run can resume after interruption), report.html and graph.log.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

from simreal_ros.atomic_files import write_json_atomic
from simreal_ros.loop.arm_decision import LOST
from simreal_ros.stats import wilson_interval

SUMMARY_VERSION = 1


@dataclasses.dataclass
class ConditionScore:
    condition: str
    episodes: int
    successes: int
    ci_low: float
    ci_high: float

    @property
    def rate(self) -> float:
        return self.successes / self.episodes if self.episodes else 0.0

    @classmethod
    def of(cls, condition: str, outcomes: list[bool]) -> ConditionScore:
        successes = int(sum(outcomes))
        low, high = wilson_interval(successes, len(outcomes))
        return cls(condition, len(outcomes), successes, low, high)


@dataclasses.dataclass(frozen=True)
class LearnerDecision:
    """The learner's answer to a round: its /learner/policy_update for the candidate, and
    the candidate's final training metrics from the store."""

    version: str
    promoted: bool
    method: str = ""
    reason: str = ""
    parent_version: str = ""
    adapter_path: str = ""
    checksum: str = ""
    # Per screened condition, the announced fields of the gate's ConditionResult.
    screening: tuple[dict[str, Any], ...] = ()
    final_metrics: dict[str, float] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LearnerDecision:
        fields = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in fields}
        values["screening"] = tuple(dict(s) for s in data.get("screening", ()))
        return cls(**values)


@dataclasses.dataclass
class RoundRecord:
    """What happened in one round; round 0 is the zero-shot evaluation."""

    index: int
    policy_version: str = ""  # what runs after the round (after the arm's decision)
    method: str = ""  # the learner's method this round ("" in round 0: no training)
    collected: dict[str, int] = dataclasses.field(default_factory=dict)
    update: LearnerDecision | None = None  # None in round 0 (no training)
    evaluation: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    # Off-ROS episodes on the stand-in, same seeds every round (ConditionScore dicts).
    check: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    # The same version off ROS on this round's graph evaluation seeds: a graph result far
    # below it points at the graph (timing, the swap, the filter), not at the policy.
    same_seeds: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    diagnosis: dict[str, Any] = dataclasses.field(default_factory=dict)
    # The learner's system identification before this round (``latest_identification``).
    identification: dict[str, Any] = dataclasses.field(default_factory=dict)
    # After a promotion: the arm's paired comparison (loop.arm_decision.ArmDecision dict);
    # kind passed_sim_lost_on_arm is a rollback, diagnosed in arm_diagnosis.
    arm_decision: dict[str, Any] = dataclasses.field(default_factory=dict)
    arm_diagnosis: dict[str, Any] = dataclasses.field(default_factory=dict)
    safety_interventions: int = 0
    real_episodes_total: int = 0  # stand-in episodes used in total (evaluation included)
    # Stand-in episodes learning read this round (identification's, plus the recorded ones
    # a method trains on), and summed over the rounds (one read twice counts twice).
    learning_episodes: int = 0
    learning_episodes_total: int = 0
    # Wall seconds per phase of the round (collection, learner, evaluation, ...).
    phase_seconds: dict[str, float] = dataclasses.field(default_factory=dict)
    stand_in_seconds_total: float = 0.0
    episodes: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    wall_seconds: float = 0.0
    complete: bool = False

    def score(self, condition: str) -> ConditionScore | None:
        return _find_score(self.evaluation, condition)

    def check_score(self, condition: str) -> ConditionScore | None:
        return _find_score(self.check, condition)

    def same_seeds_score(self, condition: str) -> ConditionScore | None:
        return _find_score(self.same_seeds, condition)


def _find_score(items: list[dict[str, Any]], condition: str) -> ConditionScore | None:
    for item in items:
        if item["condition"] == condition:
            return ConditionScore(**item)
    return None


def running_update(rounds: list[RoundRecord]) -> LearnerDecision | None:
    """The update the policy runs after these rounds: the last promoted one the arm did not
    roll back (a rollback returns to what ran before it); None: the base checkpoint."""
    running = None
    for record in rounds:
        promoted = record.update is not None and record.update.promoted
        if promoted and record.arm_decision.get("kind") != LOST:
            running = record.update
    return running


@dataclasses.dataclass
class LoopSummary:
    run_id: str
    config: dict[str, Any]
    started: float = dataclasses.field(default_factory=time.time)
    rounds: list[RoundRecord] = dataclasses.field(default_factory=list)
    version: int = SUMMARY_VERSION

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LoopSummary:
        if data.get("version") != SUMMARY_VERSION:
            raise ValueError(
                f"summary.json has version {data.get('version')!r}, this simreal writes "
                f"{SUMMARY_VERSION}; start a new run with another --run-id."
            )
        rounds = []
        for item in data.get("rounds", []):
            update = item.get("update")
            decision = LearnerDecision.from_dict(update) if update else None
            rounds.append(RoundRecord(**(item | {"update": decision})))
        return cls(data["run_id"], data["config"], data["started"], rounds, data["version"])

    def completed_rounds(self) -> list[RoundRecord]:
        return [record for record in self.rounds if record.complete]


class RunDirectory:
    def __init__(self, root: Path | str, run_id: str) -> None:
        if not run_id or "/" in run_id or run_id.startswith("."):
            raise ValueError(f"run id {run_id!r} must be a plain directory name.")
        self.path = Path(root) / run_id
        self.run_id = run_id

    @property
    def bags(self) -> Path:
        return self.path / "bags"

    @property
    def models(self) -> Path:
        return self.path / "models"

    @property
    def summary_file(self) -> Path:
        return self.path / "summary.json"

    @property
    def report_file(self) -> Path:
        return self.path / "report.html"

    @property
    def log_file(self) -> Path:
        return self.path / "graph.log"

    def create(self, config: dict[str, Any]) -> None:
        for directory in (self.path, self.bags, self.models):
            directory.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.path / "config.json", config)

    def load_summary(self) -> LoopSummary | None:
        if not self.summary_file.exists():
            return None
        return LoopSummary.from_dict(json.loads(self.summary_file.read_text()))

    def save_summary(self, summary: LoopSummary) -> None:
        write_json_atomic(self.summary_file, summary.to_dict())


def latest_identification(models: Path, since: float) -> dict[str, Any]:
    """The newest identification the learner wrote under ``models/sysid`` after ``since``
    (a time.time()), summarised for the summary and the report; {} when there is none."""
    found = [p for p in Path(models).glob("sysid/*/sysid.json") if p.stat().st_mtime >= since]
    if not found:
        return {}
    path = max(found, key=lambda p: p.stat().st_mtime)
    from simreal_ros.sysid.output import KEPT_PREVIOUS, identification_summary

    data = json.loads(path.read_text())
    summary = identification_summary(data, data.get("profile_path", ""))
    kept = path.parent / KEPT_PREVIOUS
    if kept.is_file():
        summary |= json.loads(kept.read_text())
    return summary


def describe_identification(identification: dict[str, Any]) -> str:
    values = ", ".join(f"{k} {v:.3g}" for k, v in identification.get("values", {}).items())
    ranges = identification.get("bounded", {})
    bounded = ", ".join(f"{k} {lo:.3g}..{hi:.3g}" for k, (lo, hi) in ranges.items())
    unfixed = [p for p in identification.get("unidentifiable", []) if p not in ranges]
    before, after = identification.get("fit_error", [float("nan")] * 2)
    return (
        f"identified from {identification.get('episodes', 0)} episodes: {values or 'nothing'}"
        f" (error {before:.3f} -> {after:.3f}"
        + (
            f", {identification['residual_over_noise']:.1f}x what noise leaves"
            if identification.get("residual_over_noise") is not None
            else ""
        )
        + "); "
        + (f"bounded, not fixed: {bounded}; " if bounded else "")
        + f"unidentifiable: {', '.join(unfixed) or 'none'}"
        + (
            f"; the learner kept the earlier profile {identification['kept_previous']}"
            if identification.get("kept_previous")
            else ""
        )
    )

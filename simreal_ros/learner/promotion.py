"""How a trained adapter becomes the running version: staged in the store with its
metadata, screened in sim against the running version on the same seeds, then committed
(and activated when promoted) or discarded. Also the gate's settings and its default
evaluator, the policy package's sim evaluation."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from simreal_ros.adapters.store import AdapterStore, StoredVersion
from simreal_ros.learner import lora
from simreal_ros.learner.config import LearnerConfig
from simreal_ros.learner.gate import EvaluationSummary, Evaluator, GateDecision, GateSettings
from simreal_ros.learner.gate import screen as gate_screen
from simreal_ros.learner.replay import REAL_SOURCES, Transitions

if TYPE_CHECKING:
    from simreal_ros.learner.critics import Critics
    from simreal_ros.learner.finetune import ValueWatch
    from simreal_ros.learner.identified import IdentifiedDynamics


@dataclasses.dataclass
class Candidate:
    version: str
    parent_version: str | None
    method: str
    adapter_dir: Path  # staging directory until committed
    metadata: dict[str, Any]
    metrics: dict[str, float]


def candidate_metadata(
    config: LearnerConfig,
    round_: int,
    data: Transitions,
    manifest: Sequence[dict],
    metrics: dict[str, float],
    critics: Critics,
    value_watch: ValueWatch,
    identified: IdentifiedDynamics,
    checkpoint_dir: Path | None,
) -> dict[str, Any]:
    """What a candidate's simreal_adapter.json records beyond its base and weights."""
    return {
        "method": config.method,
        "round": round_,
        "created": time.time(),
        "hyperparameters": dataclasses.asdict(config),
        "gamma": critics.gamma,
        "horizon": config.horizon_or_none,
        "reward_scale": critics.reward_scale,
        "reward_scale_source": critics.scale_source,
        "failure_value": critics.failure_value,
        "data_manifest": {
            "episodes": list(manifest),
            "transitions_by_source": data.counts_by_source(),
            "real_sources": list(REAL_SOURCES),
        },
        "metrics": {k: float(v) for k, v in metrics.items()},
        "value_exploit_flag": value_watch.flag,
        # Where the candidate is screened (and, method sysid, trained): how it was found.
        "screening_profile": identified.screening_profile(config),
        "identification": identified.identification,
        "critic_warning": critics.warning,
        # Per real episode: return, mean V_sim, shaped return (SGFT only).
        "value_watch": value_watch.monitor.episodes[-50:],
        "checkpoint_dir": str(checkpoint_dir) if checkpoint_dir else "",
    }


class Promotion:
    """The running version and its adapter weights, and the candidates' way to replace
    them; a candidate that is not promoted leaves the weights as the running version's."""

    def __init__(
        self, store: AdapterStore, checkpoint, actor_peft, running_version: str | None, robot
    ) -> None:
        self.store = store
        self.robot = robot  # the arm the versions belong to (a RobotDescription)
        self.checkpoint = checkpoint
        self.checkpoint_dir = Path(checkpoint.path) if checkpoint.path else None
        self.actor_peft = actor_peft
        self.running_version = running_version  # None: the base checkpoint
        self.running_state = lora.adapter_state(actor_peft)
        self.baseline_cache: dict = {}

    def running_adapter(self) -> Path | None:
        return self.store.load(self.running_version).path if self.running_version else None

    def stage(
        self, method: str, version: str | None, metadata: dict[str, Any], metrics
    ) -> Candidate:
        """The trained adapter in a staging directory of the store, with its metadata."""
        from simreal_ros.policy.checkpoint import write_adapter_metadata

        version = version or self.store.next_version()
        staging = self.store.new_staging(version)
        lora.save(self.actor_peft, staging)
        metadata = write_adapter_metadata(
            staging, self.checkpoint, version, self.running_version, **metadata
        )
        return Candidate(version, self.running_version, method, staging, metadata, metrics)

    def screen(
        self, config: LearnerConfig, candidate: Candidate, evaluator: Evaluator, profile: str
    ) -> GateDecision:
        seeds = [config.screen.first_seed + i for i in range(config.screen.seeds)]
        return gate_screen(
            evaluator,
            self.checkpoint_dir,
            candidate.adapter_dir,
            self.running_adapter(),
            config.screen.conditions,
            seeds,
            config.promotion.ci_low,
            config.promotion.tolerance,
            profile,
            self.baseline_cache,
            gate_settings(config),
        )

    def commit(self, candidate: Candidate, decision: GateDecision) -> StoredVersion:
        """Store the candidate with its decision; activate it if promoted, else drop it."""
        stored = self.store.commit(
            candidate.adapter_dir,
            candidate.version,
            candidate.metadata,
            decision.to_dict(),
            robot=self.robot,
        )
        if decision.promoted:
            self.store.activate(candidate.version, "promoted")
            self.running_version = candidate.version
            self.running_state = lora.adapter_state(self.actor_peft)
            # The base's screening stays valid; the old running version's is not needed.
            self.baseline_cache = {k: v for k, v in self.baseline_cache.items() if k[0] == "None"}
        else:
            # Continue from the running adapter, not from the rejected one.
            lora.set_adapter_weights(self.actor_peft, self.running_state)
        return stored

    def discard(self, candidate: Candidate) -> None:
        self.store.discard(candidate.adapter_dir)
        lora.set_adapter_weights(self.actor_peft, self.running_state)


def gate_settings(config: LearnerConfig) -> GateSettings:
    """The gate's thresholds from the learner's settings."""
    return GateSettings(
        rule=config.promotion.rule,
        success_floor=config.promotion.success_floor,
        ci_low=config.promotion.ci_low,
        tolerance=config.promotion.tolerance,
        max_intervention_rate=config.promotion.max_intervention_rate,
        max_saturated_share=config.promotion.max_saturated_share,
        max_divergence=config.promotion.max_divergence,
    )


def policy_evaluator(
    config: LearnerConfig, profile: Callable[[], str] | None = None, *, robot, executor=None
) -> Evaluator:
    """The gate's evaluator on ``robot`` (a ``RobotDescription``): the policy package's
    parallel spawned-worker sim evaluation
    (the deployed, merged form of base + adapter, with the adapter's checksum checked) in
    ``screen.profile`` (a shipped name or a profile YAML, e.g. an identified one). An
    adapter's actions are compared with the base's on its own states (divergence).
    ``executor`` (``simreal_ros.executor``): where the episodes run; None: a pool of
    ``screen.workers`` processes per evaluation."""
    from simreal_ros.training.evaluate import PolicySource, evaluate_policy

    def evaluate(checkpoint_dir, adapter_dir, condition, seeds) -> EvaluationSummary:
        source = PolicySource(
            str(checkpoint_dir), None if adapter_dir is None else str(adapter_dir)
        )
        result = evaluate_policy(
            source,
            profile=profile() if profile else config.screen.profile,
            condition=condition,
            seeds=list(seeds),
            workers=config.screen.workers,
            safety_filter=config.screen.safety_filter,
            reference=None if adapter_dir is None else PolicySource(str(checkpoint_dir)),
            robot=robot,
            executor=executor,
        )
        return summary_from_evaluation(result)

    return evaluate


def summary_from_evaluation(result) -> EvaluationSummary:
    """``simreal_ros.training.evaluate.EvaluationResult`` -> the gate's summary (divergence:
    the step-weighted mean over the episodes that measured it)."""
    records = result.records
    compared = [r for r in records if r.divergence is not None and r.action_components]
    weight = sum(r.action_components for r in compared)
    divergence = (
        sum(r.divergence * r.action_components for r in compared) / weight if weight else None
    )
    return EvaluationSummary(
        episodes=int(result.episodes),
        successes=int(result.successes),
        mean_return=float(result.mean_return),
        per_seed_success=[bool(r.success) for r in records],
        steps=sum(int(r.length) for r in records),
        intervened_steps=sum(int(r.intervened_steps) for r in records),
        action_components=sum(int(r.action_components) for r in records),
        saturated_actions=sum(int(r.saturated_actions) for r in records),
        nonfinite_steps=sum(int(r.nonfinite_steps) for r in records),
        divergence=divergence,
    )

"""Fine-tuning rounds: data in, candidate adapter out, screened, stored, maybe promoted.

Entry points (the node, the CLI and notebooks call these; no rclpy here):

    session = LearnerSession(config, robot=robot)    # base checkpoint, store, sim data
    candidate = session.finetune(real_transitions)   # one round of BC / RL / SGFT
    decision = session.screen(candidate, evaluator)  # sim gate on the same seeds
    stored = session.commit(candidate, decision)     # atomic store write; activate if promoted

    round = session.run_round(paths, evaluator)      # all of the above for episode bags

and the one-shot functions ``finetune(...)`` / ``screen(...)`` below. Each version is
"base checkpoint + one LoRA adapter"; a new round continues from the running adapter's
weights, and a rejected candidate's weights are dropped again.

The session coordinates; the work is done by its roles: ``critics`` (V_sim, the critic,
reward scale, failure value, EWC), ``finetune`` (each method's update), ``identified``
(the model of the arm that screening and method sysid use) and ``promotion`` (staging,
the gate, the store).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from simreal_ros.adapters.store import AdapterStore, StoredVersion
from simreal_ros.learner import lora
from simreal_ros.learner.config import LearnerConfig
from simreal_ros.learner.critics import Critics, check_gamma
from simreal_ros.learner.data import load_episodes
from simreal_ros.learner.finetune import RoundTrainer
from simreal_ros.learner.gate import Evaluator, GateDecision
from simreal_ros.learner.identified import IdentifiedDynamics
from simreal_ros.learner.methods import method_traits
from simreal_ros.learner.promotion import (
    Candidate,
    Promotion,
    candidate_metadata,
    policy_evaluator,
)
from simreal_ros.learner.replay import ARM_SOURCES, Transitions
from simreal_ros.robot.description_record import RobotDescription

log = logging.getLogger("simreal_ros.learner")


# ---------------------------------------------------------------- rounds
@dataclasses.dataclass
class RoundResult:
    round: int
    candidate: Candidate
    decision: GateDecision
    stored: StoredVersion
    metrics: dict[str, float]


class LearnerSession:
    """State kept across rounds: the base checkpoint, the running adapter, the sim data
    and the store, and the roles that use them: ``critics`` (V_sim, the critic, reward
    scale and failure value), ``trainer`` (each method's update), ``identified`` (the
    model of the arm screening runs in) and ``promotion`` (staging, gate, store)."""

    def __init__(
        self,
        config: LearnerConfig,
        checkpoint=None,
        sim_data: Transitions | None = None,
        store: AdapterStore | None = None,
        *,
        robot: RobotDescription,
        executor=None,
    ) -> None:
        from simreal_ros.policy.checkpoint import shipped_checkpoint
        from simreal_ros.policy.spec import SpecConverter
        from simreal_ros.robot.kinematics import ToolKinematics
        from simreal_ros.training.torch_checkpoint import load_checkpoint

        self.config = config
        self.robot = robot
        # Where the sim-side adaptation's episodes run (None: a pool for the stage).
        self.executor = executor
        torch.manual_seed(config.seed)
        if checkpoint is None:
            path = config.checkpoint_dir or str(shipped_checkpoint(config.task))
            checkpoint = load_checkpoint(path)
        if checkpoint.spec.camera is not None:
            raise ValueError(
                f"{checkpoint.version} is a camera policy: the learner's methods fine-tune "
                "state policies (they need its critic and state observations). Align a "
                "camera policy's encoder to the arm's frames with `simreal align`."
            )
        self.checkpoint = checkpoint
        gamma = check_gamma(config.gamma, float(checkpoint.gamma))
        kinematics = ToolKinematics.for_robot(robot) if checkpoint.spec.needs_kinematics else None
        self._kinematics = kinematics
        self._converter = SpecConverter(checkpoint.spec, kinematics)
        self._specs: dict[str, Any] = {}  # version -> its conventions (``version_spec``)
        self.store = store or AdapterStore(config.store_root)
        self.store.clean_staging()
        self.round = 0
        self.log: list[dict[str, Any]] = []
        self.sim_data = sim_data
        # Running version: what the store says is active (None = the base checkpoint).
        running = self.store.current()
        self.actor_peft = lora.wrap(
            checkpoint.model.actor,
            config.lora.rank,
            config.lora.alpha,
            config.lora.dropout,
            config.lora.targets,
            init_adapter=self.store.load(running).path if running else None,
        )
        self.promotion = Promotion(self.store, checkpoint, self.actor_peft, running, robot)
        self.critics = Critics(config, checkpoint, gamma, sim_data)
        self.trainer = RoundTrainer(config, checkpoint, self.actor_peft, self.critics, robot)
        self.identified = IdentifiedDynamics(robot, config.sysid.profile)
        if config.learning_rate > config.learning_rate_cap:
            log.warning(
                "learning_rate %.3g clipped to the cap %.3g",
                config.learning_rate,
                config.learning_rate_cap,
            )

    @property
    def running_spec(self):
        """The running version's conventions: the base's, with the per-tick step its
        metadata names (sim adaptation widens it for a slow arm)."""
        from simreal_ros.policy.spec import version_spec

        running = self.promotion.running_version
        if not running:
            return self.checkpoint.spec
        if running not in self._specs:
            metadata = self.store.load(running).metadata
            self._specs[running] = version_spec(self.checkpoint.spec, metadata, self.robot)
        return self._specs[running]

    @property
    def action_scale(self) -> tuple[float, ...]:
        """The running version's per-tick step."""
        return tuple(self.running_spec.action_scale)

    @property
    def converter(self):
        """The running version's converter: the actor's coordinates, in which its episodes
        are read and its updates made."""
        from simreal_ros.policy.spec import SpecConverter

        spec = self.running_spec
        if self._converter.spec is not spec:  # one spec object per version
            self._converter = SpecConverter(spec, self._kinematics)
        return self._converter

    def _sim_in_running_units(self) -> Transitions | None:
        """The sim transitions (recorded in the base's units) in the running version's."""
        sim = self.sim_data
        base = np.asarray(self.checkpoint.spec.action_scale)
        ratio = base / np.asarray(self.action_scale)
        if sim is None or np.all(ratio == 1.0):
            return sim
        actions = np.clip(sim.actions * ratio.astype(np.float32), -1.0, 1.0)
        return dataclasses.replace(sim, actions=actions)

    @property
    def screening_profile(self) -> str:
        """Screening runs in the best available model of the arm: the identified profile
        when there is one, else ``screen.profile`` (randomised by default)."""
        return self.identified.screening_profile(self.config)

    def add_sim_data(self, sim: Transitions) -> None:
        """More sim transitions (e.g. sim episodes recorded by the graph) for replay/EWC."""
        self.critics.annotate(sim)
        self.sim_data = (
            sim if self.sim_data is None else Transitions.concatenate([self.sim_data, sim])
        )

    # -------------------------------------------------------------- one round
    def training_data(self, real: Transitions | None) -> Transitions:
        parts = [p for p in (real, self._sim_in_running_units()) if p is not None and len(p)]
        if not parts:
            raise ValueError("no transitions to train on: record episodes first.")
        if real is not None and len(real):
            self.critics.annotate(real)
        return Transitions.concatenate(parts)

    def finetune(
        self, real: Transitions | None, manifest: Sequence[dict] = (), version: str | None = None
    ) -> Candidate:
        """Train one candidate adapter from the running one and stage it in the store."""
        cfg = self.config
        started = time.time()
        if method_traits(cfg.method).update == "adaptation":
            return self._adapt(real, manifest, version, started)
        if (
            method_traits(cfg.method).trains_in == "identified_sim"
        ):  # no real transition reaches it
            real = self.trainer.identified_sim_episodes(
                cfg, self.identified.profile, self.converter, self.round
            )
        data = self.training_data(real)
        self.round += 1
        metrics = self.trainer.train(cfg, data, real, self.round, self.sim_data)
        metrics["round"] = float(self.round)
        metrics["train_seconds"] = time.time() - started
        metadata = candidate_metadata(
            cfg, self.round, data, manifest, metrics, self.critics, self.trainer.value_watch,
            self.identified, self.promotion.checkpoint_dir,
        )  # fmt: skip
        metadata["action_scale"] = list(self.action_scale)  # the parent's: same units
        candidate = self.promotion.stage(cfg.method, version, metadata, metrics)
        self.log.append({"round": self.round, "version": candidate.version, **metrics})
        return candidate

    def _adapt(
        self, real: Transitions | None, manifest: Sequence[dict], version: str | None,
        started: float,
    ) -> Candidate:  # fmt: skip
        """method adapt: sim-side adaptation of the running adapter in the identified sim
        (no real transition reaches the update; they are recorded in the manifest)."""
        from simreal_ros.policy.checkpoint import shipped_checkpoint

        cfg = self.config
        data = self.training_data(real)
        self.round += 1
        checkpoint_dir = cfg.checkpoint_dir or str(shipped_checkpoint(cfg.task))
        out_dir = Path(cfg.store_root) / "adaptation" / f"round{self.round}-{int(started)}"
        labels_arm = method_traits(cfg.method).labels_arm_states
        arm_bags = self.running_version_bags(manifest) if labels_arm else []
        result = self.trainer.sim_adaptation(
            cfg, self.identified.profile, checkpoint_dir, str(out_dir), self.round,
            self.executor, parent_scale=self.action_scale, arm_bags=arm_bags,
        )  # fmt: skip
        metrics = result["metrics"]
        metrics["round"] = float(self.round)
        metrics["train_seconds"] = time.time() - started
        metadata = candidate_metadata(
            cfg, self.round, data, manifest, metrics, self.critics, self.trainer.value_watch,
            self.identified, self.promotion.checkpoint_dir,
        )  # fmt: skip
        metadata["action_scale"] = list(result["action_scale"])
        candidate = self.promotion.stage(cfg.method, version, metadata, metrics)
        self.log.append({"round": self.round, "version": candidate.version, **metrics})
        return candidate

    def running_version_bags(self, manifest: Sequence[dict]) -> list[str]:
        """The newest ``adapt.arm_episodes`` arm episodes (real sources) that the running
        version played: the states its own behaviour leads the arm to."""
        running = self.promotion.running_version or self.checkpoint.version
        arm = [
            m["bag"]
            for m in manifest
            if m.get("source") in ARM_SOURCES and running in m.get("policy_versions", ())
        ]
        if not arm:
            raise ValueError(
                f"method cotrain found no arm episode played by the running version "
                f"{running} among {len(manifest)} recorded; run it on the arm first."
            )
        return arm[-self.config.adapt.arm_episodes :]

    def identify(self, bags: Sequence[str | Path]) -> str | None:
        """System identification from the newest real bags; the profile, or None (and the
        reason in ``identified.identification``) when they cannot be identified from."""
        return self.identified.identify(self.config, bags, self.round)

    # -------------------------------------------------------------- gate and store
    def screen(self, candidate: Candidate, evaluator: Evaluator) -> GateDecision:
        return self.promotion.screen(self.config, candidate, evaluator, self.screening_profile)

    def commit(self, candidate: Candidate, decision: GateDecision) -> StoredVersion:
        """Store the candidate with its decision; activate it if promoted, else drop it."""
        return self.promotion.commit(candidate, decision)

    def discard(self, candidate: Candidate) -> None:
        self.promotion.discard(candidate)

    def run_round(
        self, real: Transitions | None, evaluator: Evaluator, manifest: Sequence[dict] = ()
    ) -> RoundResult:
        candidate = self.finetune(real, manifest)
        try:
            decision = self.screen(candidate, evaluator)
        except BaseException:
            self.discard(candidate)
            raise
        stored = self.commit(candidate, decision)
        log.info("round %d: %s %s", self.round, candidate.version, decision.reason)
        return RoundResult(self.round, candidate, decision, stored, candidate.metrics)


# ---------------------------------------------------------------- one-shot API
def finetune(
    method: str,
    checkpoint_dir: str | Path,
    episodes: Transitions | str | Path | Iterable[str | Path] | None,
    sim_data: Transitions | None = None,
    config: LearnerConfig | None = None,
    *,
    robot: RobotDescription,
) -> tuple[LearnerSession, Candidate]:
    """One fine-tuning run for ``robot``; returns the session (for screen/commit) and the
    candidate."""
    from simreal_ros.config_schema import from_mapping

    base = dataclasses.asdict(config) if config else {}
    base.update(method=method, checkpoint_dir=str(checkpoint_dir))
    cfg = from_mapping(LearnerConfig, base)
    session = LearnerSession(cfg, sim_data=sim_data, robot=robot)
    manifest: list[dict] = []
    if episodes is None or isinstance(episodes, Transitions):
        real = episodes
    else:
        real, manifest = load_episodes(episodes, session.checkpoint, session.converter)
    return session, session.finetune(real, manifest)


def screen(session: LearnerSession, candidate: Candidate, evaluator: Evaluator | None = None):
    """Gate ``candidate`` and store it with its decision; returns (decision, stored)."""
    evaluator = evaluator or policy_evaluator(
        session.config, lambda: session.screening_profile, robot=session.robot
    )
    decision = session.screen(candidate, evaluator)
    return decision, session.commit(candidate, decision)

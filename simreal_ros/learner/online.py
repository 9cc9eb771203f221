"""The learner's online loop: episodes arrive, rounds run on a worker thread.

``OnlineLearner`` is what the learner node wraps (and what a notebook can drive without
ROS): ``offer()`` records an announced episode and returns at once; a worker thread
starts a round after every ``round_every_episodes`` new real episodes or
``round_every_seconds`` with new data, trains, screens, stores, and hands each decision
to ``on_result``. Nothing here blocks the caller; errors are kept for diagnostics and the
loop carries on with the next round.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from simreal_ros.executor import LocalExecutor
from simreal_ros.learner.config import LearnerConfig
from simreal_ros.learner.data import collect_sim_transitions, load_episodes
from simreal_ros.learner.gate import Evaluator
from simreal_ros.learner.promotion import policy_evaluator
from simreal_ros.learner.replay import REAL_SOURCES, Transitions
from simreal_ros.learner.session import LearnerSession, RoundResult

log = logging.getLogger("simreal_ros.learner")


@dataclasses.dataclass(frozen=True)
class EpisodeInfo:
    episode_id: str
    bag_path: str
    source: str
    success: bool = False
    outcome: str = ""


@dataclasses.dataclass(frozen=True)
class LearnerStatus:
    """What the loop is doing and what its last round decided (the node's diagnostics)."""

    state: str
    round: int
    episodes_seen: int
    episodes_pending: int
    running_version: str  # "base" for the base checkpoint
    last_error: str
    waiting: str
    skipped_episodes: int
    critic_warning: str
    buffer_sizes: dict[str, int]  # transitions by source, real and sim
    loss: float  # the last round's; NaN before the first
    samples_per_s: float
    last_gate: str = ""  # "<version>: promoted" or "<version>: rejected"
    last_gate_reason: str = ""
    # Requests for a round (request_round) received, and the newest one answered: by a
    # decision, by waiting for arm data (``waiting`` says why) or by a failure.
    requests: int = 0
    requests_answered: int = 0


class OnlineLearner:
    def __init__(
        self,
        config: LearnerConfig,
        on_result: Callable[[RoundResult], None] | None = None,
        evaluator: Evaluator | None = None,
        session_factory: Callable[[], LearnerSession] | None = None,
        *,
        robot,
    ) -> None:
        self.config = config
        self.robot = robot  # the arm the rounds train for (a RobotDescription)
        self.on_result = on_result
        # One pool of sim workers for the learner's life (started at its first use): a
        # pool per screening or adaptation stage paid every worker's imports again.
        self.sim_executor = LocalExecutor(config.screen.workers)
        self.evaluator = evaluator or policy_evaluator(
            config, self._screening_profile, robot=robot, executor=self.sim_executor
        )
        self._session_factory = session_factory or self._default_session
        self._lock = threading.Condition()
        self._next_config: LearnerConfig | None = None
        self._pending: list[EpisodeInfo] = []
        self._force = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.session: LearnerSession | None = None
        self.real: Transitions | None = None
        self.manifest: list[dict] = []
        self.state = "starting"
        self.last_error = ""
        self.last_result: RoundResult | None = None
        self.last_metrics: dict[str, float] = {}
        self.episodes_seen = 0
        self.skipped: list[str] = []
        self.waiting = ""
        self.sources_seen: Counter[str] = Counter()  # announced episodes by source label
        self._requests = 0
        self._answered = 0
        self._loaded: set[str] = set()
        self.real_bags: list[str] = []  # the real episodes identification reads, oldest first
        self._last_round_time = time.monotonic()

    # ------------------------------------------------------------------ caller side
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="learner-rounds", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        with self._lock:
            self._lock.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
        self.sim_executor.close()

    def offer(self, episode: EpisodeInfo) -> None:
        """Queue an announced episode (never blocks on training)."""
        with self._lock:
            self._pending.append(episode)
            self.episodes_seen += 1
            self.sources_seen[episode.source or "(none)"] += 1
            self._lock.notify_all()

    def request_round(self) -> int:
        """Ask for a round now; returns the request's number (see ``status().requests``)."""
        with self._lock:
            self._force = True
            self._requests += 1
            self._lock.notify_all()
            return self._requests

    def status(self) -> LearnerStatus:
        with self._lock:
            pending = len(self._pending)
            requests, answered = self._requests, self._answered
        session = self.session
        sizes: dict[str, int] = {}
        if self.real is not None:
            sizes.update(self.real.counts_by_source())
        if session and session.sim_data is not None:
            for key, value in session.sim_data.counts_by_source().items():
                sizes[key] = sizes.get(key, 0) + value
        last_gate = last_gate_reason = ""
        if self.last_result is not None:
            decision = self.last_result.decision
            last_gate = (
                f"{self.last_result.candidate.version}: "
                f"{'promoted' if decision.promoted else 'rejected'}"
            )
            last_gate_reason = decision.reason
        return LearnerStatus(
            state=self.state,
            round=session.round if session else 0,
            episodes_seen=self.episodes_seen,
            episodes_pending=pending,
            running_version=(session.promotion.running_version if session else None) or "base",
            last_error=self.last_error,
            waiting=self.waiting,
            skipped_episodes=len(self.skipped),
            critic_warning=session.critics.warning if session else "",
            buffer_sizes=sizes,
            loss=self.last_metrics.get("loss", float("nan")),
            samples_per_s=self.last_metrics.get("samples_per_s", float("nan")),
            last_gate=last_gate,
            last_gate_reason=last_gate_reason,
            requests=requests,
            requests_answered=answered,
        )

    def update_config(self, config: LearnerConfig) -> None:
        """Run-time settings: the round triggers see them now, a round from its start (one
        in progress keeps the settings it started with)."""
        with self._lock:
            self.config = self._next_config = config
            self._lock.notify_all()

    # ------------------------------------------------------------------ worker side
    def _default_session(self) -> LearnerSession:
        from simreal_ros.policy.checkpoint import shipped_checkpoint
        from simreal_ros.policy.spec import SpecConverter
        from simreal_ros.training.torch_checkpoint import load_checkpoint

        cfg = self.config
        checkpoint = load_checkpoint(cfg.checkpoint_dir or shipped_checkpoint(cfg.task))
        sim = None
        if cfg.sim_data_dir:
            converter = SpecConverter.for_robot(checkpoint.spec, self.robot)
            sim, _ = load_episodes(cfg.sim_data_dir, checkpoint, converter)
            if sim is not None:
                sim = sim.subset(~sim.real_mask())
        elif cfg.wants_sim_episodes:
            self.state = "collecting sim data"
            sim = collect_sim_transitions(
                checkpoint,
                cfg.task,
                cfg.sim_episodes,
                cfg.seed,
                exploration_std_max=cfg.exploration_std_max,
                robot=self.robot,
            )
        return LearnerSession(
            cfg, checkpoint=checkpoint, sim_data=sim, robot=self.robot,
            executor=self.sim_executor,
        )  # fmt: skip

    def _due(self) -> bool:
        cfg = self.config
        new_real = sum(1 for e in self._pending if e.source in REAL_SOURCES)
        if self._force:  # answered even with no data: the answer then says what is missing
            return True
        if cfg.round_every_episodes and new_real >= cfg.round_every_episodes:
            return True
        waited = time.monotonic() - self._last_round_time
        return bool(
            cfg.round_every_seconds and self._pending and waited >= cfg.round_every_seconds
        )

    def _run(self) -> None:
        try:
            self.session = self._session_factory()
        except Exception as error:
            self.state = "failed"
            self.last_error = f"could not start the learner: {error}"
            log.error(self.last_error)
            return
        self.state = "idle"
        while not self._stop.is_set():
            with self._lock:
                self._lock.wait_for(lambda: self._stop.is_set() or self._due(), timeout=0.5)
                if self._stop.is_set():
                    break
                if not self._due():
                    continue
                batch, self._pending = self._pending, []
                self._force = False
                answers = self._requests
                if self._next_config is not None and self.session is not None:
                    self.session.config, self._next_config = self._next_config, None
            try:
                self._round(batch)
            except Exception as error:  # keep the loop alive; report why the round failed
                self.last_error = f"round failed: {error}"
                log.error("%s\n%s", self.last_error, traceback.format_exc())
            finally:
                self._last_round_time = time.monotonic()
                self.state = "idle"
                with self._lock:
                    self._answered = answers

    def _round(self, episodes: list[EpisodeInfo]) -> None:
        session = self.session
        assert session is not None
        self.state = "loading episodes"
        for episode in episodes:
            if episode.episode_id in self._loaded:
                continue  # announced again (e.g. a loop resuming): its data is already in
            path = Path(episode.bag_path).expanduser()
            try:
                data, manifest = load_episodes(path, session.checkpoint, session.converter)
            except Exception as error:
                self.skipped.append(f"{episode.episode_id}: {error}")
                log.warning("episode %s skipped: %s", episode.episode_id, error)
                continue
            self._loaded.add(episode.episode_id)
            if episode.source in REAL_SOURCES:
                self.real_bags.append(str(path))
            if data is None:
                continue
            self.manifest += manifest
            real = data.subset(data.real_mask())
            sim = data.subset(~data.real_mask())
            if len(real):
                session.critics.annotate(real)  # once per transition, not once per round
                self.real = (
                    real if self.real is None else Transitions.concatenate([self.real, real])
                )
            if len(sim):
                session.add_sim_data(sim)
        if self.real is None or len(self.real) < self.config.min_real_transitions:
            self.waiting = self._waiting_reason()
            log.info(self.waiting)
            return
        self.waiting = ""
        if self.config.identifies_from_bags:
            self.state = "identifying dynamics"
            session.identify(self.real_bags)
        self.state = "training"
        result = session.run_round(
            self.real, self._screening_evaluator, manifest=list(self.manifest)
        )
        self.last_result = result
        self.last_metrics = dict(result.metrics)
        self.last_error = ""
        if self.on_result is not None:
            self.on_result(result)

    def _waiting_reason(self) -> str:
        """Why no round can run: how much arm data there is, and the labels the announced
        episodes carry against the ones that count as the arm's."""
        have = 0 if self.real is None else len(self.real)
        with self._lock:
            seen = dict(self.sources_seen)
        labels = ", ".join(f"{source} {count}" for source, count in sorted(seen.items()))
        announced = (
            f"the {sum(seen.values())} episode(s) announced are labelled {labels}"
            if seen
            else "no episode was announced on /episodes/recorded"
        )
        return (
            f"waiting for data: {have} arm transitions, {self.config.min_real_transitions} "
            f"needed (min_real_transitions); {announced}; the learner trains on episodes "
            f"labelled {', '.join(REAL_SOURCES)}. Record episodes on the arm, or on a "
            "stand-in whose profile says stand_in: true."
        )

    def _screening_profile(self) -> str:
        return self.session.screening_profile if self.session else self.config.screen.profile

    def _screening_evaluator(self, *args):
        self.state = "screening"
        return self.evaluator(*args)

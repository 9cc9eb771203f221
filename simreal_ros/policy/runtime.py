"""The versions a running policy can switch between, without ROS: the policy node adapts it.

``PolicyVersions`` loads the base checkpoint, keeps the adapter store the learner writes
(scoped to the robot and base), merges versions on its own loader thread (checksum,
conventions, numpy LoRA merge), caches the newest ones so a rollback is a reference swap,
and follows the store's history for ~/rollback: the store picks the version, it is loaded,
and only then activated in the store and made the running one. A refusal changes neither.

``running`` is read once per control tick; it is replaced whole, so a new version takes
over between two ticks.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from simreal_ros import stats
from simreal_ros.adapters.store import (
    BASE,
    ROLLBACK,
    AdapterStore,
    StoredVersion,
    foreign_version_reason,
    scoped_store_root,
)
from simreal_ros.policy import checkpoint as ckpt
from simreal_ros.policy.inference import DeployedPolicy, deploy_adapter, deploy_base
from simreal_ros.policy.spec import SpecConverter
from simreal_ros.robot.kinematics import ToolKinematics

MAX_CACHED_VERSIONS = 8
ROLLBACK_LOAD_TIMEOUT_S = 30.0


class PolicyVersions:
    """``warn(text)`` reports what is skipped without failing (a foreign or broken adapter
    in the store); errors are raised, or kept in ``last_error`` where the caller goes on."""

    def __init__(self, robot, warn: Callable[[str], None]) -> None:
        self.robot = robot
        self._warn = warn
        self._loader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="policy-loader")
        self._lock = threading.Lock()  # guards the version tables, not the control path
        self.checkpoint: ckpt.NumpyCheckpoint | None = None
        self.checkpoint_path: Path | None = None
        self.store: AdapterStore | None = None
        self.running: DeployedPolicy | None = None
        self.cache: collections.OrderedDict[str, DeployedPolicy] = collections.OrderedDict()
        self._announced: dict[str, tuple[str, str]] = {}  # version -> (dir, sha256)
        self.last_error = ""
        self.swaps = 0

    # --- configure and release ------------------------------------------------------------

    def configure(
        self, directory: Path, control_rate_hz: float | None, adapter_store: str
    ) -> DeployedPolicy:
        """Load the base (its conventions checked against the robot and the rate), open the
        store, merge the adapters it keeps and start with its current version. Raises,
        changing nothing, when the base cannot run."""
        checkpoint = ckpt.load_numpy_checkpoint(
            directory, description=self.robot, control_rate_hz=control_rate_hz
        )
        # This node's arm, passed on: the converter never falls back to the process's arm.
        kinematics = (
            ToolKinematics.for_robot(self.robot) if checkpoint.spec.needs_kinematics else None
        )
        base = deploy_base(checkpoint, kinematics)
        root = (
            scoped_store_root(adapter_store, self.robot.name, checkpoint.metadata)
            if adapter_store
            else None
        )
        self.checkpoint, self.checkpoint_path = checkpoint, directory
        with self._lock:
            self.cache.clear()
            self.cache[base.version] = base
        self.running = base
        self.store = AdapterStore(root) if root is not None else None
        # Before any tick runs: merge the adapters kept on disk, so rollbacks are swaps.
        self._preload_store()
        self.running = self._store_current(base)
        return self.running

    def release(self) -> None:
        self.running = None
        self.checkpoint = None
        with self._lock:
            self.cache.clear()
            self._announced.clear()
        self.store = None

    def shutdown(self) -> None:
        self._loader.shutdown(wait=True, cancel_futures=True)

    # --- loading -------------------------------------------------------------------------

    def announce(self, version: str, adapter_dir: str, checksum: str) -> Future:
        """A promoted adapter from the learner: merged on the loader thread; the future
        gives the runnable version (``activate`` it) or the reason it was refused."""
        with self._lock:
            self._announced[version] = (adapter_dir, checksum)
        return self._loader.submit(self.load, version)

    def load(self, version: str) -> DeployedPolicy:
        """A runnable version: a cache hit, or an adapter merged into the base."""
        with self._lock:
            cached = self.cache.get(version)
            known = self._announced.get(version)
        expected = known[1] if known else ""
        if cached is not None:
            if expected and cached.adapter_sha256 and expected != cached.adapter_sha256:
                raise ckpt.CheckpointError(
                    f"checksum: {version} was announced with sha256 {expected[:16]}… but the "
                    f"adapter on disk has {cached.adapter_sha256[:16]}…; refusing it."
                )
            return cached
        checkpoint = self.checkpoint
        if checkpoint is None:
            raise ckpt.CheckpointError("the node is not configured; no base to merge into.")
        if known is None:
            stored = self._stored(version)
            known = (str(stored.path), stored.checksum)
        adapter_dir, checksum = known
        running = self.running
        if running is not None:
            converter = running.converter
        else:
            converter = SpecConverter.for_robot(checkpoint.spec, self.robot)
        deployed = deploy_adapter(
            checkpoint,
            adapter_dir,
            version,
            expected_sha256=checksum or None,
            forward_kinematics=converter.forward_kinematics,
            description=self.robot,
        )
        with self._lock:
            self.cache[version] = deployed
            while len(self.cache) > MAX_CACHED_VERSIONS:
                oldest = next(v for v in self.cache if v != checkpoint.version)
                del self.cache[oldest]
        return deployed

    def activate(self, deployed: DeployedPolicy) -> bool:
        """Make ``deployed`` the running version (one reference swap)."""
        if self.checkpoint is None:
            return False
        self.running = deployed
        self.swaps += 1
        self.last_error = ""
        return True

    def finish_swap(self, future: Future) -> tuple[bool, str]:
        """Activate what an ``announce`` future loaded: (done, what to log). A refusal keeps
        the running version and says why (also in ``last_error``)."""
        try:
            deployed = future.result()
        except Exception as error:  # keep running the current policy, say why
            self.last_error = f"update refused, still running {self.active_version}: {error}"
            return False, self.last_error
        if not self.activate(deployed):
            return False, f"{deployed.version} loaded after the node was cleaned up; not run"
        return True, f"now running {deployed.version} ({self.source})"

    def rollback_request(self, requested: str) -> tuple[bool, str]:
        """~/rollback: (done, message). A refusal keeps the running version and the store
        as they were and says why (also in ``last_error``)."""
        current = self.active_version
        try:
            _, version = self.rollback(requested)
        except Exception as error:  # keep running the current policy, say why
            wanted = requested or "the version before"
            self.last_error = f"rollback to {wanted} refused, still running {current}: {error}"
            return False, self.last_error
        return True, f"rolled back from {current} to {version}; now running {self.source}"

    def rollback(self, requested: str) -> tuple[str, str]:
        """Follow the store's history: ``requested`` (empty: the version before; the base's
        name or ``base``: the base). Returns (from, to); raises with the reason, leaving
        the running version and the store as they were."""
        current, checkpoint, store = self.active_version, self.checkpoint, self.store
        if checkpoint is None:
            raise ckpt.CheckpointError("not configured: configure the node before rolling back.")
        if store is None:
            raise ckpt.CheckpointError(
                "no adapter_store is set; ~/rollback follows the adapter store's history "
                "(active.json): set adapter_store to the learner's store_root."
            )
        # The base checkpoint is the store's None (no adapter).
        target = (
            None
            if requested in (checkpoint.version, BASE)
            else store.rollback_target(requested or None)
        )
        version = target or checkpoint.version
        # Preloaded and swapped-from versions are cached: a reference swap. Anything else is
        # merged here (tens of ms), on the loader thread like every merge.
        deployed = self._loader.submit(self.load, version).result(timeout=ROLLBACK_LOAD_TIMEOUT_S)
        store.activate(target, ROLLBACK)
        self.activate(deployed)
        return current, version

    # --- the store -----------------------------------------------------------------------

    def _preload_store(self) -> None:
        """Merge the newest versions the store keeps (rejected ones never run)."""
        if self.store is None:
            return
        kept = []
        for item in self.store.list():
            reason = self.foreign_reason(item)
            if reason:
                self._warn(f"not offered: {reason}")
            elif not item.rejected:
                kept.append(item.version)
        for version in kept[-(MAX_CACHED_VERSIONS - 1) :]:
            try:
                self.load(version)
            except Exception as error:  # a broken adapter on disk must not stop the node
                self._warn(f"adapter {version} in the store not loadable: {error}")

    def _store_current(self, base: DeployedPolicy) -> DeployedPolicy:
        """What the store says runs (its active.json), or the base if it names none or that
        version cannot be loaded (the base is the safe fallback; ``last_error`` says why)."""
        try:
            version = self.store.current() if self.store is not None else None
            return base if version is None else self.load(version)
        except Exception as error:
            self.last_error = f"the store's current version not loadable, running base: {error}"
            return base

    def _stored(self, version: str) -> StoredVersion:
        """``version`` from the store, checked (complete, intact, not rejected, made for this
        robot and base)."""
        if self.store is None:
            raise ckpt.CheckpointError(
                f"version {version!r} was never announced on /learner/policy_update and no "
                "adapter_store is set to find it in."
            )
        stored = self.store.runnable(version)
        reason = self.foreign_reason(stored)
        if reason:
            raise ckpt.CheckpointError(reason)
        return stored

    def foreign_reason(self, stored: StoredVersion) -> str:
        checkpoint = self.checkpoint
        if checkpoint is None:
            return ""
        return foreign_version_reason(stored, checkpoint.metadata, self.robot)

    # --- what runs -----------------------------------------------------------------------

    @property
    def active_version(self) -> str:
        running = self.running
        return running.version if running is not None else ""

    def summary(self) -> str:
        """What runs, with the base's conventions and the store (for the node's log)."""
        spec = self.checkpoint.spec if self.checkpoint is not None else None
        if spec is None:
            return self.source
        store = self.store.root if self.store else "none"
        return (
            f"{self.source} ({spec.task}, {spec.control_rate_hz:g} Hz, {spec.action_mode} "
            f"actions; adapter store {store})"
        )

    @property
    def source(self) -> str:
        """What runs and where it came from: the base checkpoint or an adapter's path."""
        running, checkpoint = self.running, self.checkpoint
        if running is None or checkpoint is None:
            return "nothing (not configured)"
        base = f"base {checkpoint.version} from {self.checkpoint_path}"
        if running.version == checkpoint.version:
            return base
        with self._lock:
            path = self._announced.get(running.version, ("", ""))[0]
        if not path and self.store is not None:
            path = str(self.store.root / running.version)
        return f"adapter {running.version} from {path} on {base}"


class ControlTicks:
    """The control tick's grid and counts. ``sequence`` of a tick is its index on the grid
    of the control period from activation, so a gap in published sequences is a missed
    tick; the counts and inference times feed /diagnostics."""

    def __init__(self, samples: int = 2000) -> None:
        self.period_ns = 0
        self.origin_ns = 0
        self.last_sequence = -1
        self.ticks = self.missed = self.skipped_waiting = self.skipped_stale = 0
        self.act_errors = 0
        self.inference_us: collections.deque[float] = collections.deque(maxlen=samples)

    def start(self, origin_ns: int) -> None:
        self.origin_ns, self.last_sequence = origin_ns, -1

    def next_sequence(self, now_ns: int) -> int:
        sequence = max((now_ns - self.origin_ns) // self.period_ns, self.last_sequence + 1)
        if self.last_sequence >= 0 and sequence > self.last_sequence + 1:
            self.missed += sequence - self.last_sequence - 1
        self.last_sequence = sequence
        self.ticks += 1
        return int(sequence)

    def observations_ready(self, have_all: bool, age_s: float, max_age_s: float) -> bool:
        """Whether this tick may act: every observation seen once, the joints and the
        object pose fresh (``age_s``: the older's age; counted as skipped otherwise)."""
        if not have_all:
            self.skipped_waiting += 1
            return False
        if age_s > max_age_s:
            self.skipped_stale += 1
            return False
        return True

    def statistics(self) -> dict[str, float]:
        samples = list(self.inference_us)
        return {
            "ticks": self.ticks,
            "missed_ticks": self.missed,
            "skipped_waiting_for_observations": self.skipped_waiting,
            "skipped_stale_observation": self.skipped_stale,
            "inference_p50_us": stats.percentile(samples, 50),
            "inference_p99_us": stats.percentile(samples, 99),
        }


def diagnostic_report(
    state: str, versions: PolicyVersions, numbers: dict[str, float]
) -> tuple[bool, str, dict[str, str]]:
    """(healthy, message, values) of a policy node for /diagnostics: what runs, from where,
    ``numbers`` (the tick counts and observation ages) and the last refusal (a warning)."""
    values = {
        "state": state,
        "version": versions.active_version,
        "version_source": versions.source,
        "adapter_store": str(versions.store.root) if versions.store else "",
    }
    values.update({k: f"{v:.1f}" if isinstance(v, float) else str(v) for k, v in numbers.items()})
    values["last_error"] = versions.last_error
    missed = numbers.get("missed_ticks", 0)
    if versions.last_error:
        return False, versions.last_error, values
    if state != "active":
        return True, state, values
    if missed or numbers.get("skipped_stale_observation", 0):
        return False, f"running {versions.active_version}; missed {missed} tick(s)", values
    return True, f"running {versions.source}", values

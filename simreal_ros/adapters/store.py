"""Versioned adapter store: ``<root>/<version>/`` written whole or not at all.

Each version directory holds the peft adapter (``adapter_config.json``,
``adapter_model.safetensors``), ``simreal_adapter.json`` (base and parent versions, spec
fingerprint, data manifest, hyperparameters, method), ``screening.json`` (the gate's
numbers and decision) and ``MANIFEST.json`` (SHA-256 of every other file).

Atomicity: a version is assembled in a hidden staging directory under the root and
``os.rename``d into place only when complete and fsynced; the MANIFEST is written last.
A kill at any moment therefore leaves either no new version (staging debris, ignored and
cleaned up later) or a complete one. ``active.json`` (which version runs, and the history
of activations for rollback) is replaced atomically too.

A directory without a MANIFEST is not a version of the store (a half-written one, or one
placed by hand): it is never listed, loaded or activated. A version whose screening
rejected it is kept with its numbers but is never made the running one.

One store per arm and base: a configured store root may hold ``{robot}`` and ``{base}``
(the shipped configs' ``~/.simreal/adapters/{robot}/{base}`` do), filled in by
``scoped_store_root`` from the running robot and base checkpoint, so an adapter trained
for another arm or base is never offered to a graph. ``foreign_version_reason`` says,
naming both sides, why a version from an unscoped root does not belong to a base.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from simreal_ros.atomic_files import fsync_directory, write_json_atomic
from simreal_ros.checksum import sha256_file

MANIFEST = "MANIFEST.json"
SCREENING = "screening.json"
METADATA = "simreal_adapter.json"
ACTIVE = "active.json"
ROLLBACK = "rollback"  # the reason of an activation that is not a step forward
STAGING_PREFIX = ".staging-"
VERSION_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


STORE_PLACEHOLDERS = ("{robot}", "{base}")
# Where `simreal learn`, `simreal models` and the graph's policy and learner meet.
DEFAULT_STORE_ROOT = "~/.simreal/adapters/{robot}/{base}"
BASE = "base"  # the name of the base checkpoint (no adapter) in rollbacks


def base_key(metadata: Mapping[str, Any]) -> str:
    """A base checkpoint's name in a store path, from its metadata (``policy.json``): its
    version and conventions' fingerprint (two bases that share a version name but not their
    conventions get two stores)."""
    version = re.sub(r"[^A-Za-z0-9._-]", "_", str(metadata.get("version", "base")))
    return f"{version}-{str(metadata.get('spec_fingerprint', ''))[:10]}"


def scoped_store_root(root: str | Path, robot_name: str, base_metadata: Mapping[str, Any]) -> Path:
    """``root`` with ``{robot}`` and ``{base}`` filled in (a root without them unchanged)."""
    text = str(root)
    if "{robot}" in text:
        text = text.replace("{robot}", re.sub(r"[^A-Za-z0-9._-]", "_", robot_name))
    if "{base}" in text:
        text = text.replace("{base}", base_key(base_metadata))
    return Path(text).expanduser()


def _lora_input_sizes(path: Path) -> dict[str, int]:
    """Input width of each adapted layer, from the safetensors header (no weights read)."""
    try:
        with open(path / "adapter_model.safetensors", "rb") as stream:
            size = int.from_bytes(stream.read(8), "little")
            header = json.loads(stream.read(size))
    except (OSError, ValueError):
        return {}
    return {
        key.split(".lora_A")[0]: int(entry["shape"][1])
        for key, entry in header.items()
        if ".lora_A" in key and isinstance(entry, dict) and len(entry.get("shape", ())) == 2
    }


def foreign_version_reason(stored: StoredVersion, base_metadata: dict[str, Any], robot) -> str:
    """Why ``stored`` cannot run on this base and robot ('' when it can), naming both
    sides by robot, joint names and layer shapes."""
    trained = stored.metadata.get("spec_fingerprint")
    running = base_metadata.get("spec_fingerprint")
    if trained in (None, running):
        return ""
    theirs = stored.metadata.get("joint_names")
    inputs = _lora_input_sizes(stored.path)
    first = next(iter(sorted(inputs)), "")
    their_side = (
        f"robot {stored.metadata.get('robot', 'not recorded')!r}, "
        + (f"{len(theirs)} joints {list(theirs)}, " if theirs else "joints not recorded, ")
        + f"base {stored.metadata.get('base_version')!r} (conventions {str(trained)[:10]})"
        + (f", first adapted layer {first} takes {inputs[first]} inputs" if first else "")
    )
    ours = list(getattr(robot, "joint_names", ()))
    obs_dim = (base_metadata.get("architecture") or {}).get("obs_dim")
    our_side = (
        f"robot {getattr(robot, 'name', '?')!r}, {len(ours)} joints {ours}, base "
        f"{base_metadata.get('version')!r} (conventions {str(running)[:10]})"
        + (f", actor input {obs_dim}" if obs_dim else "")
    )
    return (
        f"adapter {stored.version} in {stored.path.parent} was trained for {their_side}; "
        f"this graph runs {our_side}. Give each arm and base its own store (a store root "
        "with {robot}/{base}, the default) or train an adapter for this base."
    )


class StoreError(ValueError):
    """A store operation that cannot be done; the message says why and what to do."""


@dataclasses.dataclass
class StoredVersion:
    version: str
    path: Path
    metadata: dict[str, Any]
    screening: dict[str, Any]
    manifest: dict[str, Any]

    @property
    def parent_version(self) -> str | None:
        return self.metadata.get("parent_version")

    @property
    def promoted(self) -> bool:
        return bool(self.screening.get("promoted", False))

    @property
    def rejected(self) -> bool:
        """Screened and not promoted (a version stored without a decision is not)."""
        return self.screening.get("promoted") is False

    @property
    def checksum(self) -> str:
        return str(self.manifest["files"].get("adapter_model.safetensors", ""))


class AdapterStore:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).expanduser()

    # ------------------------------------------------------------------ writing
    def next_version(self, prefix: str = "v") -> str:
        numbers = [0]
        if self.root.is_dir():
            for item in self.root.iterdir():
                match = re.fullmatch(re.escape(prefix) + r"(\d+)", item.name)
                if match:
                    numbers.append(int(match.group(1)))
        return f"{prefix}{max(numbers) + 1:04d}"

    def new_staging(self, version: str) -> Path:
        """A private directory to assemble ``version`` in (commit it, or ``discard`` it)."""
        self._check_version_name(version)
        if (self.root / version).exists():
            raise StoreError(
                f"version {version} already exists in {self.root}; versions are immutable."
            )
        self.root.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{version}.", dir=self.root))

    @staticmethod
    def discard(staging: Path) -> None:
        if Path(staging).exists():
            shutil.rmtree(staging, ignore_errors=True)

    @contextlib.contextmanager
    def staging(self, version: str):
        """``new_staging`` as a context: removed on exit unless committed."""
        path = self.new_staging(version)
        try:
            yield path
        finally:
            self.discard(path)

    def commit(
        self,
        staging: Path,
        version: str,
        metadata: dict[str, Any],
        screening: dict[str, Any] | None = None,
        after_each_file: Callable[[str], None] | None = None,
        *,
        robot,
    ) -> StoredVersion:
        """Finish a staged version (metadata, screening, manifest) and rename it into place.

        ``robot``: the arm it belongs to (a ``RobotDescription``), recorded unless
        ``metadata`` names one; ``after_each_file`` is a test hook called after each file
        is written.
        """
        self._check_version_name(version)
        staging = Path(staging)
        if staging.parent.resolve() != self.root.resolve():
            raise StoreError("the staging directory must come from AdapterStore.staging().")
        if not (staging / "adapter_model.safetensors").is_file():
            raise StoreError(f"staged version {version} has no adapter_model.safetensors.")
        metadata = {**metadata, "version": version}
        if "robot" not in metadata:  # which arm it belongs to, for a refusal to name
            metadata.update(robot=robot.name, joint_names=list(robot.joint_names))
        for name, data in ((METADATA, metadata), (SCREENING, screening or {})):
            write_json_atomic(staging / name, data, sort_keys=True)
            if after_each_file:
                after_each_file(name)
        files = {}
        for item in sorted(staging.iterdir()):
            if item.is_file() and item.name != MANIFEST and not item.name.startswith("."):
                files[item.name] = sha256_file(item)
                with open(item, "rb") as stream:
                    os.fsync(stream.fileno())
        manifest = {"version": version, "files": files, "created": time.time()}
        write_json_atomic(staging / MANIFEST, manifest, sort_keys=True)
        if after_each_file:
            after_each_file(MANIFEST)
        target = self.root / version
        if target.exists():
            raise StoreError(f"version {version} appeared in {self.root} while staging.")
        os.rename(staging, target)
        fsync_directory(self.root)
        if after_each_file:
            after_each_file("rename")
        return self.load(version)

    def clean_staging(self) -> list[str]:
        """Remove debris of saves that were killed before their rename."""
        removed = []
        if self.root.is_dir():
            for item in self.root.iterdir():
                if item.name.startswith(STAGING_PREFIX) and item.is_dir():
                    shutil.rmtree(item, ignore_errors=True)
                    removed.append(item.name)
        return removed

    # ------------------------------------------------------------------ reading
    def load(self, version: str, verify: bool = True) -> StoredVersion:
        self._check_version_name(version)
        path = self.root / version
        if not path.is_dir():
            known = ", ".join(self.versions()) or "none"
            raise StoreError(f"version {version!r} is not in {self.root} (kept: {known}).")
        if not (path / MANIFEST).is_file():
            raise StoreError(
                f"{path} has no {MANIFEST}: it is not a version of the adapter store (only "
                "versions the learner commits are); commit it with the learner or remove it."
            )
        try:
            manifest = json.loads((path / MANIFEST).read_text())
            metadata = json.loads((path / METADATA).read_text())
            screening = json.loads((path / SCREENING).read_text())
        except (OSError, json.JSONDecodeError) as error:
            raise StoreError(f"version {version} in {self.root} is incomplete: {error}") from error
        if verify:
            for name, expected in manifest.get("files", {}).items():
                file = path / name
                if not file.is_file() or sha256_file(file) != expected:
                    raise StoreError(
                        f"version {version}: {name} is missing or does not match its checksum; "
                        "the files were modified. Roll back to another version."
                    )
        return StoredVersion(version, path, metadata, screening, manifest)

    def versions(self) -> list[str]:
        """Complete versions (with a MANIFEST), oldest first."""
        if not self.root.is_dir():
            return []
        items = [
            p
            for p in self.root.iterdir()
            if p.is_dir() and not p.name.startswith(".") and (p / MANIFEST).is_file()
        ]
        items.sort(
            key=lambda p: (json.loads((p / MANIFEST).read_text()).get("created", 0), p.name)
        )
        return [p.name for p in items]

    def list(self) -> list[StoredVersion]:
        out = []
        for version in self.versions():
            with contextlib.suppress(StoreError):
                out.append(self.load(version, verify=False))
        return out

    def runnable(self, version: str) -> StoredVersion:
        """``version`` loaded and checked, if it may be made the running one."""
        stored = self.load(version)
        if stored.rejected:
            reason = stored.screening.get("reason", "")
            raise StoreError(
                f"version {version} was rejected by screening"
                + (f" ({reason})" if reason else "")
                + "; it never runs. Roll back to a promoted version or the base."
            )
        return stored

    # ------------------------------------------------------------------ activation
    def active(self) -> dict[str, Any]:
        path = self.root / ACTIVE
        if not path.is_file():
            return {"current": None, "history": []}
        return json.loads(path.read_text())

    def current(self) -> str | None:
        return self.active().get("current")

    def activate(self, version: str | None, reason: str) -> dict[str, Any]:
        """Make ``version`` (None = the base checkpoint, no adapter) the running one."""
        if version is not None:
            self.runnable(version)  # refuses a missing, damaged or rejected version
        state = self.active()
        history = list(state.get("history", []))
        history.append({"version": version, "reason": reason, "time": time.time()})
        state = {"current": version, "history": history}
        self.root.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.root / ACTIVE, state, sort_keys=True)
        return state

    def rollback(self, version: str | None = None) -> str | None:
        """Activate ``version``, or with None the version that ran before the current one."""
        target = self.rollback_target(version)
        self.activate(target, ROLLBACK)
        return target

    def rollback_target(self, version: str | None = None) -> str | None:
        """What ``rollback(version)`` would activate (None: the base checkpoint), checked
        but not activated, so a caller can prepare it first and then
        ``activate(target, ROLLBACK)``."""
        if version == BASE:
            return None
        if version:
            return self.runnable(version).version
        # Step back along the promotions (rollbacks themselves are not steps), so
        # repeated rollbacks walk further back instead of toggling.
        current = self.current()
        # The base checkpoint (None) ran before any adapter.
        history = self.active().get("history", [])
        chain = [None] + [e["version"] for e in history if e["reason"] != ROLLBACK]
        if current in chain:
            position = len(chain) - 1 - chain[::-1].index(current)
            for earlier in reversed(chain[:position]):
                if earlier != current:
                    return earlier
        raise StoreError(f"there is no earlier version than {current!r} to roll back to.")

    @staticmethod
    def _check_version_name(version: str) -> None:
        if not VERSION_PATTERN.match(version or ""):
            raise StoreError(
                f"version name {version!r} is not allowed; use letters, digits, '.', '_' or '-'."
            )

"""Checkpoints: safetensors weights plus JSON metadata, validated before anything runs.

A checkpoint is a directory::

    policy.json          format, version, parent version, architecture, spec (joint names
                         and order, units, action mode/scale/range, control rate,
                         observation layout and normalisation), gamma, training
                         provenance, evaluation, sha256 of each weight file
    actor.safetensors    the actor (what the policy node runs)
    critic.safetensors   twin critics (V_sim for SGFT)

Loading checks the checksums before parsing any weights, reads only safetensors (never
pickle), checks tensor names and shapes against the architecture, and, given the robot
description, refuses a conventions mismatch with a message naming the field.
``load_numpy_checkpoint`` does the same checks and reads the actor with safetensors' numpy
backend: it never imports torch (about a second), which only training needs.

LoRA adapters (peft format: ``adapter_config.json`` + ``adapter_model.safetensors``, plus
our ``simreal_adapter.json`` naming the base version and spec fingerprint) are merged in
numpy by ``lora_merge`` (no torch, no peft); ``learner.lora.load_actor_with_adapter`` and
``apply_adapter`` load that merge into a torch ``Actor`` for training.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from simreal_ros import resources
from simreal_ros.policy.checksum import sha256_file
from simreal_ros.policy.spec import PolicySpec, validate_against_robot

if TYPE_CHECKING:  # torch is imported where weights become torch tensors, not here
    import torch

    from simreal_ros.policy.model import ActorCritic, Architecture

FORMAT = "simreal_ros.policy/1"
METADATA_FILE = "policy.json"
ACTOR_FILE = "actor.safetensors"
CRITIC_FILE = "critic.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_METADATA = "simreal_adapter.json"


class CheckpointError(ValueError):
    """A checkpoint or adapter that must not be run; the message says why and what to do."""


@dataclasses.dataclass
class PolicyCheckpoint:
    path: Path | None
    version: str
    parent_version: str | None
    spec: PolicySpec
    arch: Architecture
    gamma: float
    model: ActorCritic
    metadata: dict[str, Any]


@dataclasses.dataclass
class NumpyCheckpoint:
    """A base checkpoint's actor as numpy arrays, checked like ``load_checkpoint``.

    What the policy node runs, adapters merged in numpy: no torch. ``torch_checkpoint()``
    builds the torch model from these same (already verified) arrays when one is needed.
    """

    path: Path
    version: str
    parent_version: str | None
    spec: PolicySpec
    gamma: float
    actor_state: dict[str, np.ndarray]  # model.Actor's state_dict names, float32
    metadata: dict[str, Any]
    _torch: PolicyCheckpoint | None = dataclasses.field(
        default=None, init=False, repr=False, compare=False
    )
    _lock: threading.Lock = dataclasses.field(
        default_factory=threading.Lock, init=False, repr=False, compare=False
    )

    def torch_checkpoint(self) -> PolicyCheckpoint:
        """The same base as a ``PolicyCheckpoint`` with a torch model (built once)."""
        with self._lock:
            if self._torch is None:
                import torch

                from simreal_ros.policy.model import ActorCritic, Architecture

                arch = Architecture.from_dict(self.metadata["architecture"])
                model = ActorCritic(arch)
                state = {k: torch.from_numpy(np.array(v)) for k, v in self.actor_state.items()}
                _load_state(model.actor, state, ACTOR_FILE)
                model.eval()
                self._torch = PolicyCheckpoint(
                    path=self.path,
                    version=self.version,
                    parent_version=self.parent_version,
                    spec=self.spec,
                    arch=arch,
                    gamma=self.gamma,
                    model=model,
                    metadata=self.metadata,
                )
            return self._torch


def shipped_checkpoint(task: str, robot: Any = None) -> Path:
    """The base checkpoint shipped for ``task`` on ``robot`` (None: this process's arm).

    The first arm's are ``checkpoints/<task>``, another shipped arm's
    ``checkpoints/<arm>/<task>`` (checkout or installed share directory); a user's arm may
    keep its own in ``checkpoints/<task>`` beside its robot.yaml.
    """
    from simreal_ros.robot.description import DEFAULT_ROBOT, load_robot_description

    description = robot if hasattr(robot, "joint_names") else load_robot_description(robot)
    if description.name == DEFAULT_ROBOT:
        return resources.data_path("checkpoints", task)
    if description.source is not None:
        own = description.source.parent / "checkpoints" / task
        if own.is_dir():
            return own
    path = resources.data_path("checkpoints", description.name, task)
    if not path.is_dir():
        raise FileNotFoundError(
            f"no {task} checkpoint is shipped for the robot {description.name!r} (looked in "
            f"{path}); pretrain one (simreal pretrain --robot ... --task {task}) and give "
            "its directory as the checkpoint."
        )
    return path


def save_checkpoint(
    directory: str | Path,
    model: ActorCritic,
    spec: PolicySpec,
    *,
    version: str,
    gamma: float,
    training: dict[str, Any],
    parent_version: str | None = None,
    evaluation: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Write a checkpoint atomically (a temporary directory renamed into place)."""
    from safetensors.torch import save_file

    directory = Path(directory)
    if model.arch.obs_dim != spec.obs_dim or model.arch.act_dim != spec.act_dim:
        raise ValueError(
            f"model dims ({model.arch.obs_dim}, {model.arch.act_dim}) do not match the spec "
            f"({spec.obs_dim}, {spec.act_dim})."
        )
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
    staging.chmod(0o755)  # mkdtemp makes it private; a checkpoint is meant to be shared
    try:
        tensors = {
            ACTOR_FILE: {k: v.detach().contiguous() for k, v in model.actor.state_dict().items()},
            CRITIC_FILE: {
                k: v.detach().contiguous() for k, v in model.critic.state_dict().items()
            },
        }
        files = {}
        for name, state in tensors.items():
            save_file(state, str(staging / name), metadata={"format": FORMAT})
            (staging / name).chmod(0o644)
            files[name] = sha256_file(staging / name)
        metadata = {
            "format": FORMAT,
            "version": version,
            "parent_version": parent_version,
            "architecture": model.arch.to_dict(),
            "spec": spec.to_dict(),
            "spec_fingerprint": spec.fingerprint(),
            "gamma": gamma,
            "training": training,
            "evaluation": evaluation or {},
            "files": files,
            **(extra or {}),
        }
        (staging / METADATA_FILE).write_text(json.dumps(metadata, indent=2) + "\n")
        if directory.exists():
            # Rewrite in place, metadata last: a crash in between leaves checksums that do
            # not match, which loading refuses. Other files (README.md, train_state/) stay.
            for name in (ACTOR_FILE, CRITIC_FILE, METADATA_FILE):
                os.replace(staging / name, directory / name)
        else:
            os.replace(staging, directory)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return directory


def update_metadata(directory: str | Path, **fields: Any) -> None:
    """Add or replace top-level metadata fields (e.g. evaluation) without touching weights."""
    from simreal_ros.atomic_files import write_json_atomic

    path = Path(directory) / METADATA_FILE
    metadata = json.loads(path.read_text())
    metadata.update(fields)
    write_json_atomic(path, metadata)


def read_metadata(directory: str | Path) -> dict[str, Any]:
    directory = Path(directory)
    path = directory / METADATA_FILE
    if not directory.is_dir():
        raise CheckpointError(f"checkpoint {directory} is not a directory; give a checkpoint dir.")
    if not path.is_file():
        raise CheckpointError(
            f"checkpoint {directory} has no {METADATA_FILE}; is it a checkpoint?"
        )
    try:
        metadata = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CheckpointError(
            f"{path} is not valid JSON ({error}); the file is damaged."
        ) from error
    if metadata.get("format") != FORMAT:
        raise CheckpointError(
            f"format: {path} says {metadata.get('format')!r}; this loader reads {FORMAT!r}."
        )
    return metadata


def verified_tensors(
    path: Path, expected_sha256: str | None, what: str
) -> dict[str, torch.Tensor]:
    """Load a safetensors file after checking its SHA-256 (refuses other formats)."""
    from safetensors.torch import load_file

    return _verified_safetensors(path, expected_sha256, what, load_file)


def verified_arrays(path: Path, expected_sha256: str | None, what: str) -> dict[str, np.ndarray]:
    """``verified_tensors`` with safetensors' numpy backend: the same checks, no torch."""
    from safetensors.numpy import load_file

    return _verified_safetensors(path, expected_sha256, what, load_file)


def _verified_safetensors(
    path: Path, expected_sha256: str | None, what: str, load_file: Callable[[str], dict]
) -> dict:
    if path.suffix != ".safetensors":
        raise CheckpointError(f"{what}: {path.name} is not a .safetensors file; refusing to load.")
    if not path.is_file():
        raise CheckpointError(f"{what}: {path} is missing.")
    if expected_sha256 is not None:
        actual = sha256_file(path)
        if actual != expected_sha256:
            raise CheckpointError(
                f"checksum: {path} has sha256 {actual[:16]}… but {expected_sha256[:16]}… was "
                "recorded; the file is truncated or was modified. Restore it from its source."
            )
    try:
        return load_file(str(path))
    except Exception as error:  # safetensors raises its own error types
        raise CheckpointError(
            f"{what}: {path} is not a readable safetensors file: {error}"
        ) from error


def _check_shapes(expected: Mapping[str, tuple[int, ...]], state: Mapping, what: str) -> None:
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise CheckpointError(
            f"architecture: {what} weights do not fit the recorded architecture "
            f"(missing {missing[:4]}, unexpected {unexpected[:4]})."
        )
    for name, tensor in state.items():
        if tuple(tensor.shape) != tuple(expected[name]):
            raise CheckpointError(
                f"architecture: {what} tensor {name} has shape {tuple(tensor.shape)}, the "
                f"architecture needs {tuple(expected[name])}."
            )


def _load_state(module: torch.nn.Module, state: dict[str, torch.Tensor], what: str) -> None:
    import torch

    expected = {k: tuple(v.shape) for k, v in module.state_dict().items()}
    _check_shapes(expected, state, what)
    module.load_state_dict({k: v.to(torch.float32) for k, v in state.items()})


def actor_shapes(architecture: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """Tensor names and shapes of ``model.Actor``'s state_dict for a recorded architecture
    (``policy.json``'s dict), without building the module: what the numpy loader checks.

    Refuses what ``Architecture.from_dict`` refuses (KeyError, TypeError, ValueError).
    """
    if architecture.get("activation", "relu") != "relu":
        raise ValueError(f"architecture.activation = {architecture['activation']!r}; only relu.")
    obs_dim, act_dim = int(architecture["obs_dim"]), int(architecture["act_dim"])
    hidden = {k: [int(h) for h in architecture[k]] for k in ("actor_hidden", "critic_hidden")}
    sizes = [obs_dim, *hidden["actor_hidden"]]
    shapes: dict[str, tuple[int, ...]] = {}
    for i in range(len(sizes) - 1):  # trunk: Linear, ReLU, Linear, ReLU, ...
        shapes[f"trunk.{2 * i}.weight"] = (sizes[i + 1], sizes[i])
        shapes[f"trunk.{2 * i}.bias"] = (sizes[i + 1],)
    for head in ("mean_head", "log_std_head"):
        shapes[f"{head}.weight"] = (act_dim, sizes[-1])
        shapes[f"{head}.bias"] = (act_dim,)
    return shapes


def load_checkpoint(
    directory: str | Path,
    description: Any = None,
    control_rate_hz: float | None = None,
    with_critic: bool = True,
    joint_units: Any = None,
) -> PolicyCheckpoint:
    """Load and validate a checkpoint; with ``description``, check it fits that robot."""
    from simreal_ros.policy.model import ActorCritic, Architecture

    directory = Path(directory)
    header = _validated_metadata(directory, description, control_rate_hz, joint_units)
    arch = Architecture.from_dict(header.metadata["architecture"])  # validated above
    model = ActorCritic(arch)
    for name in (ACTOR_FILE, CRITIC_FILE) if with_critic else (ACTOR_FILE,):
        state = verified_tensors(directory / name, header.sha256(name), name)
        _load_state(model.actor if name == ACTOR_FILE else model.critic, state, name)
    model.eval()
    return PolicyCheckpoint(
        path=directory,
        version=header.version,
        parent_version=header.metadata.get("parent_version"),
        spec=header.spec,
        arch=arch,
        gamma=header.gamma,
        model=model,
        metadata=header.metadata,
    )


def load_numpy_checkpoint(
    directory: str | Path,
    description: Any = None,
    control_rate_hz: float | None = None,
    joint_units: Any = None,
) -> NumpyCheckpoint:
    """``load_checkpoint(..., with_critic=False)`` without torch: the actor as numpy arrays.

    Same checks (metadata, dims, fingerprint, conventions against ``description``,
    checksum, tensor names and shapes), weights read with ``safetensors.numpy``.
    """
    directory = Path(directory)
    header = _validated_metadata(directory, description, control_rate_hz, joint_units)
    state = verified_arrays(directory / ACTOR_FILE, header.sha256(ACTOR_FILE), ACTOR_FILE)
    _check_shapes(header.actor_shapes, state, ACTOR_FILE)
    return NumpyCheckpoint(
        path=directory,
        version=header.version,
        parent_version=header.metadata.get("parent_version"),
        spec=header.spec,
        gamma=header.gamma,
        # What load_state_dict into the float32 torch actor would keep.
        actor_state={k: np.asarray(v, dtype=np.float32) for k, v in state.items()},
        metadata=header.metadata,
    )


class _Header(NamedTuple):
    metadata: dict[str, Any]
    spec: PolicySpec
    version: str
    gamma: float
    files: dict[str, str]
    actor_shapes: dict[str, tuple[int, ...]]

    def sha256(self, name: str) -> str:
        if name not in self.files:
            raise CheckpointError(f"files: policy.json records no checksum for {name}.")
        return self.files[name]


def _validated_metadata(
    directory: Path, description: Any, control_rate_hz: float | None, joint_units: Any
) -> _Header:
    """policy.json read and checked (fields, dims, fingerprint, conventions); no weights."""
    metadata = read_metadata(directory)
    try:
        spec = PolicySpec.from_dict(metadata["spec"])
        architecture = metadata["architecture"]
        # Refuses what Architecture.from_dict refuses, without importing torch.
        shapes = actor_shapes(architecture)
        obs_dim, act_dim = int(architecture["obs_dim"]), int(architecture["act_dim"])
        header = _Header(
            metadata,
            spec,
            version=str(metadata["version"]),
            gamma=float(metadata["gamma"]),
            files=dict(metadata["files"]),
            actor_shapes=shapes,
        )
    except KeyError as error:
        raise CheckpointError(f"{directory / METADATA_FILE} lacks field {error}.") from error
    except (TypeError, ValueError) as error:
        raise CheckpointError(f"{directory / METADATA_FILE}: {error}") from error
    if obs_dim != spec.obs_dim or act_dim != spec.act_dim:
        raise CheckpointError(
            f"architecture: dims ({obs_dim}, {act_dim}) disagree with the spec's "
            f"observation layout and joints ({spec.obs_dim}, {spec.act_dim})."
        )
    if metadata.get("spec_fingerprint") not in (None, spec.fingerprint()):
        raise CheckpointError("spec_fingerprint: the spec in policy.json was edited by hand.")
    if description is not None:
        try:
            validate_against_robot(spec, description, control_rate_hz, joint_units=joint_units)
        except ValueError as error:
            raise CheckpointError(f"{directory}: {error}") from error
    return header


# --- LoRA adapters (peft format) ---------------------------------------------------------


def read_adapter_metadata(adapter_dir: str | Path) -> dict[str, Any]:
    path = Path(adapter_dir) / ADAPTER_METADATA
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{path} is not valid JSON: {error}") from error


def write_adapter_metadata(
    adapter_dir: str | Path,
    base: PolicyCheckpoint,
    version: str,
    parent_version: str | None,
    **extra: Any,
) -> dict[str, Any]:
    """Record which base and conventions an adapter belongs to (the learner calls this)."""
    adapter_dir = Path(adapter_dir)
    metadata = {
        "version": version,
        "parent_version": parent_version,
        "base_version": base.version,
        "spec_fingerprint": base.spec.fingerprint(),
        "adapter_sha256": sha256_file(adapter_dir / ADAPTER_WEIGHTS),
        **extra,
    }
    (adapter_dir / ADAPTER_METADATA).write_text(json.dumps(metadata, indent=2) + "\n")
    return metadata


def make_untrained_checkpoint(
    directory: str | Path,
    description: Any,
    task: str = "reach",
    control_rate_hz: float = 20.0,
    hidden: tuple[int, ...] = (64, 64),
    seed: int = 0,
    version: str = "untrained",
) -> Path:
    """A randomly initialised checkpoint with correct conventions (tests and benchmarks)."""
    import torch

    from simreal_ros.policy.model import ActorCritic, Architecture
    from simreal_ros.policy.spec import default_spec

    torch.manual_seed(seed)
    spec = default_spec(description, task, control_rate_hz)
    arch = Architecture(spec.obs_dim, spec.act_dim, hidden, hidden)
    return save_checkpoint(
        directory,
        ActorCritic(arch),
        spec,
        version=version,
        gamma=0.99,
        training={"command": "make_untrained_checkpoint", "seed": seed},
    )

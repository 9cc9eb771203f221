"""Checkpoints: safetensors weights plus JSON metadata, validated before anything runs.

A checkpoint is a directory::

    policy.json          format, version, parent version, architecture, spec (joint names
                         and order, units, action mode/scale/range, control rate,
                         observation layout and normalisation), gamma, training
                         provenance, evaluation, sha256 of each weight file
    actor.safetensors    the actor (what the policy node runs)
    critic.safetensors   twin critics (V_sim for SGFT)

This module is the format: metadata, checksums, verification and the numpy loader.
Loading checks the checksums before parsing any weights, reads only safetensors (never
pickle), checks tensor names and shapes against the architecture, and, given the robot
description, refuses a conventions mismatch with a message naming the field.
``load_numpy_checkpoint`` reads the actor with safetensors' numpy backend: it never imports
torch (about a second), which only training needs; checkpoints as torch models (saving a
trained one, loading one to train or evaluate) are ``training.torch_checkpoint``'s, on the
same checks.

LoRA adapters (peft format: ``adapter_config.json`` + ``adapter_model.safetensors``, plus
our ``simreal_adapter.json`` naming the base version and spec fingerprint) are merged in
numpy by ``lora_merge`` (no torch, no peft); training continues an adapter with peft
itself (``learner.lora.wrap(init_adapter=...)``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from simreal_ros import resources
from simreal_ros.checksum import sha256_bytes, sha256_file
from simreal_ros.policy.spec import PolicySpec, validate_against_robot

FORMAT = "simreal_ros.policy/1"
METADATA_FILE = "policy.json"
ACTOR_FILE = "actor.safetensors"
CRITIC_FILE = "critic.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_METADATA = "simreal_adapter.json"
# Weights are read whole, to hash and parse the same bytes. The project's policies and
# adapters are kilobytes to megabytes; a file past this is refused before it is read, so a
# hostile one cannot exhaust the memory of the node that loads it.
MAX_WEIGHTS_BYTES = 1 << 30


class CheckpointError(ValueError):
    """A checkpoint or adapter that must not be run; the message says why and what to do."""


@dataclasses.dataclass
class NumpyCheckpoint:
    """A base checkpoint's actor as numpy arrays, checked like ``load_checkpoint``.

    What the policy node runs, adapters merged in numpy: no torch.
    ``training.torch_checkpoint.as_torch_checkpoint`` builds the torch model from these
    same (already verified) arrays when one is needed.
    """

    path: Path
    version: str
    parent_version: str | None
    spec: PolicySpec
    gamma: float
    actor_state: dict[str, np.ndarray]  # model.Actor's state_dict names, float32
    metadata: dict[str, Any]


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


def verified_arrays(
    path: Path, expected_sha256: str | None, what: str
) -> tuple[dict[str, np.ndarray], str]:
    """A safetensors file as numpy arrays after checking its SHA-256 (refuses other formats),
    with the SHA-256 of the bytes they were parsed from."""
    from safetensors.numpy import load

    return verified_safetensors(path, expected_sha256, what, load)


def verified_safetensors(
    path: Path, expected_sha256: str | None, what: str, load: Callable[[bytes], dict]
) -> tuple[dict, str]:
    """``load(bytes)`` of the file after checking the suffix and, when given, the SHA-256;
    the bytes are read once, so what is parsed is what was checked. Returns the tensors and
    the SHA-256."""
    if path.suffix != ".safetensors":
        raise CheckpointError(f"{what}: {path.name} is not a .safetensors file; refusing to load.")
    if not path.is_file():
        raise CheckpointError(f"{what}: {path} is missing.")
    size = path.stat().st_size
    if size > MAX_WEIGHTS_BYTES:
        raise CheckpointError(
            f"{what}: {path} is {size / 2**20:.0f} MiB, over the {MAX_WEIGHTS_BYTES >> 20} MiB "
            "a policy or adapter of this project can be; it is not one. Check the path."
        )
    data = path.read_bytes()
    actual = sha256_bytes(data)
    if expected_sha256 is not None and actual != expected_sha256:
        raise CheckpointError(
            f"checksum: {path} has sha256 {actual[:16]}… but {expected_sha256[:16]}… was "
            "recorded; the file is truncated or was modified. Restore it from its source."
        )
    try:
        return load(data), actual
    except Exception as error:  # safetensors raises its own error types
        raise CheckpointError(
            f"{what}: {path} is not a readable safetensors file: {error}"
        ) from error


def check_shapes(expected: Mapping[str, tuple[int, ...]], state: Mapping, what: str) -> None:
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


def actor_shapes(architecture: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """Tensor names and shapes of ``model.Actor``'s state_dict for a recorded architecture
    (``policy.json``'s dict), without building the module: what the numpy loader checks.

    Refuses what ``Architecture.from_dict`` refuses (KeyError, TypeError, ValueError).
    """
    if architecture.get("activation", "relu") != "relu":
        raise ValueError(f"architecture.activation = {architecture['activation']!r}; only relu.")
    obs_dim, act_dim = int(architecture["obs_dim"]), int(architecture["act_dim"])
    hidden = {k: [int(h) for h in architecture[k]] for k in ("actor_hidden", "critic_hidden")}
    shapes: dict[str, tuple[int, ...]] = {}
    encoder = architecture.get("encoder")
    if encoder is not None:  # a camera policy: Conv2d layers, ReLUs between (model.py)
        channels = [3, *(int(c) for c in encoder["channels"])]
        kernels = [int(k) for k in encoder["kernels"]]
        if len(kernels) != len(channels) - 1:
            raise ValueError("architecture.encoder: channels and kernels differ in length.")
        for i, k in enumerate(kernels):
            shapes[f"encoder.{2 * i}.weight"] = (channels[i + 1], channels[i], k, k)
            shapes[f"encoder.{2 * i}.bias"] = (channels[i + 1],)
        shapes["object_head.weight"] = (2, 2 * channels[-1])
        shapes["object_head.bias"] = (2,)
        obs_dim += 2 * channels[-1]
    sizes = [obs_dim, *hidden["actor_hidden"]]
    for i in range(len(sizes) - 1):  # trunk: Linear, ReLU, Linear, ReLU, ...
        shapes[f"trunk.{2 * i}.weight"] = (sizes[i + 1], sizes[i])
        shapes[f"trunk.{2 * i}.bias"] = (sizes[i + 1],)
    for head in ("mean_head", "log_std_head"):
        shapes[f"{head}.weight"] = (act_dim, sizes[-1])
        shapes[f"{head}.bias"] = (act_dim,)
    return shapes


def load_numpy_checkpoint(
    directory: str | Path,
    description: Any = None,
    control_rate_hz: float | None = None,
    joint_units: Any = None,
) -> NumpyCheckpoint:
    """The base's actor as numpy arrays, without torch.

    The checks of ``training.torch_checkpoint.load_checkpoint`` (metadata, dims,
    fingerprint, conventions against ``description``, checksum, tensor names and shapes),
    weights read with ``safetensors.numpy``.
    """
    directory = Path(directory)
    header = validated_header(directory, description, control_rate_hz, joint_units)
    state, _sha256 = verified_arrays(directory / ACTOR_FILE, header.sha256(ACTOR_FILE), ACTOR_FILE)
    check_shapes(header.actor_shapes, state, ACTOR_FILE)
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


class CheckpointHeader(NamedTuple):
    """policy.json read and checked: what every loader needs before reading weights."""

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


def validated_header(
    directory: Path, description: Any, control_rate_hz: float | None, joint_units: Any
) -> CheckpointHeader:
    """policy.json read and checked (fields, dims, fingerprint, conventions); no weights."""
    metadata = read_metadata(directory)
    try:
        spec = PolicySpec.from_dict(metadata["spec"])
        architecture = metadata["architecture"]
        # Refuses what Architecture.from_dict refuses, without importing torch.
        shapes = actor_shapes(architecture)
        obs_dim, act_dim = int(architecture["obs_dim"]), int(architecture["act_dim"])
        header = CheckpointHeader(
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
    if ("encoder" in architecture) != (spec.camera is not None):
        raise CheckpointError(
            f"{directory / METADATA_FILE}: a camera policy needs both architecture.encoder "
            "and spec.camera; this file has only one of them."
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
    base: Any,
    version: str,
    parent_version: str | None,
    **extra: Any,
) -> dict[str, Any]:
    """Record which base and conventions an adapter belongs to (the learner calls this).

    ``base`` is the base checkpoint, numpy or torch: its version and spec are recorded."""
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

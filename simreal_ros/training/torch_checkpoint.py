"""Checkpoints as torch models: saving a trained ``ActorCritic``, loading one to train or
evaluate.

The format, its checks and the numpy loader the deployed policy runs are
``policy.checkpoint``'s; this module reads and writes the same directories with torch,
through the same checks (checksums before any weights, tensor names and shapes against the
architecture, conventions against the robot).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
import threading
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load, save_file

from simreal_ros.checksum import sha256_file
from simreal_ros.policy.checkpoint import (
    ACTOR_FILE,
    CRITIC_FILE,
    FORMAT,
    METADATA_FILE,
    NumpyCheckpoint,
    check_shapes,
    validated_header,
    verified_safetensors,
)
from simreal_ros.policy.spec import PolicySpec, default_spec
from simreal_ros.training.model import ActorCritic, Architecture, EncoderArchitecture


@dataclasses.dataclass
class PolicyCheckpoint:
    """A checkpoint with its networks as a torch ``ActorCritic``."""

    path: Path | None
    version: str
    parent_version: str | None
    spec: PolicySpec
    arch: Architecture
    gamma: float
    model: ActorCritic
    metadata: dict[str, Any]


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
            ACTOR_FILE: {k: v.detach().contiguous() for k, v in model.actor.state_dict().items()}
        }
        if model.critic is not None:  # a camera policy has none
            tensors[CRITIC_FILE] = {
                k: v.detach().contiguous() for k, v in model.critic.state_dict().items()
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
            for name in (*tensors, METADATA_FILE):
                os.replace(staging / name, directory / name)
        else:
            os.replace(staging, directory)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return directory


def load_checkpoint(
    directory: str | Path,
    description: Any = None,
    control_rate_hz: float | None = None,
    with_critic: bool = True,
    joint_units: Any = None,
) -> PolicyCheckpoint:
    """Load and validate a checkpoint; with ``description``, check it fits that robot."""
    directory = Path(directory)
    header = validated_header(directory, description, control_rate_hz, joint_units)
    arch = Architecture.from_dict(header.metadata["architecture"])  # validated above
    model = ActorCritic(arch)
    with_critic = with_critic and model.critic is not None
    for name in (ACTOR_FILE, CRITIC_FILE) if with_critic else (ACTOR_FILE,):
        state = verified_tensors(directory / name, header.sha256(name), name)
        load_state(model.actor if name == ACTOR_FILE else model.critic, state, name)
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


# The torch model of each NumpyCheckpoint it was asked for, built once per checkpoint
# object and dropped with it.
_torch_of_numpy: dict[int, PolicyCheckpoint] = {}
_torch_of_numpy_lock = threading.Lock()


def as_torch_checkpoint(base: NumpyCheckpoint) -> PolicyCheckpoint:
    """The same base as a ``PolicyCheckpoint`` with a torch model, from its already
    verified arrays (built once per ``NumpyCheckpoint``)."""
    with _torch_of_numpy_lock:
        built = _torch_of_numpy.get(id(base))
        if built is None:
            arch = Architecture.from_dict(base.metadata["architecture"])
            model = ActorCritic(arch)
            state = {k: torch.from_numpy(np.array(v)) for k, v in base.actor_state.items()}
            load_state(model.actor, state, ACTOR_FILE)
            model.eval()
            built = PolicyCheckpoint(
                path=base.path,
                version=base.version,
                parent_version=base.parent_version,
                spec=base.spec,
                arch=arch,
                gamma=base.gamma,
                model=model,
                metadata=base.metadata,
            )
            _torch_of_numpy[id(base)] = built
            weakref.finalize(base, _torch_of_numpy.pop, id(base), None)
        return built


def verified_tensors(
    path: Path, expected_sha256: str | None, what: str
) -> dict[str, torch.Tensor]:
    """Load a safetensors file after checking its SHA-256 (refuses other formats)."""
    tensors, _sha256 = verified_safetensors(path, expected_sha256, what, load)
    return tensors


def load_state(module: torch.nn.Module, state: dict[str, torch.Tensor], what: str) -> None:
    """Load ``state`` into ``module`` as float32 after checking its names and shapes."""
    expected = {k: tuple(v.shape) for k, v in module.state_dict().items()}
    check_shapes(expected, state, what)
    module.load_state_dict({k: v.to(torch.float32) for k, v in state.items()})


def make_untrained_checkpoint(
    directory: str | Path,
    description: Any,
    task: str = "reach",
    control_rate_hz: float = 20.0,
    hidden: tuple[int, ...] = (64, 64),
    seed: int = 0,
    version: str = "untrained",
    camera: bool = False,
) -> Path:
    """A randomly initialised checkpoint with correct conventions (tests and benchmarks).

    ``camera``: a camera policy (``CameraSpec()``'s defaults, no cube fields in the
    observation, a CNN encoder at the spec's resolution; actor only)."""
    torch.manual_seed(seed)
    if camera:
        from simreal_ros.policy.camera import CAMERA_OBSERVATION_FIELDS, CameraSpec

        spec = default_spec(description, task, control_rate_hz, CAMERA_OBSERVATION_FIELDS)
        spec = dataclasses.replace(spec, camera=CameraSpec())
        encoder = EncoderArchitecture(spec.camera.height, spec.camera.width)
    else:
        spec = default_spec(description, task, control_rate_hz)
        encoder = None
    arch = Architecture(spec.obs_dim, spec.act_dim, hidden, hidden, encoder=encoder)
    return save_checkpoint(
        directory,
        ActorCritic(arch),
        spec,
        version=version,
        gamma=0.99,
        training={"command": "make_untrained_checkpoint", "seed": seed},
    )

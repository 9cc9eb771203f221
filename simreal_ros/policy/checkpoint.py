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

LoRA adapters (peft format: ``adapter_config.json`` + ``adapter_model.safetensors``, plus
our ``simreal_adapter.json`` naming the base version and spec fingerprint) are applied with
``load_actor_with_adapter``.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from simreal_ros.policy.checksum import sha256_file
from simreal_ros.policy.model import ActorCritic, Architecture
from simreal_ros.policy.spec import PolicySpec, validate_against_robot

FORMAT = "simreal_ros.policy/1"
METADATA_FILE = "policy.json"
ACTOR_FILE = "actor.safetensors"
CRITIC_FILE = "critic.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_METADATA = "simreal_adapter.json"
# Shipped base checkpoints, one per task.
SHIPPED_DIR = Path(__file__).resolve().parents[2] / "checkpoints"


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


def shipped_checkpoint(task: str) -> Path:
    return SHIPPED_DIR / task


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
    path = Path(directory) / METADATA_FILE
    metadata = json.loads(path.read_text())
    metadata.update(fields)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(metadata, indent=2) + "\n")
    os.replace(tmp, path)


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


def _load_state(module: torch.nn.Module, state: dict[str, torch.Tensor], what: str) -> None:
    expected = module.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise CheckpointError(
            f"architecture: {what} weights do not fit the recorded architecture "
            f"(missing {missing[:4]}, unexpected {unexpected[:4]})."
        )
    for name, tensor in state.items():
        if tuple(tensor.shape) != tuple(expected[name].shape):
            raise CheckpointError(
                f"architecture: {what} tensor {name} has shape {tuple(tensor.shape)}, the "
                f"architecture needs {tuple(expected[name].shape)}."
            )
    module.load_state_dict({k: v.to(torch.float32) for k, v in state.items()})


def load_checkpoint(
    directory: str | Path,
    description: Any = None,
    control_rate_hz: float | None = None,
    with_critic: bool = True,
    joint_units: Any = None,
) -> PolicyCheckpoint:
    """Load and validate a checkpoint; with ``description``, check it fits that robot."""
    directory = Path(directory)
    metadata = read_metadata(directory)
    try:
        spec = PolicySpec.from_dict(metadata["spec"])
        arch = Architecture.from_dict(metadata["architecture"])
        files = dict(metadata["files"])
        version = str(metadata["version"])
        gamma = float(metadata["gamma"])
    except KeyError as error:
        raise CheckpointError(f"{directory / METADATA_FILE} lacks field {error}.") from error
    except (TypeError, ValueError) as error:
        raise CheckpointError(f"{directory / METADATA_FILE}: {error}") from error
    if arch.obs_dim != spec.obs_dim or arch.act_dim != spec.act_dim:
        raise CheckpointError(
            f"architecture: dims ({arch.obs_dim}, {arch.act_dim}) disagree with the spec's "
            f"observation layout and joints ({spec.obs_dim}, {spec.act_dim})."
        )
    if metadata.get("spec_fingerprint") not in (None, spec.fingerprint()):
        raise CheckpointError("spec_fingerprint: the spec in policy.json was edited by hand.")
    if description is not None:
        try:
            validate_against_robot(spec, description, control_rate_hz, joint_units=joint_units)
        except ValueError as error:
            raise CheckpointError(f"{directory}: {error}") from error
    model = ActorCritic(arch)
    for name in (ACTOR_FILE, CRITIC_FILE) if with_critic else (ACTOR_FILE,):
        if name not in files:
            raise CheckpointError(f"files: policy.json records no checksum for {name}.")
        state = verified_tensors(directory / name, files[name], name)
        _load_state(model.actor if name == ACTOR_FILE else model.critic, state, name)
    model.eval()
    return PolicyCheckpoint(
        path=directory,
        version=version,
        parent_version=metadata.get("parent_version"),
        spec=spec,
        arch=arch,
        gamma=gamma,
        model=model,
        metadata=metadata,
    )


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


def apply_adapter(
    base: PolicyCheckpoint, adapter_dir: str | Path, expected_sha256: str | None = None
) -> torch.nn.Module:
    """Base actor + peft LoRA adapter -> a merged plain ``Actor`` (the base is not touched).

    Checks: the adapter files exist and are safetensors; the weights' SHA-256 equals
    ``expected_sha256`` (or the one recorded in simreal_adapter.json); the adapter was
    trained on this base's conventions (spec fingerprint) and targets existing layers.
    """
    adapter_dir = Path(adapter_dir)
    if not adapter_dir.is_dir():
        raise CheckpointError(f"adapter {adapter_dir} is not a directory.")
    config_path = adapter_dir / ADAPTER_CONFIG
    weights_path = adapter_dir / ADAPTER_WEIGHTS
    if not config_path.is_file():
        raise CheckpointError(f"adapter {adapter_dir} has no {ADAPTER_CONFIG} (peft format).")
    if not weights_path.is_file():
        raise CheckpointError(
            f"adapter {adapter_dir} has no {ADAPTER_WEIGHTS}; only safetensors adapters load."
        )
    extra = read_adapter_metadata(adapter_dir)
    checksum = expected_sha256 or extra.get("adapter_sha256")
    state = verified_tensors(weights_path, checksum, "adapter")
    fingerprint = extra.get("spec_fingerprint")
    if fingerprint is not None and fingerprint != base.spec.fingerprint():
        raise CheckpointError(
            f"spec_fingerprint: adapter {adapter_dir.name} was trained on other conventions "
            f"(base {extra.get('base_version')!r}) than the running base {base.version!r}."
        )
    try:
        config = json.loads(config_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{config_path} is not valid JSON: {error}") from error
    if config.get("peft_type", "LORA") != "LORA":
        raise CheckpointError(f"peft_type: {config.get('peft_type')!r}; only LORA adapters.")
    targets = config.get("target_modules") or []
    targets = [targets] if isinstance(targets, str) else list(targets)
    layer_names = {
        name for name, m in base.model.actor.named_modules() if isinstance(m, torch.nn.Linear)
    }
    unknown = [t for t in targets if t not in layer_names]
    if unknown:
        raise CheckpointError(
            f"target_modules: adapter targets {unknown} that the actor does not have "
            f"(its layers: {sorted(layer_names)})."
        )
    from peft import LoraConfig, get_peft_model, set_peft_model_state_dict

    lora_config = LoraConfig.from_pretrained(str(adapter_dir))
    lora_config.inference_mode = True
    actor = copy.deepcopy(base.model.actor)
    peft_model = get_peft_model(actor, lora_config)
    result = set_peft_model_state_dict(peft_model, state)
    lora_missing = [k for k in getattr(result, "missing_keys", []) if "lora_" in k]
    if lora_missing or getattr(result, "unexpected_keys", []):
        raise CheckpointError(
            f"adapter weights do not fit its config (missing {lora_missing[:3]}, "
            f"unexpected {list(getattr(result, 'unexpected_keys', []))[:3]})."
        )
    merged = peft_model.merge_and_unload()
    merged.eval()
    for parameter in merged.parameters():
        if not torch.isfinite(parameter).all():
            raise CheckpointError(f"adapter {adapter_dir.name} yields non-finite weights.")
        parameter.requires_grad_(False)
    return merged


def load_actor_with_adapter(
    checkpoint_dir: str | Path,
    adapter_dir: str | Path | None,
    description: Any = None,
    expected_sha256: str | None = None,
) -> torch.nn.Module:
    """Load a base checkpoint (validated) and return its actor merged with an adapter.

    With ``adapter_dir`` None this is the base actor. The result is a plain ``Actor``
    (same layer names), so it can be saved, evaluated or wrapped by peft again.
    """
    base = load_checkpoint(checkpoint_dir, description=description, with_critic=False)
    if adapter_dir is None:
        return base.model.actor
    return apply_adapter(base, adapter_dir, expected_sha256)


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

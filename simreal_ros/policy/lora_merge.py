"""peft LoRA adapters merged into the actor's weights in numpy: what every deployment runs.

An adapter is peft's standard pair, ``adapter_config.json`` + ``adapter_model.safetensors``
(``simreal_ros.learner.lora`` writes it with ``get_peft_model`` on the actor). Both are
read as data: the JSON with ``json``, the tensors with ``safetensors.numpy``. Neither torch
nor peft is imported, so the policy node merges a hot-swapped adapter on its loader thread
without holding the GIL for seconds of imports.

The merge is peft's for plain LoRA on ``nn.Linear`` (``peft/tuners/lora/layer.py``:
``Linear.merge`` adds ``get_delta_weight``)::

    W' = W + scaling * (B @ A)    scaling = lora_alpha / r  (lora_alpha / sqrt(r), use_rslora)
    b' = b                        (bias="none", lora_bias=false)

in float32, as peft computes it on a float32 model, with ``A`` = ``<layer>.lora_A.weight``
(r, in) and ``B`` = ``<layer>.lora_B.weight`` (out, r) under peft's key prefix
``base_model.model.``. test/core/test_policy_lora_merge.py checks it against peft's
``merge_and_unload``.

Only that is merged. Anything else an adapter_config.json can ask for (DoRA, a LoRA bias,
trained base biases, per-layer rank or alpha patterns, regex or non-Linear targets,
saved whole modules, transposed (Conv1D) weights, initialisations that rewrite the base)
is refused with a ``CheckpointError`` that names the field, as are unknown tensors, shape
or dtype mismatches and non-finite values: never a silent fallback to another merge.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from simreal_ros.policy.checkpoint import (
    ADAPTER_CONFIG,
    ADAPTER_METADATA,
    ADAPTER_WEIGHTS,
    CheckpointError,
    read_adapter_metadata,
    verified_arrays,
)

KEY_PREFIX = "base_model.model."  # peft's prefix for the wrapped module's tensors
# Fields that never change the merged weights (bookkeeping, training-only settings).
INERT_FIELDS = frozenset(
    {
        "auto_mapping",
        "base_model_name_or_path",
        "revision",
        "inference_mode",
        "lora_dropout",  # training only: merge ignores dropout
        "peft_version",
        "megatron_core",  # a module name, used only with megatron_config (checked off)
        "qalora_group_size",  # used only with use_qalora (checked off)
    }
)
# Fields read below (r, alpha, scaling, targets) or checked for a specific value.
HANDLED_FIELDS = frozenset(
    {
        "peft_type",
        "r",
        "lora_alpha",
        "use_rslora",
        "target_modules",
        "bias",
        "fan_in_fan_out",
        "init_lora_weights",
    }
)
# Feature fields with a specific refusal (any value other than off is refused).
FEATURE_REFUSALS = {
    "use_dora": "DoRA rescales every merged weight by a learned magnitude vector",
    "lora_bias": "a LoRA bias (lora_B with a bias) changes the layers' biases",
    "rank_pattern": "per-layer ranks give layers other scalings than r and lora_alpha",
    "alpha_pattern": "per-layer alphas give layers other scalings than lora_alpha / r",
    "modules_to_save": "whole trained copies of modules replace base layers",
    "layers_to_transform": "layer selection by index is peft's transformers-model matching",
    "layers_pattern": "layer selection by pattern is peft's transformers-model matching",
    "exclude_modules": "target exclusion is peft's matching, not exact layer names",
    "target_parameters": "LoRA on bare parameters is not LoRA on the actor's Linear layers",
    "trainable_token_indices": "trainable tokens are for embeddings, which the actor lacks",
}
PLAIN_INITS = (True, False, "gaussian")  # initialise only A and B, which the file overwrites


class LayerDelta(NamedTuple):
    """One target layer's LoRA factors (float32): the delta is scaling * (b @ a)."""

    a: np.ndarray  # (r, in_features)
    b: np.ndarray  # (out_features, r)


class LoraAdapter(NamedTuple):
    """A checked adapter: what the merge needs and nothing else."""

    path: Path
    rank: int
    alpha: float
    use_rslora: bool
    scaling: float
    layers: dict[str, LayerDelta]  # actor layer name -> factors
    metadata: dict[str, Any]  # simreal_adapter.json ({} when absent)
    sha256: str  # of the weights file's bytes that were parsed


def _refuse(adapter_dir: Path, message: str) -> CheckpointError:
    return CheckpointError(f"adapter {adapter_dir}: {message}")


def _is_off(value: Any) -> bool:
    return value is None or value is False or (isinstance(value, (dict, list)) and not value)


def linear_layers(state: Mapping[str, np.ndarray]) -> dict[str, tuple[int, int]]:
    """The actor's Linear layers from its state_dict: name -> (out_features, in_features).

    ``model.Actor`` holds only Linear layers with a weight and a bias (ReLUs and the
    Sequential have no tensors), so a layer is a name with a 2-D ``.weight`` and a ``.bias``.
    """
    layers = {}
    for key, value in state.items():
        name, _, leaf = key.rpartition(".")
        if leaf == "weight" and np.ndim(value) == 2 and f"{name}.bias" in state:
            layers[name] = tuple(np.shape(value))
    return layers


def _config(adapter_dir: Path) -> dict[str, Any]:
    path = adapter_dir / ADAPTER_CONFIG
    try:
        config = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{path} is not valid JSON: {error}") from error
    if not isinstance(config, dict):
        raise CheckpointError(f"{path} is not a JSON object; is it peft's adapter config?")
    return config


def _checked_config(
    adapter_dir: Path, config: Mapping[str, Any], layers: Mapping[str, tuple[int, int]]
) -> tuple[int, float, bool, list[str]]:
    """(r, lora_alpha, use_rslora, targets) from adapter_config.json, or a refusal."""
    retrain = "retrain the adapter with simreal_ros.learner.lora (plain LoRA)"
    if config.get("peft_type", "LORA") != "LORA":
        raise _refuse(adapter_dir, f"peft_type {config.get('peft_type')!r}; only LORA adapters.")
    for field, why in FEATURE_REFUSALS.items():
        if not _is_off(config.get(field)):
            raise _refuse(
                adapter_dir,
                f"{field} = {config[field]!r}: {why}, which this numpy merge does not "
                f"implement; {retrain} without {field}.",
            )
    for field, value in config.items():
        if field in INERT_FIELDS or field in HANDLED_FIELDS or field in FEATURE_REFUSALS:
            continue
        if not _is_off(value):
            raise _refuse(
                adapter_dir,
                f"{ADAPTER_CONFIG} sets {field} = {value!r}, which this merge does not "
                f"implement (it merges plain LoRA into the actor's Linear layers); {retrain}, "
                "or extend simreal_ros/policy/lora_merge.py with a test against peft.",
            )
    bias = config.get("bias", "none")
    if bias != "none":
        raise _refuse(
            adapter_dir,
            f"bias = {bias!r} trains the base layers' biases and stores them with the adapter; "
            f"only bias = 'none' is merged. {retrain.capitalize()} with bias='none'.",
        )
    if config.get("fan_in_fan_out", False) is not False:
        raise _refuse(
            adapter_dir,
            f"fan_in_fan_out = {config['fan_in_fan_out']!r} is for transposed (Conv1D) "
            "weights; the actor's layers are nn.Linear (out, in). This adapter was not made "
            "for this actor; save it with fan_in_fan_out=false.",
        )
    init = config.get("init_lora_weights", True)
    if not any(init is p or (isinstance(p, str) and init == p) for p in PLAIN_INITS):
        raise _refuse(
            adapter_dir,
            f"init_lora_weights = {init!r} may rewrite the base weights when the adapter is "
            "built, so base + B @ A is not the trained model; convert it to a plain LoRA "
            "(peft's path_initial_model_for_weight_conversion) or train with the default.",
        )
    rank = config.get("r")
    if isinstance(rank, bool) or not isinstance(rank, int) or rank <= 0:
        raise _refuse(adapter_dir, f"r = {rank!r}; the rank must be a positive integer.")
    alpha = config.get("lora_alpha", 8)
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha):
        raise _refuse(adapter_dir, f"lora_alpha = {alpha!r}; it must be a finite number.")
    use_rslora = config.get("use_rslora", False)
    if not isinstance(use_rslora, bool):
        raise _refuse(adapter_dir, f"use_rslora = {use_rslora!r}; it must be true or false.")
    targets = config.get("target_modules")
    if isinstance(targets, str):
        raise _refuse(
            adapter_dir,
            f"target_modules = {targets!r} is a regular expression in peft; list the actor's "
            f"layer names instead (its Linear layers: {sorted(layers)}).",
        )
    if not (isinstance(targets, list) and targets and all(isinstance(t, str) for t in targets)):
        raise _refuse(
            adapter_dir,
            f"target_modules = {targets!r}; give a non-empty list of the actor's Linear layer "
            f"names ({sorted(layers)}).",
        )
    unknown = [t for t in targets if t not in layers]
    if unknown:
        raise _refuse(
            adapter_dir,
            f"target_modules: adapter targets {unknown} that are not Linear layers of the "
            f"actor (its Linear layers: {sorted(layers)}); the adapter was made for another "
            "model.",
        )
    return rank, float(alpha), use_rslora, list(dict.fromkeys(targets))


def read_adapter(
    adapter_dir: str | Path,
    base_state: Mapping[str, np.ndarray],
    expected_sha256: str | None = None,
    spec_fingerprint: str | None = None,
    base_version: str = "",
) -> LoraAdapter:
    """Read and check an adapter against the actor it is to be merged into.

    The weights' SHA-256 is checked (``expected_sha256``, else the one recorded in
    simreal_adapter.json) before they are parsed; with ``spec_fingerprint`` (the running
    base's), an adapter that simreal_adapter.json says was trained on other conventions is
    refused before its config is read.
    """
    adapter_dir = Path(adapter_dir)
    if not adapter_dir.is_dir():
        raise CheckpointError(f"adapter {adapter_dir} is not a directory.")
    weights_path = adapter_dir / ADAPTER_WEIGHTS
    if not (adapter_dir / ADAPTER_CONFIG).is_file():
        raise CheckpointError(f"adapter {adapter_dir} has no {ADAPTER_CONFIG} (peft format).")
    if not weights_path.is_file():
        raise CheckpointError(
            f"adapter {adapter_dir} has no {ADAPTER_WEIGHTS}; only safetensors adapters load."
        )
    metadata = read_adapter_metadata(adapter_dir)
    checksum = expected_sha256 or metadata.get("adapter_sha256")
    tensors, sha256 = verified_arrays(weights_path, checksum, "adapter")
    trained_on = metadata.get("spec_fingerprint")
    if spec_fingerprint is not None and trained_on not in (None, spec_fingerprint):
        raise CheckpointError(
            f"spec_fingerprint: adapter {adapter_dir.name} was trained on other conventions "
            f"(base {metadata.get('base_version')!r}, see {ADAPTER_METADATA}) than the "
            f"running base {base_version!r}; train it on this base."
        )
    layers = linear_layers(base_state)
    rank, alpha, use_rslora, targets = _checked_config(adapter_dir, _config(adapter_dir), layers)
    expected_keys = {
        f"{KEY_PREFIX}{t}.lora_{ab}.weight": (t, ab) for t in targets for ab in ("A", "B")
    }
    missing = sorted(set(expected_keys) - set(tensors))
    unexpected = sorted(set(tensors) - set(expected_keys))
    if missing or unexpected:
        raise _refuse(
            adapter_dir,
            f"{ADAPTER_WEIGHTS} does not hold exactly the LoRA factors of target_modules "
            f"{targets} (missing {missing[:4]}, unexpected {unexpected[:4]}); only plain LoRA "
            "tensors are merged. Re-save the adapter with peft's save_pretrained.",
        )
    factors: dict[str, dict[str, np.ndarray]] = {t: {} for t in targets}
    for key, (target, ab) in sorted(expected_keys.items()):  # a stable order
        tensor = tensors[key]
        out_features, in_features = layers[target]
        shape = (rank, in_features) if ab == "A" else (out_features, rank)
        what = f"{target}.lora_{ab}"
        if tensor.dtype != np.float32:
            raise _refuse(
                adapter_dir,
                f"{what} is {tensor.dtype}; only float32 adapters (what the learner saves) "
                "are merged. Re-save it in float32.",
            )
        if tuple(tensor.shape) != shape:
            raise _refuse(
                adapter_dir,
                f"{what} has shape {tuple(tensor.shape)}, but the actor's {target} "
                f"({in_features} in, {out_features} out) at r = {rank} needs {shape}: the "
                f"adapter was made for another architecture, or r in {ADAPTER_CONFIG} is wrong.",
            )
        if not np.isfinite(tensor).all():
            raise _refuse(
                adapter_dir,
                f"{what} holds non-finite values (NaN or inf): its training diverged. Do not "
                "deploy it; retrain from the running version.",
            )
        factors[target][ab] = tensor
    scaling = alpha / math.sqrt(rank) if use_rslora else alpha / rank
    return LoraAdapter(
        path=adapter_dir,
        rank=rank,
        alpha=alpha,
        use_rslora=use_rslora,
        scaling=scaling,
        layers={t: LayerDelta(a=f["A"], b=f["B"]) for t, f in factors.items()},
        metadata=metadata,
        sha256=sha256,
    )


def merge(base_state: Mapping[str, np.ndarray], adapter: LoraAdapter) -> dict[str, np.ndarray]:
    """A new actor state (float32 copies): each target's weight plus scaling * (B @ A).

    The base arrays are not modified. Biases and untargeted layers are copied unchanged.
    """
    merged = {k: np.array(v, dtype=np.float32) for k, v in base_state.items()}
    scaling = np.float32(adapter.scaling)
    for target, delta in adapter.layers.items():
        with np.errstate(over="ignore", invalid="ignore"):  # refused just below
            weight = merged[f"{target}.weight"] + (delta.b @ delta.a) * scaling
        if not np.isfinite(weight).all():
            raise _refuse(
                adapter.path,
                f"merging into {target} gives non-finite weights (overflow); do not deploy it.",
            )
        merged[f"{target}.weight"] = weight
    return merged


def base_actor_state(base: Any) -> dict[str, np.ndarray]:
    """The actor's state as float32 numpy arrays: ``NumpyCheckpoint.actor_state``, or a
    ``PolicyCheckpoint``'s torch actor (the same values: both hold the file's float32)."""
    state = getattr(base, "actor_state", None)
    if state is not None:
        return dict(state)
    return {
        k: v.detach().cpu().numpy().astype(np.float32, copy=True)
        for k, v in base.model.actor.state_dict().items()
    }


def merged_actor_state(
    base: Any, adapter_dir: str | Path, expected_sha256: str | None = None
) -> dict[str, np.ndarray]:
    """Base checkpoint (numpy or torch) + adapter -> the merged actor state, checked.

    Checks, in order: the adapter's files; the weights' SHA-256; that it was trained on
    this base's conventions (spec fingerprint in simreal_adapter.json); its config and
    tensors (see the module docstring). Never imports torch or peft.
    """
    return merged_with_adapter(base, adapter_dir, expected_sha256)[0]


def merged_with_adapter(
    base: Any, adapter_dir: str | Path, expected_sha256: str | None = None
) -> tuple[dict[str, np.ndarray], LoraAdapter]:
    """``merged_actor_state`` and the adapter it read (its metadata, read once)."""
    state = base_actor_state(base)
    adapter = read_adapter(
        adapter_dir, state, expected_sha256, base.spec.fingerprint(), str(base.version)
    )
    return merge(state, adapter), adapter

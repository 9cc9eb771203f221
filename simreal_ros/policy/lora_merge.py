"""peft LoRA adapters merged into the actor's weights in numpy: what every deployment runs.

An adapter is peft's standard pair, ``adapter_config.json`` + ``adapter_model.safetensors``
(``simreal_ros.learner.lora`` writes it with ``get_peft_model`` on the actor). Both are
read as data: the JSON with ``json``, the tensors with ``safetensors.numpy``. Neither torch
nor peft is imported, so the policy node merges a hot-swapped adapter on its loader thread
without holding the GIL for seconds of imports.

The merge is peft's for plain LoRA on ``nn.Linear`` and ``nn.Conv2d``
(``peft/tuners/lora/layer.py``: ``Linear.merge`` and ``_ConvNd.merge`` add
``get_delta_weight``)::

    W' = W + scaling * (B @ A)    scaling = lora_alpha / r  (lora_alpha / sqrt(r), use_rslora)
    b' = b                        (bias="none", lora_bias=false)

in float32, as peft computes it on a float32 model, with ``A`` = ``<layer>.lora_A.weight``
and ``B`` = ``<layer>.lora_B.weight`` under peft's key prefix ``base_model.model.``. For a
Linear layer A is (r, in) and B (out, r). For a Conv2d layer A is a conv with the layer's
kernel, (r, in, kh, kw), and B a 1x1 conv, (out, r, 1, 1); peft's delta (a matmul for 1x1
kernels, ``conv2d(A.transpose(0, 1), B).transpose(0, 1)`` otherwise) is the same
contraction over r, so both are ``B.reshape(out, r) @ A.reshape(r, -1)`` reshaped to the
weight. A state dict does not record a convolution's dilation or padding mode, whose LoRA
would not merge to the trained layer: ``simreal_ros.learner.lora`` refuses to target such
layers. test/core/test_policy_lora_merge.py and test/core/test_lora_conv_merge.py check
the merge against peft's ``merge_and_unload``.

Only that is merged. Anything else an adapter_config.json can ask for (DoRA, a LoRA bias,
trained base biases, per-layer rank or alpha patterns, regex targets or targets that are
neither Linear nor Conv2d (Conv1d, Conv3d), grouped convolutions, saved whole modules,
transposed (Conv1D) weights, initialisations that rewrite the base) is refused with a
``CheckpointError`` that names the field or layer, as are unknown tensors, shape or dtype
mismatches and non-finite values: never a silent fallback to another merge.
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
    "target_parameters": "LoRA on bare parameters is not LoRA on the actor's layers",
    "trainable_token_indices": "trainable tokens are for embeddings, which the actor lacks",
}
PLAIN_INITS = (True, False, "gaussian")  # initialise only A and B, which the file overwrites


class LayerDelta(NamedTuple):
    """One target layer's LoRA factors (float32): the delta is scaling * (b @ a)."""

    a: np.ndarray  # (r, in_features), or (r, in_channels, kh, kw) for a Conv2d
    b: np.ndarray  # (out_features, r), or (out_channels, r, 1, 1) for a Conv2d

    def weight_delta(self, scaling: np.float32) -> np.ndarray:
        """scaling * (B @ A) in the layer's weight shape (out, in[, kh, kw]), in peft's order:
        the product over r first, then the scaling."""
        rank = self.a.shape[0]
        product = self.b.reshape(self.b.shape[0], rank) @ self.a.reshape(rank, -1)
        return product.reshape(self.b.shape[:1] + self.a.shape[1:]) * scaling


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


def lora_layers(state: Mapping[str, np.ndarray]) -> dict[str, tuple[int, ...]]:
    """The layers this merge can target, from a state_dict: name -> weight shape.

    A Linear layer is a name with a 2-D ``.weight`` and a ``.bias`` (``model.Actor`` holds
    only such layers; ReLUs and the Sequential have no tensors), shape (out, in). A Conv2d
    is a name with a 4-D ``.weight``, (out, in, kh, kw), with or without a bias (a CNN
    encoder's convolutions often have none before a normalisation).
    """
    layers = {}
    for key, value in state.items():
        name, _, leaf = key.rpartition(".")
        if leaf != "weight":
            continue
        if (np.ndim(value) == 2 and f"{name}.bias" in state) or np.ndim(value) == 4:
            layers[name] = tuple(np.shape(value))
    return layers


def _unsupported_kernel(state: Mapping[str, np.ndarray], target: str) -> str | None:
    """Why a target that is a layer of the state, but not one lora_layers finds, is not
    merged (a Conv1d's 3-D or a Conv3d's 5-D kernel), or None when it is no such layer."""
    weight = state.get(f"{target}.weight")
    if weight is None or np.ndim(weight) not in (3, 5):
        return None
    kind = "Conv1d" if np.ndim(weight) == 3 else "Conv3d"
    return f"a {np.ndim(weight)}-D weight {tuple(np.shape(weight))}, a {kind} kernel"


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
    adapter_dir: Path, config: Mapping[str, Any], base_state: Mapping[str, np.ndarray]
) -> tuple[int, float, bool, list[str]]:
    """(r, lora_alpha, use_rslora, targets) from adapter_config.json, or a refusal."""
    retrain = "retrain the adapter with simreal_ros.learner.lora (plain LoRA)"
    layers = lora_layers(base_state)
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
                f"implement (it merges plain LoRA into the actor's Linear and Conv2d layers); "
                f"{retrain}, or extend simreal_ros/policy/lora_merge.py with a test against peft.",
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
            "weights; the actor's layers are nn.Linear (out, in) or nn.Conv2d. This adapter was "
            "not made for this actor; save it with fan_in_fan_out=false.",
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
            f"layer names instead (its Linear and Conv2d layers: {sorted(layers)}).",
        )
    if not (isinstance(targets, list) and targets and all(isinstance(t, str) for t in targets)):
        raise _refuse(
            adapter_dir,
            f"target_modules = {targets!r}; give a non-empty list of the actor's Linear and "
            f"Conv2d layer names ({sorted(layers)}).",
        )
    for target in targets:
        kernel = _unsupported_kernel(base_state, target)
        if kernel:
            raise _refuse(
                adapter_dir,
                f"target_modules: the actor's {target} has {kernel}; this merge handles "
                "nn.Linear (2-D) and nn.Conv2d (4-D) weights only. Retrain the adapter "
                f"without {target} in target_modules, or extend "
                "simreal_ros/policy/lora_merge.py with a test against peft.",
            )
    unknown = [t for t in targets if t not in layers]
    if unknown:
        raise _refuse(
            adapter_dir,
            f"target_modules: adapter targets {unknown} that are not Linear or Conv2d layers "
            f"of the actor (its Linear and Conv2d layers: {sorted(layers)}); the adapter was "
            "made for another model.",
        )
    return rank, float(alpha), use_rslora, list(dict.fromkeys(targets))


def _factor_shape(weight: tuple[int, ...], rank: int, ab: str) -> tuple[int, ...]:
    """peft's lora_A / lora_B shape for a layer of this weight shape at this rank."""
    if len(weight) == 2:  # Linear (out, in)
        return (rank, weight[1]) if ab == "A" else (weight[0], rank)
    # Conv2d (out, in, kh, kw): A has the layer's kernel, B is a 1x1 conv.
    return (rank, *weight[1:]) if ab == "A" else (weight[0], rank, 1, 1)


def _conv_groups(
    weight: tuple[int, ...], factor: tuple[int, ...], rank: int, ab: str
) -> int | None:
    """The groups of a grouped Conv2d that explains this lora_A's shape, or None.

    peft gives a grouped conv's lora_A all ``in_channels``, while the weight holds
    ``in_channels / groups`` per output channel."""
    if ab != "A" or len(weight) != 4 or len(factor) != 4:
        return None
    if factor[0] != rank or tuple(factor[2:]) != weight[2:] or factor[1] % weight[1]:
        return None
    groups = factor[1] // weight[1]
    return groups if groups > 1 else None


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
    layers = lora_layers(base_state)
    rank, alpha, use_rslora, targets = _checked_config(
        adapter_dir, _config(adapter_dir), base_state
    )
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
        what = f"{target}.lora_{ab}"
        shape = _factor_shape(layers[target], rank, ab)
        if tensor.dtype != np.float32:
            raise _refuse(
                adapter_dir,
                f"{what} is {tensor.dtype}; only float32 adapters (what the learner saves) "
                "are merged. Re-save it in float32.",
            )
        if tuple(tensor.shape) != shape:
            groups = _conv_groups(layers[target], tensor.shape, rank, ab)
            if groups:
                raise _refuse(
                    adapter_dir,
                    f"{what} has shape {tuple(tensor.shape)}, {groups} times the input channels "
                    f"of the actor's {target} (weight {layers[target]}): {target} is a grouped "
                    f"convolution (groups = {groups}), which peft itself does not merge. "
                    f"Retrain the adapter without {target} in target_modules.",
                )
            if len(layers[target]) == 2:
                out_features, in_features = layers[target]
                layer = f"({in_features} in, {out_features} out)"
            else:
                layer = f"(Conv2d weight {layers[target]})"
            raise _refuse(
                adapter_dir,
                f"{what} has shape {tuple(tensor.shape)}, but the actor's {target} {layer} at "
                f"r = {rank} needs {shape}: the adapter was made for another architecture, or r "
                f"in {ADAPTER_CONFIG} is wrong.",
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
    """A new actor state (float32 copies): each target's weight plus scaling * (B @ A)
    (see ``LayerDelta.weight_delta``; for a Conv2d, in the weight's (out, in, kh, kw)).

    The base arrays are not modified. Biases and untargeted layers are copied unchanged.
    """
    merged = {k: np.array(v, dtype=np.float32) for k, v in base_state.items()}
    scaling = np.float32(adapter.scaling)
    for target, delta in adapter.layers.items():
        with np.errstate(over="ignore", invalid="ignore"):  # refused just below
            weight = merged[f"{target}.weight"] + delta.weight_delta(scaling)
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

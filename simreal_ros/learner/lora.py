"""LoRA adapters on the actor (and optionally the critic) with peft, in peft's own format.

Targets are the module's nn.Linear and nn.Conv2d layers (a camera policy's CNN encoder);
simreal_ros.policy.lora_merge merges both kinds in numpy for deployment.

The base modules are never modified: wrapping works on a deep copy, so the pretrained
actor stays available (V_sim, the running policy, EWC anchors). An adapter directory holds
peft's ``adapter_config.json`` + ``adapter_model.safetensors`` and nothing executable.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"


def linear_layer_names(module: nn.Module) -> list[str]:
    return [name for name, m in module.named_modules() if isinstance(m, nn.Linear)]


def conv2d_layer_names(module: nn.Module) -> list[str]:
    return [name for name, m in module.named_modules() if isinstance(m, nn.Conv2d)]


def unmergeable_conv2d(conv: nn.Conv2d) -> str | None:
    """Why a LoRA on ``conv`` would not deploy as base + B @ A, or None when it would.

    peft builds lora_A with the layer's kernel, stride and padding only: a dilated kernel
    or a non-zero padding mode makes the merged layer compute something else than the
    trained one, and peft refuses to merge grouped convolutions.
    """
    if conv.groups != 1:
        return f"groups = {conv.groups} (peft cannot merge LoRA into a grouped convolution)"
    if any(d != 1 for d in conv.dilation):
        return f"dilation = {conv.dilation} (peft's lora_A ignores dilation)"
    if conv.padding_mode != "zeros":
        return f"padding_mode = {conv.padding_mode!r} (peft's lora_A pads with zeros)"
    return None


def lora_target_names(module: nn.Module) -> list[str]:
    """The default targets: every nn.Linear and every nn.Conv2d a LoRA merges into
    (grouped, dilated or non-zero-padded convolutions are left out: see unmergeable_conv2d)."""
    return [
        name
        for name, m in module.named_modules()
        if isinstance(m, nn.Linear) or (isinstance(m, nn.Conv2d) and not unmergeable_conv2d(m))
    ]


def lora_config(
    module: nn.Module,
    rank: int,
    alpha: int,
    dropout: float,
    targets: Sequence[str] = (),
    inference_mode: bool = False,
):
    from peft import LoraConfig  # imported late: peft costs ~2 s

    targets = list(targets) or lora_target_names(module)
    linear, conv2d = linear_layer_names(module), conv2d_layer_names(module)
    unknown = [t for t in targets if t not in linear and t not in conv2d]
    if unknown:
        raise ValueError(
            f"LoRA target(s) {unknown} are not nn.Linear layers or nn.Conv2d layers of "
            f"{type(module).__name__}; its Linear layers are {linear} and its Conv2d layers "
            f"{conv2d}."
        )
    modules = dict(module.named_modules())
    for target in targets:
        why = target in conv2d and unmergeable_conv2d(modules[target])
        if why:
            raise ValueError(
                f"LoRA target {target!r} is an nn.Conv2d with {why}, so its adapter could not "
                "be merged for deployment; leave it out of the targets."
            )
    return LoraConfig(
        r=rank,
        lora_alpha=alpha,
        lora_dropout=dropout,
        target_modules=targets,
        bias="none",
        inference_mode=inference_mode,
    )


def wrap(
    module: nn.Module,
    rank: int = 8,
    alpha: int = 16,
    dropout: float = 0.0,
    targets: Sequence[str] = (),
    init_adapter: str | Path | None = None,
):
    """A trainable peft model around a COPY of ``module``: only the LoRA weights train.

    ``init_adapter`` continues from an existing adapter (e.g. the running version), so each
    version stays "base + one adapter" while training picks up where the parent left off.
    """
    from peft import PeftModel, get_peft_model

    base = copy.deepcopy(module)
    for p in base.parameters():
        p.requires_grad_(False)
    if init_adapter is not None:
        model = PeftModel.from_pretrained(base, str(init_adapter), is_trainable=True)
    else:
        model = get_peft_model(base, lora_config(base, rank, alpha, dropout, targets))
    model.train()
    return model


def inner(peft_model) -> nn.Module:
    """The wrapped module with LoRA layers injected (call its own methods on it)."""
    return peft_model.base_model.model


def trainable_parameters(peft_model) -> list[tuple[str, nn.Parameter]]:
    return [(n, p) for n, p in peft_model.named_parameters() if p.requires_grad]


def save(peft_model, directory: str | Path) -> Path:
    """peft's standard files only (config + safetensors weights)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    peft_model.save_pretrained(str(directory), safe_serialization=True)
    # peft writes a model card we do not need; keep the directory to what is documented.
    readme = directory / "README.md"
    if readme.exists():
        readme.unlink()
    if not (directory / ADAPTER_WEIGHTS).is_file():
        raise RuntimeError(f"peft did not write {ADAPTER_WEIGHTS} into {directory}.")
    return directory


def load(module: nn.Module, directory: str | Path, trainable: bool = False):
    """Base module (copied) + adapter from ``directory``, unmerged."""
    from peft import PeftModel

    directory = Path(directory)
    for name in (ADAPTER_CONFIG, ADAPTER_WEIGHTS):
        if not (directory / name).is_file():
            raise FileNotFoundError(f"adapter {directory} has no {name}; not a peft adapter.")
    config = json.loads((directory / ADAPTER_CONFIG).read_text())
    if config.get("peft_type", "LORA") != "LORA":
        raise ValueError(f"adapter {directory}: peft_type {config.get('peft_type')!r}, not LORA.")
    base = copy.deepcopy(module)
    model = PeftModel.from_pretrained(base, str(directory), is_trainable=trainable)
    model.train(trainable)
    return model


def merged(peft_model) -> nn.Module:
    """A plain module with the adapter folded into the weights (fast for deployment)."""
    model = copy.deepcopy(peft_model).merge_and_unload()
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


@torch.no_grad()
def set_adapter_weights(peft_model, weights: dict[str, torch.Tensor]) -> None:
    """Overwrite LoRA weights by peft state-dict name (used to build test candidates)."""
    from peft import set_peft_model_state_dict

    result = set_peft_model_state_dict(peft_model, weights)
    unexpected = list(getattr(result, "unexpected_keys", []))
    if unexpected:
        raise ValueError(f"unknown adapter weights {unexpected[:4]}.")


def adapter_state(peft_model) -> dict[str, torch.Tensor]:
    from peft import get_peft_model_state_dict

    return {k: v.detach().clone() for k, v in get_peft_model_state_dict(peft_model).items()}

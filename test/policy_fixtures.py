"""Policy test fixtures shared by the checkpoint and LoRA merge tests."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import torch
from peft import LoraConfig, get_peft_model

from simreal_ros.policy import checkpoint as ckpt
from simreal_ros.robot.description import load_robot_description
from simreal_ros.training.model import ACTOR_LORA_TARGETS
from simreal_ros.training.torch_checkpoint import PolicyCheckpoint

ROBOT = load_robot_description()


def observation(rng: np.random.Generator) -> dict:
    return {
        "joint_position": np.asarray(ROBOT.home_position, dtype=float) + rng.normal(0, 0.05, 7),
        "joint_velocity": rng.normal(0, 0.1, 7),
        "object_position": np.array([0.55, 0.05, 0.025]),
        "object_orientation": np.array([1.0, 0.0, 0.0, 0.0]),
        "goal_position": np.array([0.6, -0.1, 0.025]),
    }


def trained_peft_actor(base: PolicyCheckpoint, seed: int = 0, **config):
    """peft LoRA on a copy of the actor, moved off its initialisation (B != 0) by a few
    optimiser steps, as training would."""
    torch.manual_seed(seed)
    options = {"r": 4, "lora_alpha": 8, "target_modules": list(ACTOR_LORA_TARGETS)} | config
    model = get_peft_model(copy.deepcopy(base.model.actor), LoraConfig(**options))
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0.0, 0.05)
    optimiser = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    obs, target = torch.randn(64, base.arch.obs_dim), torch.rand(64, base.arch.act_dim) - 0.5
    for _ in range(10):
        optimiser.zero_grad()
        torch.nn.functional.mse_loss(model(obs), target).backward()
        optimiser.step()
    return model


def save_adapter(model, base, directory: Path) -> Path:
    model.save_pretrained(str(directory))
    ckpt.write_adapter_metadata(directory, base, directory.name, base.version)
    return directory

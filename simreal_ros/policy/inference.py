"""Deployment-time policy: merged weights as numpy matrices, one call per control tick.

A small MLP in numpy costs a few microseconds and no torch dispatch; ``DeployedPolicy``
objects are immutable once built, so the node swaps versions by replacing one reference
between ticks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from simreal_ros.policy.checkpoint import (
    ADAPTER_WEIGHTS,
    PolicyCheckpoint,
    apply_adapter,
    sha256_file,
)
from simreal_ros.policy.spec import SpecConverter


class NumpyActor:
    """The deterministic actor (ReLU trunk, tanh(mean_head)) in float64 numpy."""

    def __init__(self, actor: torch.nn.Module) -> None:
        layers = [m for m in actor.trunk if isinstance(m, torch.nn.Linear)]
        self.weights = [layer.weight.detach().double().numpy().T.copy() for layer in layers]
        self.biases = [layer.bias.detach().double().numpy().copy() for layer in layers]
        self.head_w = actor.mean_head.weight.detach().double().numpy().T.copy()
        self.head_b = actor.mean_head.bias.detach().double().numpy().copy()

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        x = obs
        for w, b in zip(self.weights, self.biases, strict=True):
            x = x @ w
            x += b
            np.maximum(x, 0.0, out=x)
        return np.tanh(x @ self.head_w + self.head_b)


@dataclasses.dataclass(frozen=True)
class DeployedPolicy:
    """One runnable version: conventions, merged weights, and where it came from."""

    version: str
    converter: SpecConverter
    actor: NumpyActor
    source: str  # base checkpoint dir or adapter dir
    adapter_dir: Path | None = None
    adapter_sha256: str = ""  # of adapter_model.safetensors, for cache hits

    def act(self, obs: Mapping[str, Any]) -> np.ndarray:
        """Observation dict (SI units) -> absolute joint position targets (controller order)."""
        normalized = self.converter.normalized_observation(obs)
        action = self.actor(normalized)
        return self.converter.command_from_action(action, obs["joint_position"])


def deploy_base(checkpoint: PolicyCheckpoint, forward_kinematics=None) -> DeployedPolicy:
    return DeployedPolicy(
        version=checkpoint.version,
        converter=SpecConverter(checkpoint.spec, forward_kinematics),
        actor=NumpyActor(checkpoint.model.actor),
        source=str(checkpoint.path),
    )


def deploy_adapter(
    checkpoint: PolicyCheckpoint,
    adapter_dir: str | Path,
    version: str,
    expected_sha256: str | None = None,
    forward_kinematics=None,
) -> DeployedPolicy:
    """Merge an adapter into a copy of the base and build its runnable form (slow: off-thread)."""
    merged = apply_adapter(checkpoint, adapter_dir, expected_sha256)
    return DeployedPolicy(
        adapter_sha256=sha256_file(Path(adapter_dir) / ADAPTER_WEIGHTS),
        version=version,
        converter=SpecConverter(checkpoint.spec, forward_kinematics),
        actor=NumpyActor(merged),
        source=str(adapter_dir),
        adapter_dir=Path(adapter_dir),
    )


class TorchPolicy:
    """Same interface as DeployedPolicy over a torch actor (evaluation, pretraining)."""

    def __init__(
        self, actor: torch.nn.Module, converter: SpecConverter, version: str = ""
    ) -> None:
        self.actor = actor
        self.converter = converter
        self.version = version

    @torch.no_grad()
    def act(self, obs: Mapping[str, Any]) -> np.ndarray:
        normalized = torch.as_tensor(
            self.converter.normalized_observation(obs), dtype=torch.float32
        )
        action = self.actor(normalized).numpy().astype(np.float64)
        return self.converter.command_from_action(action, obs["joint_position"])

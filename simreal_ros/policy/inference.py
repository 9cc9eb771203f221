"""Deployment-time policy: merged weights as numpy matrices, one call per control tick.

A small MLP in numpy costs a few microseconds and no torch dispatch; ``DeployedPolicy``
objects are immutable once built, so the node swaps versions by replacing one reference
between ticks. Deploying never imports torch or peft when the base is a ``NumpyCheckpoint``:
adapters are merged in numpy (``lora_merge``), whatever the base, so the node and the
off-ROS evaluation run bit-identical weights for the same base and adapter.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from simreal_ros.policy.checkpoint import (
    NumpyCheckpoint,
)
from simreal_ros.policy.lora_merge import merged_with_adapter
from simreal_ros.policy.spec import LOG_STD_MAX, LOG_STD_MIN, SpecConverter, version_spec


class NumpyActor:
    """The actor (ReLU trunk, tanh(mean_head)) in float64 numpy: deterministic by default,
    or exploring from its own tanh-Gaussian (``explore``)."""

    def __init__(self, actor: Any) -> None:
        """From a torch actor, read through its ``state_dict()`` (torch is not imported)."""
        state = {name: value.detach().numpy() for name, value in actor.state_dict().items()}
        self._take_layers(state)

    @classmethod
    def from_state(cls, state: Mapping[str, np.ndarray]) -> NumpyActor:
        """From an actor's state_dict as numpy arrays (``NumpyCheckpoint.actor_state``)."""
        actor = cls.__new__(cls)
        actor._take_layers(state)
        return actor

    def _take_layers(self, state: Mapping[str, np.ndarray]) -> None:
        trunk = sorted(
            int(name.split(".")[1])
            for name in state
            if name.startswith("trunk.") and name.endswith(".weight")
        )

        def f64(name: str) -> np.ndarray:
            return np.asarray(state[name], dtype=np.float64)

        self.weights = [f64(f"trunk.{i}.weight").T.copy() for i in trunk]
        self.biases = [f64(f"trunk.{i}.bias").copy() for i in trunk]
        self.head_w = f64("mean_head.weight").T.copy()
        self.head_b = f64("mean_head.bias").copy()
        self.log_std_w = self.log_std_b = None
        if "log_std_head.weight" in state:
            self.log_std_w = f64("log_std_head.weight").T.copy()
            self.log_std_b = f64("log_std_head.bias").copy()

    def _features(self, obs: np.ndarray) -> np.ndarray:
        x = obs
        for w, b in zip(self.weights, self.biases, strict=True):
            x = x @ w
            x += b
            np.maximum(x, 0.0, out=x)
        return x

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        return np.tanh(self._features(obs) @ self.head_w + self.head_b)

    def explore(self, obs: np.ndarray, std_max: float, rng: np.random.Generator) -> np.ndarray:
        """tanh(mean + min(std, std_max) * N(0, 1)): the learner's exploration rule
        (``Actor.explore``), for collection episodes on the arm."""
        if self.log_std_w is None:
            raise ValueError("this actor has no log_std_head, so it cannot explore.")
        x = self._features(obs)
        log_std = np.clip(x @ self.log_std_w + self.log_std_b, LOG_STD_MIN, LOG_STD_MAX)
        std = np.minimum(np.exp(log_std), std_max) if std_max > 0 else np.exp(log_std)
        mean = x @ self.head_w + self.head_b
        return np.tanh(mean + std * rng.standard_normal(mean.shape))


class NumpyCameraActor(NumpyActor):
    """A camera actor: the CNN's keypoints (``policy.camera.NumpyEncoder``) join the
    normalised proprioception in the same trunk and heads."""

    def __init__(self, state: Mapping[str, np.ndarray], camera: Any, strides) -> None:
        from simreal_ros.policy.camera import NumpyEncoder

        self._take_layers(state)
        self.camera = camera
        self.encoder = NumpyEncoder(state, tuple(strides))
        self._image = np.empty((3, camera.height, camera.width), dtype=np.float64)
        self._warped = np.empty((camera.height, camera.width, 3), dtype=np.uint8)

    def inputs(self, obs: np.ndarray, image: np.ndarray) -> np.ndarray:
        from simreal_ros.policy.camera import normalized_image

        keypoints = self.encoder(normalized_image(image, self.camera, self._image, self._warped))
        return np.concatenate([obs, keypoints])

    def __call__(self, obs: np.ndarray, image: np.ndarray) -> np.ndarray:  # type: ignore[override]
        return super().__call__(self.inputs(obs, image))

    def explore(self, obs, std_max, rng, image=None):  # type: ignore[override]
        if image is None:
            raise ValueError("a camera actor explores from an image and proprioception.")
        return super().explore(self.inputs(obs, image), std_max, rng)


def actor_from_state(state: Mapping[str, np.ndarray], spec: Any, architecture: Mapping):
    """The numpy actor of a state dict: a camera actor when the spec has a camera."""
    if spec.camera is None:
        return NumpyActor.from_state(state)
    return NumpyCameraActor(state, spec.camera, architecture["encoder"]["strides"])


@dataclasses.dataclass(frozen=True)
class DeployedPolicy:
    """One runnable version: conventions, merged weights, and where it came from."""

    version: str
    converter: SpecConverter
    actor: NumpyActor
    source: str  # base checkpoint dir or adapter dir
    adapter_dir: Path | None = None
    adapter_sha256: str = ""  # of adapter_model.safetensors, for cache hits

    def act(
        self,
        obs: Mapping[str, Any],
        exploration_std_max: float = 0.0,
        rng: np.random.Generator | None = None,
    ) -> np.ndarray:
        """Observation dict (SI units) -> absolute joint position targets (controller order).

        With ``rng``, the action explores from the policy's own distribution, its std
        capped at ``exploration_std_max`` (0: uncapped); without, it is deterministic."""
        action = self.action(obs, exploration_std_max, rng)
        return self.converter.command_from_action(action, obs["joint_position"])

    def action(
        self,
        obs: Mapping[str, Any],
        exploration_std_max: float = 0.0,
        rng: np.random.Generator | None = None,
    ) -> np.ndarray:
        """The actor's normalised action in [-1, 1] for an observation dict (``act``'s,
        before conversion). A camera policy reads ``obs["image"]`` (RGB uint8, H x W x 3)."""
        normalized = self.converter.normalized_observation(obs)
        if self.converter.spec.camera is not None:
            if rng is None:
                return self.actor(normalized, obs["image"])
            return self.actor.explore(normalized, exploration_std_max, rng, image=obs["image"])
        if rng is None:
            return self.actor(normalized)
        return self.actor.explore(normalized, exploration_std_max, rng)


def deploy_base(checkpoint: Any, forward_kinematics=None) -> DeployedPolicy:
    """A base checkpoint's runnable form: a ``NumpyCheckpoint``, or a torch one
    (``training.torch_checkpoint.PolicyCheckpoint``) whose actor is read as arrays."""
    if isinstance(checkpoint, NumpyCheckpoint):
        state = checkpoint.actor_state
    else:  # read through state_dict(); torch is not imported here
        state = {k: v.detach().numpy() for k, v in checkpoint.model.actor.state_dict().items()}
    actor = actor_from_state(state, checkpoint.spec, checkpoint.metadata["architecture"])
    return DeployedPolicy(
        version=checkpoint.version,
        converter=SpecConverter(checkpoint.spec, forward_kinematics),
        actor=actor,
        source=str(checkpoint.path),
    )


def deploy_adapter(
    checkpoint: Any,
    adapter_dir: str | Path,
    version: str,
    expected_sha256: str | None = None,
    forward_kinematics=None,
    description: Any = None,
) -> DeployedPolicy:
    """Merge an adapter into a copy of the base (numpy, ``lora_merge``) and build its runnable
    form: milliseconds, no torch or peft; still best off the control thread (file reads).
    It runs with the per-tick step its metadata names (``version_spec``), checked against
    ``description``'s velocity limits when given."""
    merged, adapter = merged_with_adapter(checkpoint, adapter_dir, expected_sha256)
    spec = version_spec(checkpoint.spec, adapter.metadata, description)
    return DeployedPolicy(
        adapter_sha256=adapter.sha256,
        version=version,
        converter=SpecConverter(spec, forward_kinematics),
        actor=actor_from_state(merged, spec, checkpoint.metadata["architecture"]),
        source=str(adapter_dir),
        adapter_dir=Path(adapter_dir),
    )

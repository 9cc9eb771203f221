"""Pretraining a camera policy in sim: DAgger from the privileged scripted expert.

Teacher and student: the scripted expert (``sim.expert``) reads the cube's true pose and
labels any state; the student (``model.CameraActor``) sees only a camera frame and
proprioception. Each episode draws the scene's appearance from ``VisualRandomization``
(lighting, table and cube colours, camera pose jitter) and its dynamics from the training
profile, so neither a colour nor a camera pose is something the student can rely on.

1. ``demos``: expert episodes fix the proprioception's normalisation and seed the data;
2. ``scenes``: still scenes: half with the cube anywhere on the table and the arm in a pose
   from the demos drawn independently of it, half with the cube a few centimetres from
   where a demo had it while the hand pushed (partly hidden by the hand); the encoder first
   learns the cube's position from them alone (``perception_steps``);
3. ``dagger``: the student drives (mixed with the expert with probability
   ``expert_mix ** (round + 1)``), every visited frame is labelled with the expert's action,
   and the student is retrained on everything so far.

The loss is the squared error to the expert's normalised action plus ``object_weight`` x the
squared error of ``object_head``'s cube position (x, y) on the episode frames and on a
share of still scenes in every batch. Why the scenes: trained on episodes alone, the
encoder read the cube's position off the arm's pose (in an expert's episode the arm heads
for the cube) and missed it by 56 mm (median) on new episodes; with 12,000 scenes the
miss fell to 16 mm. Then the student failed where the hand hid the cube (a 16 mm median
miss on failed episodes, 30-39 mm while the hand was near, 5 mm on successful ones), and
scenes of the anywhere kind never show the hand at the cube. Frames are shifted by up to
``shift_px`` pixels in training (random crop of a padded frame, as DrQ), so a camera a few
pixels off does not move the policy.
"""

from __future__ import annotations

import dataclasses
import json
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from simreal_ros.config_schema import setting, validate
from simreal_ros.policy.camera import CAMERA_OBSERVATION_FIELDS, CameraSpec, normalized_image
from simreal_ros.policy.spec import SpecConverter, default_spec
from simreal_ros.robot.description_record import RobotDescription
from simreal_ros.training.model import ActorCritic, Architecture, EncoderArchitecture
from simreal_ros.training.torch_checkpoint import save_checkpoint


@dataclasses.dataclass
class CameraPretrainConfig:
    task: str = setting("push", "task to learn", choices=("push", "reach"))
    profile: str = setting(
        "randomized", "dynamics profile to train in (never a stand-in): nominal, randomized"
    )
    seed: int = setting(0, "seed of networks, rollouts and episode seeds", low=0)
    camera: str = setting("workspace", "the scene camera the policy sees through")
    width: int = setting(96, "image width (px)", low=16, high=640)
    height: int = setting(72, "image height (px)", low=16, high=480)
    demo_episodes: int = setting(100, "expert episodes before DAgger", low=1)
    dagger_iterations: int = setting(6, "DAgger rounds", low=0)
    dagger_episodes: int = setting(40, "student episodes per DAgger round", low=1)
    expert_mix: float = setting(0.5, "expert probability in round k: expert_mix ** (k + 1)",
                                low=0.0, high=1.0)  # fmt: skip
    scenes: int = setting(16000, "still scenes rendered for the cube-position target", low=1)
    perception_steps: int = setting(4000, "gradient steps on the scenes alone, first", low=0)
    scene_batch: int = setting(32, "scenes in every minibatch", low=1)
    demo_steps: int = setting(2500, "gradient steps after the demos", low=1)
    round_steps: int = setting(1200, "gradient steps after each DAgger round", low=1)
    batch_size: int = setting(64, "minibatch size", low=4)
    hidden: int = setting(256, "width of the trunk's two hidden layers", low=8)
    learning_rate: float = setting(1e-3, "Adam learning rate", low=1e-6, high=1e-1)
    object_weight: float = setting(1.0, "weight of the cube-position target", low=0.0)
    shift_px: int = setting(4, "largest random frame shift in training (px)", low=0, high=16)
    control_rate_hz: float = setting(20.0, "control rate of the policy", low=1.0, high=1000.0)
    threads: int = setting(2, "torch threads for training", low=1, high=64)

    def __post_init__(self) -> None:
        validate(self)
        from simreal_ros.sim.profiles import load_profile

        if load_profile(self.profile).is_stand_in:
            raise ValueError(
                f"profile {self.profile!r} is a stand-in for the arm: training must never see "
                "it. Pretrain in nominal, randomized or your own profile."
            )


# Still scenes cover the table where a push task may put or leave the cube (both conditions'
# start boxes and their goals), wider than any one episode's path.
SCENE_TABLE_LOW = np.array([0.33, -0.32])
SCENE_TABLE_HIGH = np.array([0.72, 0.32])


class SceneDataset:
    """Frames of still scenes with the cube's position on the table (x, y): no action."""

    def __init__(self, count: int, height: int, width: int) -> None:
        self.images = np.zeros((count, height, width, 3), np.uint8)
        self.objects = np.zeros((count, 2), np.float32)


class FrameDataset:
    """Growing arrays of (frame, proprioception, expert label, cube position)."""

    def __init__(self, height: int, width: int, obs_dim: int, act_dim: int) -> None:
        self.size = 0
        self.images = np.zeros((4096, height, width, 3), np.uint8)
        self.obs = np.zeros((4096, obs_dim), np.float32)
        self.labels = np.zeros((4096, act_dim), np.float32)
        self.objects = np.zeros((4096, 2), np.float32)  # the cube's (x, y)
        # The same instants seen under a reference appearance (FrameCollector's reference).
        self.paired = np.zeros((4096, height, width, 3), np.uint8)

    def add(self, image, obs, label, obj, paired=None) -> None:
        if self.size == len(self.images):
            for name in ("images", "obs", "labels", "objects", "paired"):
                old = getattr(self, name)
                grown = np.zeros((2 * len(old), *old.shape[1:]), old.dtype)
                grown[: self.size] = old
                setattr(self, name, grown)
        i = self.size
        self.images[i], self.obs[i], self.labels[i], self.objects[i] = image, obs, label, obj
        if paired is not None:
            self.paired[i] = paired
        self.size += 1


def shifted(images: torch.Tensor, pixels: int, generator: torch.Generator) -> torch.Tensor:
    """Each image shifted by up to ``pixels`` in x and y (edge-replicated padding, crop)."""
    if pixels <= 0:
        return images
    batch, _, height, width = images.shape
    padded = nn.functional.pad(images, (pixels,) * 4, mode="replicate")
    offsets = torch.randint(0, 2 * pixels + 1, (batch, 2), generator=generator)
    return torch.stack(
        [
            padded[i, :, oy : oy + height, ox : ox + width]
            for i, (oy, ox) in enumerate(offsets.tolist())
        ]
    )


class FrameCollector:
    """Episodes in sim through a camera, every frame stored with the expert's label.

    ``appearance``: a ``VisualRandomization`` (drawn per episode) or fixed settings. The
    student drives with probability 1 - ``expert_probability`` per step when given. With
    ``reference`` (fixed settings), each frame is also rendered under it (``data.paired``):
    the same instant as the policy was trained to see it."""

    def __init__(self, spec, robot: RobotDescription, profile: str, appearance, seed: int,
                 rng: np.random.Generator | None = None, reference=None):  # fmt: skip
        from simreal_ros.sim.expert import make_expert
        from simreal_ros.sim.gym_env import ArmTaskEnv
        from simreal_ros.sim.visuals import CameraObservations

        camera = spec.camera
        env = ArmTaskEnv(task=spec.task, profile=profile, condition="train",
                         control_rate_hz=spec.control_rate_hz, robot=robot)  # fmt: skip
        self.env = CameraObservations(env, camera.camera_name, camera.width, camera.height,
                                      appearance, np.random.default_rng(seed + 1))  # fmt: skip
        self.expert = make_expert(spec.task, robot, spec.control_rate_hz)
        self.rng = rng if rng is not None else np.random.default_rng(seed)
        self.set_spec(spec, SpecConverter.for_robot(spec, robot).forward_kinematics)
        self.data = FrameDataset(camera.height, camera.width, spec.obs_dim, spec.act_dim)
        self.reference = reference

    def set_spec(self, spec, forward_kinematics=None) -> None:
        self.spec = spec
        if forward_kinematics is None:
            forward_kinematics = self.converter.forward_kinematics
        kinematics = forward_kinematics
        self.converter = SpecConverter(spec, kinematics)

    def image_tensor(self, images: np.ndarray) -> torch.Tensor:
        """uint8 (N, H, W, 3) -> the spec's normalised (N, 3, H, W) float32, as the node
        normalises a frame (``normalized_image``)."""
        return torch.from_numpy(normalized_image(images, self.spec.camera)).to(torch.float32)

    def scenes(
        self, count: int, arm_poses: np.ndarray, seed: int, at_hand=None, at_hand_share=0.5
    ) -> SceneDataset:
        """``count`` still scenes, the appearance drawn afresh for each.

        Anywhere: the cube anywhere on the table at any yaw, the arm in one of ``arm_poses``
        (joint positions the task visits) drawn independently of it. In an episode the
        arm's pose tells where the cube is; here it cannot, so the encoder has to find it.
        At the hand (``at_hand_share`` of them, with ``at_hand``: arm poses and the cube's
        (x, y) recorded together while pushing): the cube moved up to a few centimetres
        from where it was, so it is seen partly hidden by the hand, where a pusher needs it.
        A scene whose cube would overlap the arm is drawn again."""
        import mujoco

        rng = np.random.default_rng(seed)
        physics = self.env.physics
        model, data = physics.model, physics.data
        cube_geom = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, "cube_geom")
        table_geom = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, "table")
        camera = self.spec.camera
        out = SceneDataset(count, camera.height, camera.width)
        z = physics.cube_half_size

        def overlaps_arm() -> bool:
            for contact in data.contact[: data.ncon]:
                pair = {int(contact.geom1), int(contact.geom2)}
                if cube_geom in pair and table_geom not in pair and contact.dist < 0.0:
                    return True
            return False

        for i in range(count):
            near = at_hand is not None and rng.random() < at_hand_share
            while True:
                if near:
                    k = rng.integers(len(at_hand[0]))
                    q, cube = at_hand[0][k], at_hand[1][k] + rng.normal(0.0, 0.02, 2)
                else:
                    q = arm_poses[rng.integers(len(arm_poses))]
                    cube = rng.uniform(SCENE_TABLE_LOW, SCENE_TABLE_HIGH)
                goal = rng.uniform(SCENE_TABLE_LOW, SCENE_TABLE_HIGH)
                physics.reset(joint_positions=q, cube_position=np.array([*cube, z]),
                              cube_yaw=float(rng.uniform(-np.pi / 4, np.pi / 4)),
                              goal=np.array([*goal, z]))  # fmt: skip
                if not overlaps_arm():
                    break
            self.env.scene.apply(self.env.appearance.sample(rng))
            out.images[i] = self.env.renderer.render()
            out.objects[i] = cube
        return out

    def rollout(self, seed: int, expert_probability: float, actor=None) -> bool:
        """One episode; ``actor`` is a torch ``CameraActor`` (None: the expert drives)."""
        observation, _ = self.env.reset(seed=seed, options={"condition": "train"})
        self.expert.reset()
        success = done = False
        while not done:
            q = np.asarray(observation["joint_position"], dtype=np.float64)
            label = self.converter.action_from_command(self.expert.act(observation), q)
            vector = self.converter.observation_vector(observation)
            cube = self.env.physics.object_position()[:2]  # the truth, not the measurement
            paired = None if self.reference is None else self.env.render_as(self.reference)
            self.data.add(observation["image"], vector, label, cube, paired)
            if (
                actor is None
                or expert_probability >= 1.0
                or self.rng.random() < expert_probability
            ):
                action = label
            else:
                with torch.no_grad():
                    obs_t = torch.as_tensor(self.converter.normalize(vector), dtype=torch.float32)
                    image_t = self.image_tensor(observation["image"][None])
                    action = actor(obs_t[None], image_t)[0].numpy().astype(np.float64)
            target = self.converter.command_from_action(action, q)
            observation, _, terminated, truncated, info = self.env.step(target)
            success = success or bool(info["success"])
            done = terminated or truncated
        return success


class CameraPretrainer:
    def __init__(self, config: CameraPretrainConfig, out: str | Path, *, robot: RobotDescription,
                 command: str = "") -> None:  # fmt: skip
        from simreal_ros.sim.visuals import VisualRandomization

        self.config, self.out, self.robot, self.command = config, Path(out), robot, command
        torch.manual_seed(config.seed)
        torch.set_num_threads(config.threads)
        self.rng = np.random.default_rng(config.seed)
        self.generator = torch.Generator().manual_seed(config.seed)
        self.randomization = VisualRandomization()
        self.camera = CameraSpec(camera_name=config.camera, width=config.width,
                                 height=config.height)  # fmt: skip
        spec = default_spec(robot, config.task, config.control_rate_hz, CAMERA_OBSERVATION_FIELDS)
        self.spec = dataclasses.replace(spec, camera=self.camera)
        self.collector = FrameCollector(
            self.spec, robot, config.profile, self.randomization, config.seed, self.rng
        )
        self.data = self.collector.data
        encoder = EncoderArchitecture(config.height, config.width)
        hidden = (config.hidden, config.hidden)
        self.arch = Architecture(self.spec.obs_dim, self.spec.act_dim, hidden, hidden,
                                 encoder=encoder)  # fmt: skip
        self.model = ActorCritic(self.arch)
        self.actor = self.model.actor
        self.optimizer = torch.optim.Adam(self.actor.parameters(), lr=config.learning_rate)
        self.scenes: SceneDataset | None = None
        self.object_mean = np.zeros(2)
        self.object_std = np.ones(2)
        self.next_seed = config.seed * 1_000_000
        self.log: list[dict[str, Any]] = []
        self.started = time.perf_counter()

    def rollout(self, expert_probability: float) -> bool:
        seed = self.next_seed
        self.next_seed += 1
        return self.collector.rollout(seed, expert_probability, self.actor)

    def _fit_statistics(self) -> None:
        n = self.data.size
        obs = self.data.obs[:n].astype(np.float64)
        self.spec = self.spec.with_statistics(obs.mean(0), obs.std(0))
        self.collector.set_spec(self.spec)

    def _render_scenes(self) -> None:
        """Still scenes with the demos' arm poses; they also fix the cube's normalisation."""
        n = self.data.size
        poses = self.data.obs[:n, : self.spec.act_dim].astype(np.float64)  # joint_position
        cubes = self.data.objects[:n].astype(np.float64)
        start, stop = next((a, b) for f, a, b in self.spec.layout() if f == "ee_position")
        hand = self.data.obs[:n, start : stop - 1].astype(np.float64)  # the tool's (x, y)
        pushing = np.linalg.norm(hand - cubes, axis=1) < 0.08
        at_hand = (poses[pushing], cubes[pushing]) if pushing.any() else None
        self.scenes = self.collector.scenes(
            self.config.scenes, poses, self.config.seed + 2, at_hand
        )
        objects = self.scenes.objects.astype(np.float64)
        self.object_mean, self.object_std = objects.mean(0), objects.std(0)

    # --- learning -----------------------------------------------------------------

    def train(self, steps: int, with_actions: bool = True) -> dict[str, float]:
        """``steps`` of Adam on the cube's position in still scenes (and, ``with_actions``,
        on the expert's actions and the cube's position in episode frames)."""
        config, scenes = self.config, self.scenes
        n = self.data.size
        mean = torch.as_tensor(self.spec.obs_mean, dtype=torch.float32)
        inv_std = 1.0 / torch.as_tensor(self.spec.obs_std, dtype=torch.float32)
        object_mean = torch.as_tensor(self.object_mean, dtype=torch.float32)
        object_std = torch.as_tensor(self.object_std, dtype=torch.float32)
        totals = {"action": 0.0, "object": 0.0, "scene": 0.0}
        self.actor.train()
        for _ in range(steps):
            pick = self.rng.integers(0, len(scenes.objects), config.scene_batch)
            images = [self.collector.image_tensor(scenes.images[pick])]
            objects = [torch.from_numpy(scenes.objects[pick])]
            if with_actions:
                index = self.rng.integers(0, n, config.batch_size)
                images.insert(0, self.collector.image_tensor(self.data.images[index]))
                objects.insert(0, torch.from_numpy(self.data.objects[index]))
            keypoints = self.actor.features(
                shifted(torch.cat(images), config.shift_px, self.generator)
            )
            target = (torch.cat(objects) - object_mean) / object_std
            errors = (self.actor.object_head(keypoints) - target).pow(2).mean(-1)
            scene_loss = errors[-config.scene_batch :].mean()
            loss = config.object_weight * scene_loss
            if with_actions:
                batch = config.batch_size
                obs = (torch.from_numpy(self.data.obs[index]) - mean) * inv_std
                action = self.actor.act_from_features(obs, keypoints[:batch])
                action_loss = nn.functional.mse_loss(
                    action, torch.from_numpy(self.data.labels[index])
                )
                object_loss = errors[:batch].mean()
                loss = loss + action_loss + config.object_weight * object_loss
                totals["action"] += float(action_loss.detach())
                totals["object"] += float(object_loss.detach())
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            totals["scene"] += float(scene_loss.detach())
        self.actor.eval()
        return {k: v / steps for k, v in totals.items() if v or k == "scene"}

    def run(self) -> Path:
        config = self.config
        demo_successes = sum(self.rollout(1.0) for _ in range(config.demo_episodes))
        self._fit_statistics()
        self._render_scenes()
        losses = self.train(config.perception_steps, with_actions=False)
        self._record("scenes", config.scenes, 0, losses)
        losses = self.train(config.demo_steps)
        self._record("demos", config.demo_episodes, demo_successes, losses)
        for k in range(config.dagger_iterations):
            mix = config.expert_mix ** (k + 1)
            successes = sum(self.rollout(mix) for _ in range(config.dagger_episodes))
            losses = self.train(config.round_steps)
            self._record(f"dagger {k + 1} (expert {mix:.3f})", config.dagger_episodes,
                         successes, losses)  # fmt: skip
        return self.save()

    def _record(self, phase: str, episodes: int, successes: int, losses: dict) -> None:
        entry = {
            "phase": phase,
            "episodes": episodes,
            "successes": successes,
            "frames": self.data.size,
            "minutes": round((time.perf_counter() - self.started) / 60, 2),
            **{f"{k}_loss": round(v, 5) for k, v in losses.items()},
        }
        self.log.append(entry)
        print(json.dumps(entry), flush=True)

    def save(self) -> Path:
        minutes = (time.perf_counter() - self.started) / 60
        return save_checkpoint(
            self.out,
            self.model,
            self.spec,
            version=f"{self.config.task}-camera-v1",
            gamma=0.99,
            training={
                "command": self.command,
                "method": (
                    "DAgger from the scripted privileged expert, with visual domain "
                    "randomisation and a cube-position target on the encoder's keypoints"
                ),
                "config": dataclasses.asdict(self.config),
                "visual_randomization": self.randomization.to_dict(),
                "object_normalization": {
                    "mean": self.object_mean.tolist(),
                    "std": self.object_std.tolist(),
                },
                "log": self.log,
                "minutes": round(minutes, 1),
                "frames": self.data.size,
                "host": {"cpus": _cpus(), "machine": platform.machine()},
                "torch_threads": torch.get_num_threads(),
            },
        )


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()

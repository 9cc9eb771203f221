"""Benchmark: the cube's pose from the marker perception against the simulator's truth, and
the shipped push policy run on it against the privileged pose, on the same seeds.

Run: PYTHONPATH=. .venv/bin/python bench/perception.py [--seeds 50] [--robot simreal_arm]

Both runs go through the project's evaluation path (``evaluate_episode``: one episode per
seed of the push task's train condition, nominal dynamics, the shipped state policy):

  - privileged: the observation's cube pose is the simulator's, as the sim bridge publishes
    it by default;
  - perception: the scene's workspace camera renders a frame every ``--frame-every`` control
    periods (1: 20 Hz, the policy's rate), ``MarkerPoseEstimator`` turns it into the pose,
    and the policy acts on the newest pose while it is at most ``--max-age`` old (the policy
    node's max_observation_age); older, the arm holds where it is (the policy node skips the
    tick and the safety filter holds), as the graph does with
    ``simreal up --perception marker``.

Prints the pose error of every frame with a pose (median, p95, mm; orientation in degrees),
the share of frames with a pose (the rest: the marker hidden, mostly by the tool), the
per-frame perception latency (median, p99 ms) beside the render cost of the same frame,
and the two success rates with Wilson 95% intervals. The off-ROS perception run has no
transport delay: the graph adds the camera's period and DDS to the pose's age.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from simreal_ros import resources, stats
from simreal_ros.perception import SIM_CAMERA, SIM_CAMERA_CALIBRATION, SIM_CAMERA_SIZE
from simreal_ros.perception.markers import (
    CameraExtrinsic,
    MarkerConfig,
    MarkerPoseEstimator,
    grayscale,
    load_extrinsic,
)
from simreal_ros.sim.rendering import ensure_headless_gl


class PerceivedPose:
    """An ``ArmTaskEnv`` whose observations carry the perceived cube pose, and which holds
    the arm (the measured joint positions as the command) while that pose is stale."""

    def __init__(
        self,
        env,
        config: MarkerConfig,
        extrinsic: CameraExtrinsic,
        frame_every: int,
        max_age_s: float,
        camera: str = SIM_CAMERA,
    ) -> None:
        from simreal_ros.sim.rendering import CameraRenderer

        self.env = env
        self.physics = env.core.physics
        self.renderer = CameraRenderer(self.physics, camera, *SIM_CAMERA_SIZE)
        self.camera_matrix = self.renderer.camera_matrix()
        self.estimator = MarkerPoseEstimator(config, extrinsic)
        self.frame_every = frame_every
        self.max_age_s = max_age_s
        self.period_s = 1.0 / env.core.config.control_rate_hz
        self.position_error_mm: list[float] = []
        self.angle_error_deg: list[float] = []
        self.perceive_ms: list[float] = []
        self.render_ms: list[float] = []
        self.frames = self.poses = self.held_steps = self.steps = 0
        self.core = env.core  # evaluate_episode reads the safety filter's counts here

    def reset(self, seed=None, options=None):
        observation, info = self.env.reset(seed=seed, options=options)
        self._pose = None
        self._pose_time = -np.inf
        self._time = 0.0
        self._step = 0
        return self._perceived(observation), info

    def step(self, command):
        self.steps += 1
        if self._stale:  # the policy node skipped this tick: hold where the arm is
            self.held_steps += 1
            command = self.physics.measured_joint_positions()
        observation, reward, terminated, truncated, info = self.env.step(command)
        self._time += self.period_s
        self._step += 1
        return self._perceived(observation), reward, terminated, truncated, info

    def _perceived(self, observation: dict) -> dict:
        if self._step % self.frame_every == 0:
            self._frame()
        self._stale = self._time - self._pose_time > self.max_age_s
        if self._pose is None:
            return observation  # stale from the start: the arm holds, the policy is unused
        position, orientation = self._pose
        return {**observation, "object_position": position, "object_orientation": orientation}

    def _frame(self) -> None:
        start = time.perf_counter()
        pixels = self.renderer.render()
        rendered = time.perf_counter()
        detection = self.estimator.estimate(grayscale(pixels, "rgb8"), self.camera_matrix)
        self.render_ms.append(1000.0 * (rendered - start))
        self.perceive_ms.append(1000.0 * (time.perf_counter() - rendered))
        self.frames += 1
        pose = detection.pose
        if pose is None:
            return
        self.poses += 1
        truth_q = self.physics.object_orientation()
        error = np.linalg.norm(pose.position - self.physics.object_position())
        self.position_error_mm.append(1000.0 * float(error))
        cosine = min(1.0, abs(float(np.dot(pose.orientation_wxyz, truth_q))))
        self.angle_error_deg.append(float(np.degrees(2.0 * np.arccos(cosine))))
        self._pose = (pose.position, pose.orientation_wxyz)
        self._pose_time = self._time

    def close(self) -> None:
        self.renderer.close()
        self.env.close()


def _rate(successes: int, episodes: int) -> str:
    low, high = stats.wilson_interval(successes, episodes)
    return (
        f"{successes}/{episodes} = {successes / episodes:.0%} (Wilson 95% {low:.0%}..{high:.0%})"
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=50, help="episodes: seeds 0..N-1")
    parser.add_argument("--robot", default="simreal_arm", help="simreal_arm or panda")
    parser.add_argument(
        "--frame-every", type=int, default=1, help="control periods per camera frame (1: 20 Hz)"
    )
    parser.add_argument(
        "--max-age", type=float, default=0.5, help="oldest pose the policy acts on (s)"
    )
    args = parser.parse_args(argv)
    ensure_headless_gl()
    import torch

    from simreal_ros.policy.checkpoint import shipped_checkpoint
    from simreal_ros.robot.description import load_robot_description
    from simreal_ros.sim.gym_env import ArmTaskEnv
    from simreal_ros.training.evaluate import PolicySource, build_policy, evaluate_episode

    torch.set_num_threads(1)
    robot = load_robot_description(args.robot)
    policy = build_policy(PolicySource(str(shipped_checkpoint("push", robot))), robot=robot)
    rate = policy.converter.spec.control_rate_hz
    seeds = range(args.seeds)
    calibration = resources.data_path("config", SIM_CAMERA_CALIBRATION)
    config = MarkerConfig(extrinsic_file=str(calibration))

    def env() -> ArmTaskEnv:
        return ArmTaskEnv(task="push", control_rate_hz=rate, robot=robot)

    print(f"push, train, nominal, {robot.name}, shipped policy, seeds 0..{args.seeds - 1}")
    width, height = SIM_CAMERA_SIZE
    print(
        f"camera {SIM_CAMERA} {width}x{height}, a frame every {args.frame_every} of the "
        f"{rate:g} Hz control periods, poses used up to {args.max_age:g} s old"
    )
    start = time.perf_counter()
    privileged = env()
    baseline = [evaluate_episode(privileged, policy, s, "train").success for s in seeds]
    privileged.close()
    privileged_s = time.perf_counter() - start
    start = time.perf_counter()
    extrinsic = load_extrinsic(config.extrinsic_file)
    perceived = PerceivedPose(env(), config, extrinsic, args.frame_every, args.max_age)
    outcome = [evaluate_episode(perceived, policy, s, "train").success for s in seeds]
    perceived.close()
    perceived_s = time.perf_counter() - start

    p = perceived
    position, angle = p.position_error_mm, p.angle_error_deg
    print(
        f"frames {p.frames}, with a pose {p.poses} ({p.poses / max(p.frames, 1):.1%}); "
        f"control steps held for a stale pose {p.held_steps}/{p.steps} "
        f"({p.held_steps / max(p.steps, 1):.1%})"
    )
    print(
        f"position error mm: median {stats.percentile(position, 50):.2f}, "
        f"p95 {stats.percentile(position, 95):.2f}, max {max(position, default=np.nan):.2f}"
    )
    print(
        f"orientation error deg: median {stats.percentile(angle, 50):.2f}, "
        f"p95 {stats.percentile(angle, 95):.2f}"
    )
    perceive, render = p.perceive_ms, p.render_ms
    print(
        f"per frame ms: perception median {stats.percentile(perceive, 50):.2f}, p99 "
        f"{stats.percentile(perceive, 99):.2f}; render median {stats.percentile(render, 50):.2f}"
        f", p99 {stats.percentile(render, 99):.2f}; perception/render "
        f"{stats.percentile(perceive, 50) / stats.percentile(render, 50):.2f}"
    )
    print(f"success privileged pose: {_rate(sum(baseline), len(baseline))} ({privileged_s:.0f} s)")
    print(f"success perceived pose:  {_rate(sum(outcome), len(outcome))} ({perceived_s:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Learner update throughput: a LoRA (peft) update step against a plain torch loop.

Both train the same actor (the shipped architecture: spec observation layout, 256x256)
with the same BC loss, batch and Adam, in the same process, interleaved in rounds so
machine noise hits both. Target: LoRA samples/s >= 0.8x the plain loop's. Also prints the
full SGFT step (critic + actor, horizon-indexed critic) for reference.

    PYTHONPATH=. .venv/bin/python bench/learner.py [--batch 256] [--steps 200] [--rounds 5]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import numpy as np
import torch

from simreal_ros.learner import lora
from simreal_ros.learner.bc import bc_loss
from simreal_ros.learner.replay import Transitions, batch_from
from simreal_ros.learner.sac_finetune import ActorCriticFineTuner
from simreal_ros.learner.sgft import HorizonCritic
from simreal_ros.policy.spec import default_spec
from simreal_ros.robot.description import load_robot_description
from simreal_ros.training.model import ActorCritic, Architecture


def make_data(n: int, obs_dim: int, act_dim: int, seed: int = 0) -> Transitions:
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(n, obs_dim)).astype(np.float32)
    return Transitions(
        obs=obs,
        actions=rng.uniform(-1, 1, size=(n, act_dim)).astype(np.float32),
        rewards=rng.normal(size=n).astype(np.float32),
        next_obs=obs + 0.01,
        terminals=np.zeros(n, bool),
        truncateds=np.zeros(n, bool),
        episode_ids=np.asarray(["e"] * n),
        sources=np.asarray(["real"] * n),
        interventions=np.zeros(n, bool),
        episode_success=np.ones(n, bool),
        v_sim=rng.normal(size=n).astype(np.float32),
        v_sim_next=rng.normal(size=n).astype(np.float32),
    )


def timed_steps(step, batches, steps: int) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this thread) for ``steps`` update steps."""
    wall, cpu = time.perf_counter(), time.thread_time()
    for i in range(steps):
        step(batches[i % len(batches)])
    return time.perf_counter() - wall, time.thread_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    spec = default_spec(load_robot_description(), "push")
    arch = Architecture(spec.obs_dim, spec.act_dim)
    model = ActorCritic(arch)
    data = make_data(4096, spec.obs_dim, spec.act_dim)
    rng = np.random.default_rng(1)
    batches = [
        batch_from(data, rng.integers(0, len(data), args.batch), np.ones(args.batch, bool))
        for _ in range(16)
    ]

    plain_actor = copy.deepcopy(model.actor).train()
    plain_opt = torch.optim.Adam(plain_actor.parameters(), lr=3e-4)

    def plain_step(batch):
        loss = bc_loss(plain_actor, batch)
        plain_opt.zero_grad(set_to_none=True)
        loss.backward()
        plain_opt.step()

    peft_actor = lora.wrap(model.actor, rank=8, alpha=16)
    lora_inner = lora.inner(peft_actor)
    lora_opt = torch.optim.Adam([p for _, p in lora.trainable_parameters(peft_actor)], lr=3e-4)

    def lora_step(batch):
        loss = bc_loss(lora_inner, batch)
        lora_opt.zero_grad(set_to_none=True)
        loss.backward()
        lora_opt.step()

    tuner = ActorCriticFineTuner(
        lora.wrap(model.actor, rank=8, alpha=16),
        HorizonCritic(arch.obs_dim, arch.act_dim, 3, arch.critic_hidden),
        data, gamma=0.99, horizon=3, shaping=True, batch_size=args.batch, sim_replay=False,
    )  # fmt: skip

    for step in (plain_step, lora_step):  # warm-up
        timed_steps(step, batches, 10)
    tuner.train(5)
    # Alternate short chunks of each so load changes on a shared machine hit both alike;
    # CPU time of this thread is the primary measure (wall time is printed too).
    chunk = max(args.steps // 10, 1)
    totals = {"plain": [0.0, 0.0], "lora": [0.0, 0.0]}
    plain_rates, lora_rates, sgft_rates = [], [], []
    for _ in range(args.rounds):
        round_totals = {"plain": [0.0, 0.0], "lora": [0.0, 0.0]}
        for _ in range(args.steps // chunk):
            for name, step in (("plain", plain_step), ("lora", lora_step)):
                wall, cpu = timed_steps(step, batches, chunk)
                round_totals[name][0] += wall
                round_totals[name][1] += cpu
        samples = (args.steps // chunk) * chunk * args.batch
        plain_rates.append(samples / round_totals["plain"][1])
        lora_rates.append(samples / round_totals["lora"][1])
        for name in totals:
            totals[name][0] += round_totals[name][0]
            totals[name][1] += round_totals[name][1]
        sgft_rates.append(tuner.train(max(args.steps // 4, 1))["samples_per_s"])
    plain, lora_rate = statistics.median(plain_rates), statistics.median(lora_rates)
    ratio = lora_rate / plain
    wall_ratio = totals["plain"][0] / totals["lora"][0]
    trainable = sum(p.numel() for _, p in lora.trainable_parameters(peft_actor))
    total = sum(p.numel() for p in plain_actor.parameters())
    print(
        f"actor {arch.obs_dim}->{arch.actor_hidden}->{arch.act_dim}, batch {args.batch}, "
        f"{args.threads} thread(s), median of {args.rounds} rounds x {args.steps} steps"
    )
    print(f"plain torch BC step (all {total} params): {plain:10.0f} samples/s (CPU time)")
    print(f"LoRA peft BC step   ({trainable} params):  {lora_rate:10.0f} samples/s (CPU time)")
    verdict = "OK" if ratio >= 0.8 else "BELOW"
    print(
        f"ratio LoRA / plain: {ratio:.2f} (target >= 0.80) {verdict}; "
        f"wall-time ratio {wall_ratio:.2f}"
    )
    print(
        f"SGFT H=3 step (critic + LoRA actor): {statistics.median(sgft_rates):10.0f} "
        "samples/s (wall)"
    )


if __name__ == "__main__":
    main()

"""Where SGFT's pieces fall short on a stand-in, measured before changing them.

SGFT shapes the arm's reward with V_sim, trains an H-step critic with V_sim as its terminal
value, and can add short rollouts from a dynamics model fitted to the arm's transitions.
Each piece holds only as far as:

1. V_sim ranks the stand-in's states: Spearman's rho of V_sim(s) with the Monte-Carlo
   return-to-go on the base policy's own episodes, in the randomised sim it was trained in
   and on the stand-in (``premise.value_rank``);
2. the dynamics model predicts the stand-in H steps ahead: ``ModelRollouts`` (the
   learner's model) pretrained on randomised-sim transitions, then fine-tuned on K
   stand-in episodes; on held-out stand-in episodes it replays the recorded actions open
   loop from each recorded state and is scored on the recorded observation H steps later
   (RMS over the normalised observation), beside the sim-only model and "nothing moves"
   (the state as it was);
3. the critic fits the shaped reward it is taught: SGFT H = 1's critic regresses exactly on
   r~ = scale * (r + gamma V_sim(s') - V_sim(s)), so after one learner round on the K
   stand-in episodes (``LearnerSession.finetune``, the learner's own update) its error on
   them and on the held-out episodes, as R^2 against r~'s own variance, says whether the
   critic, not V_sim, is what the actor is misled by.

Prints one table per piece. The stand-in is simulated, never the physical arm.

    PYTHONPATH=. .venv/bin/python bench/sgft_pieces.py --profile drake_worn [--robot panda]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

HORIZONS = (1, 3, 5, 10)


def horizon_error(model, data, horizon: int) -> tuple[float, float]:
    """RMS error of the model's and of "nothing moves"'s prediction ``horizon`` steps ahead,
    over every start in ``data`` with ``horizon`` recorded steps after it."""
    model_err, still_err = [], []
    for _, start, stop in data.episode_boundaries():
        for t in range(start, stop - horizon + 1):
            obs = torch.as_tensor(data.obs[t : t + 1])
            with torch.no_grad():
                for k in range(horizon):
                    obs, _ = model.model(obs, torch.as_tensor(data.actions[t + k : t + k + 1]))
            truth = data.next_obs[t + horizon - 1]
            model_err.append(np.mean((obs.numpy()[0] - truth) ** 2))
            still_err.append(np.mean((data.obs[t] - truth) ** 2))
    if not model_err:
        return float("nan"), float("nan")
    return float(np.sqrt(np.mean(model_err))), float(np.sqrt(np.mean(still_err)))


def critic_fit(checkpoint, sim, arm, held, robot) -> list[tuple[str, float, float, float]]:
    """SGFT H=1 trained one learner round on ``arm``; its critic's (min of the twin heads)
    R^2, RMS error and r~'s std on ``arm`` (fitted) and on ``held`` (held out), r~ being
    the target the learner's own update computes (``training_rewards``)."""
    import tempfile

    from simreal_ros.learner.config import LearnerConfig
    from simreal_ros.learner.replay import batch_from
    from simreal_ros.learner.session import LearnerSession

    with tempfile.TemporaryDirectory() as store:
        config = LearnerConfig(method="sgft", horizon=1, critic_init="fresh", store_root=store)
        session = LearnerSession(config, checkpoint, sim_data=sim, robot=robot)
        session.finetune(arm)
        tuner, rows = session.trainer.tuner, []
        for name, data in (("fitted", arm), ("held out", held)):
            session.critics.annotate(data)
            batch = batch_from(data, np.arange(len(data)), np.ones(len(data), bool))
            with torch.no_grad():
                target = tuner.training_rewards(batch).numpy()
                q1, q2 = tuner.critic(batch.obs, batch.actions)
            q = torch.minimum(q1, q2)[:, 0].numpy()
            error = float(np.mean((q - target) ** 2))
            spread = float(np.var(target))
            rows.append((name, 1.0 - error / spread, float(np.sqrt(error)), spread**0.5))
    return rows


def main(argv=None) -> int:
    from simreal_ros.learner.data import collect_sim_transitions
    from simreal_ros.learner.dynamics_model import ModelRollouts
    from simreal_ros.learner.premise import value_rank
    from simreal_ros.policy.checkpoint import shipped_checkpoint
    from simreal_ros.robot.description import load_robot_description
    from simreal_ros.training.torch_checkpoint import load_checkpoint

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="drake_worn", help="the stand-in's profile")
    parser.add_argument("--robot", default=None, help="arm (default: the first)")
    parser.add_argument("--checkpoint", default=None, help="base (default: shipped push)")
    parser.add_argument("--episodes", type=int, default=20, help="V_sim rank episodes")
    parser.add_argument("--sim-episodes", type=int, default=40, help="model pretraining")
    parser.add_argument("--arm-episodes", type=int, default=10, help="model fine-tuning (K)")
    parser.add_argument("--held-out", type=int, default=10, help="held-out stand-in episodes")
    parser.add_argument("--updates", type=int, default=3000, help="model updates per stage")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    robot = load_robot_description(args.robot)
    checkpoint = load_checkpoint(args.checkpoint or shipped_checkpoint("push", robot))
    started = time.time()
    print(f"stand-in {args.profile} (simulated, not the physical arm), arm {robot.name}")

    print("\n1. V_sim's rank correlation with the return-to-go (base policy's own states)")
    for profile in ("randomized", args.profile):
        rho = value_rank(checkpoint, "push", profile, args.episodes, 2000, robot=robot)
        print(f"   {profile:>12}: rho {rho:.2f} over {args.episodes} episodes")

    print(f"\n2. the dynamics model H steps ahead on {args.held_out} held-out stand-in episodes")
    sim = collect_sim_transitions(checkpoint, "push", args.sim_episodes, seed=3000,
                                  profile="randomized", robot=robot)  # fmt: skip
    arm = collect_sim_transitions(checkpoint, "push", args.arm_episodes, seed=4000,
                                  profile=args.profile, robot=robot)  # fmt: skip
    held = collect_sim_transitions(checkpoint, "push", args.held_out, seed=5000,
                                   profile=args.profile, noise=0, robot=robot)  # fmt: skip
    spec = checkpoint.spec
    sim_only = ModelRollouts(spec.obs_dim, spec.act_dim, seed=0)
    sim_only.fit(sim, args.updates)
    tuned = ModelRollouts(spec.obs_dim, spec.act_dim, seed=0)
    tuned.model.load_state_dict(sim_only.model.state_dict())
    tuned.fit(arm, args.updates)
    arm_only = ModelRollouts(spec.obs_dim, spec.act_dim, seed=0)
    arm_only.fit(arm, args.updates)
    print("   H | sim only | sim, then arm | arm only | nothing moves   (RMS, normalised obs)")
    for h in HORIZONS:
        rows = [horizon_error(m, held, h) for m in (sim_only, tuned, arm_only)]
        print(f"  {h:>2} | {rows[0][0]:8.3f} | {rows[1][0]:13.3f} | {rows[2][0]:8.3f} | "
              f"{rows[0][1]:.3f}")  # fmt: skip
    print(f"\n3. SGFT H=1's critic against r~ after one learner round on the {args.arm_episodes}"
          " stand-in episodes")  # fmt: skip
    for name, r2, rms, spread in critic_fit(checkpoint, sim, arm, held, robot):
        print(f"   {name:>9}: R^2 {r2:6.2f}, RMS {rms:.3f} against r~'s std {spread:.3f}")
    print(f"\n{len(arm)} arm transitions from {args.arm_episodes} episodes; "
          f"{time.time() - started:.0f} s")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

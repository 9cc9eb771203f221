"""Sample efficiency on a STAND-IN for the physical arm: is SGFT more sample-efficient than
RL fine-tuning?

The stand-in is ``ArmTaskEnv(profile=--profile)`` (default ``real_twin``): a simulated arm
with a fixed, hidden dynamics gap that plays the part of the physical arm. It is not a
physical arm, and everything printed says so.

Arms (``METHODS``; each row lists the only LearnerConfig fields it changes, every other
learner setting is shared, and each job's full LearnerConfig is recorded in the JSON):
zero-shot, filtered BC-LoRA (clones the successful episodes of its own collection), RL
fine-tuning (SAC, critic warm-started from the checkpoint), an RLPD-style RL-FT (fresh
LayerNorm critics, 50/50 real and sim batches, ten updates per new real transition), SGFT
with H = 1, 3 and infinite (fresh critics; H = 1 also with the sim-advantage warm start),
and online system identification (``sysid``: each round its stand-in episodes are recorded
as bags, the sim is identified from all of them so far, and the policy is fine-tuned in the
identified sim alone; it is counted by the stand-in episodes it identified from), and the
loop's default, sim-side adaptation (``adapt``: the same bags and identification, then the
sim training recipe in the identified sim, learner/adaptation.py, from the running policy).

Each (method, seed) job runs rounds off ROS through the learner's own code path
(``simreal_ros.learner.stand_in_rounds``): collect K stand-in episodes with the current
policy's own action distribution, labelled ``real_twin`` so the learner treats them as real
data; ``LearnerSession.finetune`` then ``session.commit`` with no sim gate (the bench
measures learning, not gating); evaluate the deployed, merged adapter on the stand-in.

Paired design: every evaluation uses the same fixed starts (seeds ``--eval-first-seed``
onward) for every method, round and bench seed, and collection starts depend on
(bench seed, round) only, so the arms see the same states. Round 0 is the zero-shot
evaluation, shared by all. Intervals are over training seeds on those fixed starts.

Primary statistic: the normalised area under the success-vs-stand-in-episodes step
function over the budget (K x rounds; 1.0 = 100% from the start), compared per seed as
arm - RL-FT with a percentile bootstrap over seeds, for each arm that brings sim
knowledge (the SGFT arms, ``sysid`` and ``adapt``; SGFT H=1 is the primary when it runs).
A job stops after two consecutive evaluations at the target; its last rate then holds to
the budget.

Secondary: stand-in episodes (and simulated minutes of stand-in data) until the target is
held on two consecutive evaluations (the first counts); a seed that never does is
censored at the budget. Reported as the Kaplan-Meier restricted mean up to the budget and
the RL-FT/arm ratio of restricted means with a paired bootstrap; censoring turns the
ratio into a bound and the printout says which. Also: each arm's early dip (lowest success
in rounds 1-2 minus zero-shot) and SGFT's V_sim-exploit flags.

V_sim: a base whose critics were never trained would make SGFT's shaping (and RL-FT's warm
start) noise; ``--fit-v-sim auto`` then fits them to the base actor's value in sim
(randomized profile, never the stand-in) once, before any job.

``--quick`` is the small preset (``QUICK``); the default preset (``FULL``) has more seeds
and a budget past 5 minutes of stand-in data. Results and run times are recorded in
docs/results.md and the README's results table, not here. Run:

    PYTHONPATH=. .venv/bin/python bench/sample_efficiency.py --quick --out /tmp/se.json
    # the horizon ablation:
    PYTHONPATH=. .venv/bin/python bench/sample_efficiency.py --quick \\
        --methods zero_shot,rl_ft,sgft_h1_simadv,sgft_h3,sgft_hinf --out /tmp/se_h.json
    # the online system identification baseline:
    PYTHONPATH=. .venv/bin/python bench/sample_efficiency.py --quick \
        --methods zero_shot,rl_ft,sysid --out /tmp/se_sysid.json
    # the RLPD-style RL-FT on the worn second-engine stand-in:
    PYTHONPATH=. .venv/bin/python bench/sample_efficiency.py --quick --profile drake_worn \
        --methods zero_shot,rl_ft,rlpd --out /tmp/se_rlpd.json
    # the loop's default, sim-side adaptation, on the issue's 10-episode budget:
    PYTHONPATH=. .venv/bin/python bench/sample_efficiency.py --quick --max-rounds 2 \
        --methods zero_shot,rl_ft,adapt --out /tmp/se_adapt.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))

from simreal_ros.learner.stand_in_experiment import Experiment, RoundsConfig  # noqa: E402
from simreal_ros.learner.stand_in_rounds import run_experiment  # noqa: E402
from simreal_ros.learner.stand_in_summary import format_table, plot_curves  # noqa: E402
from simreal_ros.robot.description import load_robot_description, robot_reference  # noqa: E402

# Arm name -> the LearnerConfig fields it sets (None: no training). Nothing else may differ
# between arms, so a difference in outcome belongs to these fields alone.
METHODS: dict[str, dict[str, Any] | None] = {
    "zero_shot": None,
    "bc_lora": {"method": "bc"},
    "rl_ft": {"method": "rl", "critic_init": "auto"},
    # RLPD-style RL-FT (Ball et al., 2023): fresh LayerNorm twin critics, real and sim data
    # sampled 50/50, ten updates per new real transition. RLPD's ten-critic ensemble is not
    # built: its own ablation finds LayerNorm and symmetric sampling the decisive parts.
    "rlpd": {
        "method": "rl",
        "critic_init": "fresh",
        "real_weight": 1.0,
        "sim_weight": 1.0,
        "update_to_data": 10.0,
    },
    "sgft_h1": {"method": "sgft", "horizon": 1, "critic_init": "fresh"},
    "sgft_h1_simadv": {"method": "sgft", "horizon": 1, "critic_init": "sim_advantage"},
    "sgft_h3": {"method": "sgft", "horizon": 3, "critic_init": "fresh"},
    "sgft_hinf": {"method": "sgft", "horizon": 0, "critic_init": "fresh"},
    # Online system identification: identify from the stand-in episodes so far, then
    # fine-tune in the identified sim only; counted by the stand-in episodes identified from.
    "sysid": {"method": "sysid", "critic_init": "auto"},
    # The loop's default: identify as sysid does, then the sim training recipe (DAgger
    # from the teacher retuned in the identified sim) from the running policy.
    "adapt": {"method": "adapt"},
}
LABELS = {
    "zero_shot": "zero-shot",
    "bc_lora": "BC-LoRA",
    "rl_ft": "RL-FT (SAC)",
    "rlpd": "RL-FT RLPD-style",
    "sgft_h1": "SGFT H=1",
    "sgft_h1_simadv": "SGFT H=1 simadv",
    "sgft_h3": "SGFT H=3",
    "sgft_hinf": "SGFT H=inf",
    "sysid": "sysid (identified sim)",
    "adapt": "adapt (sim-side)",
}
PRIMARY_METHODS = ("zero_shot", "bc_lora", "rl_ft", "sgft_h1")
ABLATION_METHODS = ("zero_shot", "rl_ft", "sgft_h1_simadv", "sgft_h3", "sgft_hinf")
SYSID_METHODS = ("zero_shot", "rl_ft", "sysid")  # the online-identification baseline
ADAPT_METHODS = ("zero_shot", "rl_ft", "adapt")  # the loop's default against RL-FT
RLPD_METHODS = ("zero_shot", "rl_ft", "rlpd")  # RL-FT's RLPD-style rival against RL-FT
# Every SGFT arm against RL-FT; the claim under test (the decision lines): RL-FT needs
# >= 3x SGFT H=1's stand-in episodes, and SGFT under 5 simulated minutes of them.
EXPERIMENT = Experiment(METHODS, LABELS, reference="rl_ft", primary="sgft_h1",
                        ratio_target=3.0, minutes_target=5.0)  # fmt: skip
SGFT_ARMS = EXPERIMENT.shaped_arms
MIN_SEEDS = 5
MIN_EVAL_EPISODES = 30

QUICK = {"seeds": 5, "episodes_per_round": 5, "max_rounds": 5, "updates_per_round": 300,
         "eval_episodes": 30}  # fmt: skip
FULL = {"seeds": 8, "episodes_per_round": 5, "max_rounds": 12, "updates_per_round": 300,
        "eval_episodes": 30}  # fmt: skip


def parse_args(argv=None) -> tuple[RoundsConfig, argparse.Namespace]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_ckpt = REPO / "checkpoints" / "push"
    parser.add_argument("--checkpoint", default=str(default_ckpt), help="base checkpoint dir")
    parser.add_argument("--task", default="push", choices=("push", "reach"))
    parser.add_argument("--condition", default="train", choices=("train", "shifted"))
    parser.add_argument(
        "--profile", default="real_twin", help="stand-in dynamics profile: a name or YAML path"
    )
    parser.add_argument("--seeds", type=int, default=None, help=f"bench seeds (>= {MIN_SEEDS})")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument(
        "--methods",
        default=",".join(PRIMARY_METHODS),
        help=f"comma-separated, from {', '.join(METHODS)}; the H ablation: "
        + ",".join(ABLATION_METHODS),
    )
    parser.add_argument("--episodes-per-round", type=int, default=None)
    parser.add_argument("--max-rounds", type=int, default=None)
    parser.add_argument("--updates-per-round", type=int, default=None)
    parser.add_argument("--eval-episodes", type=int, default=None)
    parser.add_argument("--eval-first-seed", type=int, default=900_000)
    parser.add_argument("--target", type=float, default=0.8)
    parser.add_argument(
        "--noise",
        type=float,
        default=0.0,
        help="> 0: Gaussian noise around the mean instead of the policy's own distribution",
    )
    parser.add_argument("--bc-demos", type=int, default=0, help="expert demos/round (BC)")
    parser.add_argument("--sim-episodes", type=int, default=10)
    parser.add_argument("--episode-seconds", type=float, default=6.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--fit-v-sim",
        default="auto",
        choices=("auto", "on", "off"),
        help="fit the base critics (V_sim) in sim first; auto: when they were never trained",
    )
    parser.add_argument("--fit-v-sim-updates", type=int, default=2000)
    parser.add_argument(
        "--learner",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a LearnerConfig default for every arm (repeatable)",
    )
    parser.add_argument("--bootstrap-resamples", type=int, default=10_000)
    parser.add_argument(
        "--work-dir", default="", help="kept work directory (reuses a fitted V_sim there)"
    )
    parser.add_argument(
        "--deadline-minutes",
        "--time-limit-min",
        dest="deadline_minutes",
        type=float,
        default=0.0,
        help="wall-clock limit: no new round starts after it (those jobs are flagged and "
        "left out of the statistics)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"the <= 20 min preset on 2 cores: {json.dumps(QUICK)}",
    )
    parser.add_argument("--out", default="", help="write the results as JSON here")
    parser.add_argument(
        "--plot",
        default=None,
        help="PNG of the success curves; default <out dir>/sample_efficiency.png, or "
        "bench/results/sample_efficiency.png without --out; 'none' for no plot",
    )
    args = parser.parse_args(argv)
    preset = QUICK if args.quick else FULL
    values = {
        k: getattr(args, k) if getattr(args, k) is not None else v for k, v in preset.items()
    }
    methods = tuple(m.strip() for m in args.methods.split(",") if m.strip())
    cfg = RoundsConfig(
        checkpoint=args.checkpoint,
        robot=robot_reference(load_robot_description().source),
        task=args.task,
        condition=args.condition,
        profile=args.profile,
        first_seed=args.first_seed,
        methods=methods,
        eval_first_seed=args.eval_first_seed,
        target=args.target,
        noise=args.noise,
        bc_demos=args.bc_demos,
        sim_episodes=args.sim_episodes,
        episode_seconds=args.episode_seconds,
        workers=args.workers,
        fit_v_sim=args.fit_v_sim,
        learner_overrides=tuple(_override(text, parser) for text in args.learner),
        fit_v_sim_updates=args.fit_v_sim_updates,
        bootstrap_resamples=args.bootstrap_resamples,
        **values,
    )
    if cfg.seeds < 1 or cfg.episodes_per_round < 1 or cfg.max_rounds < 1:
        parser.error("--seeds, --episodes-per-round and --max-rounds must be at least 1.")
    if cfg.eval_episodes < 1:
        parser.error("--eval-episodes must be at least 1.")
    if args.plot is None:
        args.plot = str(
            Path(args.out).parent / "sample_efficiency.png"
            if args.out
            else REPO / "bench" / "results" / "sample_efficiency.png"
        )
    return cfg, args


def _override(text: str, parser) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        parser.error(f"--learner {text!r}: use KEY=VALUE, e.g. --learner learning_rate=3e-5")
    return key.strip(), value.strip()


def design_warnings(cfg: RoundsConfig) -> list[str]:
    """Settings below the paired design's minimums: allowed for smoke runs, never silent."""
    out = []
    if cfg.seeds < MIN_SEEDS:
        out.append(f"{cfg.seeds} seed(s) < {MIN_SEEDS}: the bootstrap intervals mean little")
    if cfg.eval_episodes < MIN_EVAL_EPISODES:
        out.append(
            f"{cfg.eval_episodes} evaluation episodes < {MIN_EVAL_EPISODES}: each success "
            "rate is coarse"
        )
    if "rl_ft" not in cfg.methods or not set(cfg.methods) & set(EXPERIMENT.compared_arms):
        out.append(
            f"no RL-FT vs {'/'.join(EXPERIMENT.compared_arms)} pair among --methods: "
            "no decision lines"
        )
    return out


def main(argv=None) -> None:
    import torch

    torch.set_num_threads(1)
    cfg, args = parse_args(argv)
    print(f"config: {json.dumps(dataclasses.asdict(cfg))}", flush=True)
    for warning in design_warnings(cfg):
        print(f"WARNING: {warning}; not decision-grade.", flush=True)
    try:
        result = run_experiment(
            cfg,
            EXPERIMENT,
            work_dir=args.work_dir or None,
            progress=lambda line: print(line, flush=True),
            time_limit_s=60.0 * args.deadline_minutes,
        )
    except (ValueError, FileNotFoundError) as error:
        sys.exit(f"sample_efficiency: {error}")
    table = format_table(cfg, EXPERIMENT, result["summary"])
    result["table"] = table
    result["warnings"] = design_warnings(cfg)
    print(table)
    print(f"wall time {result['wall_seconds']:.0f} s")
    if args.plot and args.plot.lower() != "none":
        result["plot"] = str(plot_curves(cfg, EXPERIMENT, result["jobs"], args.plot))
        print(f"wrote {result['plot']}")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

"""Learner settings, declared once: the node, the CLI and the learner session all read this."""

from __future__ import annotations

from dataclasses import dataclass

from simreal_ros.config_schema import group, setting, validate
from simreal_ros.learner.methods import METHODS, method_traits
from simreal_ros.policy.config import EXPLORATION_STD_MAX
from simreal_ros.sim.profiles import check_profile

CRITIC_INITS = ("auto", "fresh", "checkpoint", "checkpoint_lora", "sim_advantage")


@dataclass
class LoraSettings:
    """The LoRA adapters the learner trains (peft)."""

    rank: int = setting(8, "LoRA rank r.", low=1, high=256, formerly="lora_rank")
    alpha: int = setting(
        16, "LoRA alpha (scale = alpha / rank).", low=1, high=4096, formerly="lora_alpha"
    )
    dropout: float = setting(
        0.0, "LoRA dropout on the adapter input.", low=0.0, high=0.9, formerly="lora_dropout"
    )
    targets: list[str] = setting(
        [],
        "Names of the actor's nn.Linear and nn.Conv2d layers that get adapters; empty = every "
        "one that can be merged back.",
        formerly="lora_targets",
    )


@dataclass
class ScreenSettings:
    """How a candidate is screened in sim before it may be promoted."""

    seeds: int = setting(
        20,
        "Sim episodes per condition in screening.",
        low=1,
        high=10000,
        dynamic=True,
        formerly="screen_seeds",
    )
    conditions: list[str] = setting(
        ["train", "shifted"],
        "Conditions screened; each must pass.",
        dynamic=True,
        formerly="screen_conditions",
    )
    profile: str = setting(
        "randomized",
        "Dynamics profile of the sim used for screening: a shipped name or a YAML path.",
        formerly="screen_profile",
    )
    workers: int = setting(
        2, "Parallel spawned screening workers.", low=1, high=256, formerly="screen_workers"
    )
    safety_filter: bool = setting(
        True,
        "Screen behind the safety filter, as the graph runs the policy: a candidate that "
        "leans on the filter's limits is judged by what the arm would do.",
        formerly="screen_safety_filter",
    )
    first_seed: int = setting(
        100000,
        "First screening seed (candidate and running policy share seeds).",
        low=0,
        high=2**31 - 1,
        dynamic=True,
        formerly="screen_first_seed",
    )


@dataclass
class PromotionSettings:
    """The screening gate's rule and thresholds (learner/gate.py)."""

    rule: str = setting(
        "broken_only",
        "Screening rule. broken_only: sim kills only what is clearly broken (success floor "
        "on the Wilson upper bound, safety-filter interventions, non-finite or saturated "
        "actions, divergence from the base) and never rejects a candidate for doing worse "
        "than the running policy in a sim known to be misspecified; relative: the strict "
        "rule, also no worse than the running policy (or the base) by more than "
        "promotion.tolerance. "
        "Details: simreal_ros/learner/gate.py.",
        choices=("broken_only", "relative"),
        dynamic=True,
        formerly="gate_rule",
    )
    success_floor: float = setting(
        0.25,
        "Reject if even the Wilson 95% UPPER bound of the sim success rate is below this "
        "(sim is confident the candidate fails more than 3 times in 4: 0/20 or 1/20 of 20).",
        low=0.0,
        high=1.0,
        dynamic=True,
        formerly="promote_success_floor",
    )
    ci_low: float = setting(
        0.0,
        "Reject unless the Wilson 95% LOWER bound of the sim success rate clears this; it "
        "certifies in sim, so it is off (0) by default; a strict, certifying gate is 0.3 "
        "with promotion.rule relative.",
        low=0.0,
        high=1.0,
        dynamic=True,
        formerly="promote_ci_low",
    )
    tolerance: float = setting(
        0.1,
        "promotion.rule relative only: reject a candidate whose sim success rate is below the "
        "running policy's (or the base's, if better) by more.",
        low=0.0,
        high=1.0,
        dynamic=True,
        formerly="promote_tolerance",
    )
    max_intervention_rate: float = setting(
        0.8,
        "Reject if the safety filter intervened in more than this share of the screening "
        "control steps, not counting the velocity/acceleration/jerk shaping every 20 Hz "
        "step gets (the shipped policies' rates are in docs/learning.md). Needs "
        "screen.safety_filter.",
        low=0.0,
        high=1.0,
        dynamic=True,
        formerly="screen_max_intervention_rate",
    )
    max_saturated_share: float = setting(
        0.5,
        "Reject if more than this share of the actor's action components sit at the tanh "
        "bound (|a| >= 0.99) in screening. Any non-finite action rejects, whatever this is.",
        low=0.0,
        high=1.0,
        dynamic=True,
        formerly="screen_max_saturated_share",
    )
    max_divergence: float = setting(
        0.5,
        "Reject if the mean |candidate action - base action| on the candidate's own "
        "screening states exceeds this, per component in normalised action units ([-1, 1]; "
        "times the spec's action scale is rad per step). A quarter of the action range: far "
        "beyond the trust region's ~1/(2 anchor_weight).",
        low=0.0,
        high=2.0,
        dynamic=True,
        formerly="screen_max_divergence",
    )


@dataclass
class SysidSettings:
    """System identification from the real bags (simreal_ros/sysid)."""

    enabled: bool = setting(
        False,
        "Before each round, identify the sim's dynamics from the newest real bags (they "
        "must carry /forward_position_controller/commands) and screen in the identified "
        "profile instead of screen.profile; if identification fails, screen.profile is "
        "used and the reason is logged. Methods sysid and adapt always identify.",
        formerly="identify_dynamics",
    )
    profile: str = setting(
        "",
        "A profile YAML written by `simreal sysid`: screen (and, for method sysid, train) "
        "in it instead of identifying from the bags.",
        formerly="identified_profile",
    )
    max_episodes: int = setting(
        10, "Newest real episodes an identification uses.", low=2, high=10000,
        formerly="sysid_max_episodes",
    )  # fmt: skip
    evaluations: int = setting(
        300, "Replays in the first CMA-ES restart of an identification.", low=20, high=10**6,
        formerly="sysid_evaluations",
    )  # fmt: skip
    restarts: int = setting(
        3, "CMA-ES restarts (the others on bootstrap resamples: the uncertainty).", low=1,
        high=50, formerly="sysid_restarts",
    )  # fmt: skip
    sim_episodes: int = setting(
        20,
        "method sysid: episodes per round the running policy plays (exploring) in the "
        "identified sim; the candidate is fine-tuned on them alone (no real transition "
        "reaches the update), with the same LoRA adapters and forgetting guards.",
        low=1,
        high=100000,
        formerly="sysid_sim_episodes",
    )


@dataclass
class AdaptSettings:
    """Sim-side adaptation (method adapt, learner/adaptation.py)."""

    teacher_episodes: int = setting(
        16, "method adapt: sim episodes per point of the teacher's grid search", low=1,
        high=100000, formerly="adapt_teacher_episodes",
    )  # fmt: skip
    iterations: int = setting(
        8, "method adapt: DAgger rounds", low=1, high=1000, formerly="adapt_iterations"
    )
    episodes: int = setting(
        64, "method adapt: sim episodes per DAgger round", low=1, high=100000,
        formerly="adapt_episodes",
    )  # fmt: skip
    bc_steps: int = setting(
        2000, "method adapt: behaviour-cloning updates per DAgger round", low=1,
        high=10**7, formerly="adapt_bc_steps",
    )  # fmt: skip
    learning_rate: float = setting(
        1e-3, "method adapt: learning rate of the adapter (clipped to learning_rate_cap)",
        low=0.0, high=1.0, formerly="adapt_learning_rate",
    )  # fmt: skip
    shifted_share: float = setting(
        0.3, "method adapt: share of the sim episodes that start in the shifted condition",
        low=0.0, high=1.0, formerly="adapt_shifted_share",
    )  # fmt: skip
    log_spread: float = setting(
        0.1,
        "method adapt: least half-width of the randomisation around each identified factor "
        "(log units; wider where identification's restarts spread more)",
        low=0.0, high=3.0, formerly="adapt_log_spread",
    )  # fmt: skip
    polish_rounds: int = setting(
        0,
        "method adapt: rounds of RL polish after DAgger in the identified sim (TD3 with a "
        "Q-filtered behaviour term, learner/sim_polish.py), kept only where it beats the "
        "DAgger student there; 0: none",
        low=0, high=100,
    )  # fmt: skip
    polish_episodes: int = setting(
        64, "method adapt: exploring sim episodes per RL polish round", low=1, high=100000
    )
    polish_behaviour_weight: float = setting(
        1.0,
        "method adapt: weight of the RL polish's Q-filtered behaviour term against its "
        "normalised Q term (0: pure TD3)",
        low=0.0, high=100.0,
    )  # fmt: skip
    arm_share: float = setting(
        0.5,
        "method cotrain: share of every DAgger batch drawn from the arm's recorded states, "
        "labelled by the retuned teacher (the rest from the identified sim)",
        low=0.0, high=1.0,
    )  # fmt: skip
    arm_log_spread: float = setting(
        0.5,
        "method cotrain: least half-width of the randomisation around each identified factor "
        "(log units): where no parameter fits the arm, the identified values are the wrong "
        "model's best fit, not the arm's",
        low=0.0, high=3.0,
    )  # fmt: skip
    arm_episodes: int = setting(
        24,
        "method cotrain: at most this many of the newest arm episodes the running version "
        "recorded are labelled and trained on",
        low=1, high=100000,
    )  # fmt: skip


@dataclass
class LearnerConfig:
    # What to train.
    method: str = setting(
        "sgft",
        "Fine-tuning method: bc, rl (actor-critic on real data), sgft (rl with V_sim shaping "
        "and horizon H), sysid (rl in the sim identified from the real bags, sim-only), "
        "adapt (identify the dynamics from the newest real bags, then adapt the running "
        "policy in the identified sim, learner/adaptation.py), cotrain (adapt, plus the "
        "arm's own recorded states labelled by the same retuned teacher).",
        choices=METHODS,
    )
    horizon: int = setting(
        1,
        "SGFT horizon H: steps of real reward before V_sim takes over as terminal value; "
        "0 means infinite (plain potential-based shaping, SAC on the shaped reward).",
        low=0,
        high=1000,
    )
    gamma: float = setting(
        0.0,
        "Discount; 0 takes the checkpoint's pretraining gamma. Any other value must equal it.",
        low=0.0,
        high=0.9999,
    )
    seed: int = setting(0, "Seed of sampling and initialisation.", low=0, high=2**31 - 1)
    # LoRA.
    lora: LoraSettings = group(LoraSettings, "The LoRA adapters the learner trains (peft).")
    critic_init: str = setting(
        "auto",
        "Critic start: fresh (LayerNorm twin critics, as the SGFT paper trains them), the "
        "checkpoint's critics (H=inf only), the checkpoint's critics plus LoRA, or (SGFT, "
        "any H) the sim advantage Q_sim - V_sim plus a zero-initialised residual (a flagged "
        "variant: its first actor steps equal RL-FT's); auto = fresh for sgft and bc, the "
        "checkpoint's critics for rl (RL fine-tuning warm-starts actor and critic).",
        choices=CRITIC_INITS,
    )
    # Optimisation.
    learning_rate: float = setting(3e-4, "Learning rate of the adapter.", low=0.0, high=1.0)
    learning_rate_cap: float = setting(
        1e-3,
        "Upper bound on any learning rate (a guard against forgetting); larger ones are "
        "clipped and the clip is logged.",
        low=0.0,
        high=1.0,
    )
    critic_learning_rate: float = setting(3e-4, "Critic learning rate.", low=0.0, high=1.0)
    batch_size: int = setting(128, "Transitions per update.", low=1, high=65536)
    updates_per_round: int = setting(
        300,
        "Least gradient updates per round (see update_to_data).",
        low=1,
        high=10**7,
        dynamic=True,
    )
    update_to_data: float = setting(
        1.0,
        "Updates per new real transition: a round runs max(updates_per_round, "
        "update_to_data x real transitions new since the last round) updates, the same "
        "rule for every method.",
        low=0.0,
        high=100.0,
        dynamic=True,
    )
    tau: float = setting(0.005, "Polyak rate of the target critics.", low=0.0, high=1.0)
    entropy_alpha: float = setting(0.05, "SAC entropy temperature (initial).", low=0.0, high=10.0)
    auto_entropy: bool = setting(True, "Tune the entropy temperature to a target entropy.")
    entropy_backup: bool = setting(
        False,
        "Put the entropy bonus into the critic targets (soft Q). Off for every method by "
        "default: the pretrained critic and V_sim are values of the reward alone, and SGFT's "
        "H=1 head regresses on r~ alone; entropy enters only through the actor's alpha * "
        "log pi term, the same for every method.",
    )
    exploration_std_max: float = setting(
        EXPLORATION_STD_MAX,
        "Exploration, the same for every method: collection samples the policy's own "
        "tanh-Gaussian with its std capped here (normalised units; 0 = uncapped). SAC's "
        "learned std is used where it is smaller; the cap keeps a std that pretraining never "
        "calibrated (it can exceed the actor's typical mean action) from turning episodes "
        "into noise.",
        low=0.0,
        high=10.0,
    )
    weight_decay: float = setting(0.0, "AdamW weight decay on adapter weights.", low=0.0, high=1.0)
    grad_clip: float = setting(10.0, "Gradient norm clip; 0 disables.", low=0.0, high=1e6)
    # BC.
    bc_intervention_weight: float = setting(
        5.0,
        "Loss weight of human-intervention steps relative to successful steps.",
        low=0.0,
        high=1000.0,
    )
    bc_use_failures: bool = setting(
        False,
        "Also clone non-intervention steps of failed episodes (normally dropped).",
    )
    bc_regulariser: float = setting(
        0.0,
        "RL/SGFT: weight of a BC term on real successes and interventions.",
        low=0.0,
        high=100.0,
    )
    anchor_weight: float = setting(
        10.0,
        "RL/SGFT: trust region to the sim policy. Weight w of the squared distance between "
        "the adapted and the base actor's deterministic actions, against the actor's Q term "
        "divided by the mean norm of its action-gradient: the action settles about "
        "1 / (2 w) (normalised units) from the base where the critic keeps pulling; 0 = off. "
        "It decays as real data grows (anchor_half_transitions).",
        low=0.0,
        high=1e6,
    )
    anchor_half_transitions: int = setting(
        1000,
        "Real transitions at which the trust region's weight has halved: w_eff = w * n0 / "
        "(n0 + n_real). A critic fitted on more real data is trusted further from the sim "
        "policy; 0 keeps the weight constant.",
        low=0,
        high=10**9,
    )
    # Data mixing and forgetting guards.
    real_weight: float = setting(
        4.0,
        "Co-training weight of real (and real_twin stand-in) data in each batch.",
        low=0.0,
        high=1000.0,
    )
    sim_weight: float = setting(1.0, "Co-training weight of sim data.", low=0.0, high=1000.0)
    sim_replay: bool = setting(True, "Replay sim data next to real data against forgetting.")
    ewc: bool = setting(False, "Elastic weight consolidation anchored on sim data.")
    ewc_weight: float = setting(100.0, "EWC penalty weight.", low=0.0, high=1e9)
    ewc_fisher_samples: int = setting(
        512, "Sim transitions used to estimate the diagonal Fisher.", low=1, high=10**7
    )
    # SGFT.
    reward_scale: float = setting(
        0.0,
        "Constant multiplying the training reward of every method; 0 fixes it once from "
        "sim statistics: 1 / std of the method's own training reward on sim transitions "
        "(r for bc/rl, r~ for sgft), so every method trains on a unit-scale reward. Never a "
        "running normaliser.",
        low=0.0,
        high=1e6,
    )
    failure_value: float = setting(
        0.0,
        "Value of the absorbing state after a terminal failure (the cube off the table), "
        "for every method: the failing step's reward becomes r + gamma * failure_value. "
        "0 = auto from the sim data (sgft.auto_failure_value): no better than the worst "
        "reward forever, and low enough that r~ at a failure is never the best shaped "
        "reward there (with V = 0 after a failure, above every state's negative value, "
        "short horizons learn to fail fast).",
        low=-1e6,
        high=0.0,
    )
    v_sim_action_samples: int = setting(
        0,
        "V_sim = min(Q1,Q2) at the sim actor's mean action (0), or averaged over this many "
        "sampled actions.",
        low=0,
        high=64,
    )
    value_exploit_window: int = setting(
        5,
        "Episodes compared when flagging V_sim rising while real reward falls.",
        low=2,
        high=1000,
    )
    model_rollouts: bool = setting(
        False, "SGFT: add short rollouts of a learned dynamics model to the batches."
    )
    rollout_length: int = setting(2, "Steps of each model rollout.", low=1, high=50)
    rollout_fraction: float = setting(
        0.25, "Fraction of each batch made of model-rollout transitions.", low=0.0, high=0.9
    )
    # Rounds.
    round_every_episodes: int = setting(
        10,
        "Start a round after this many new episodes; 0 disables.",
        low=0,
        high=100000,
        dynamic=True,
    )
    round_every_seconds: float = setting(
        0.0,
        "Start a round after this long with new data; 0 disables.",
        low=0.0,
        high=1e6,
        unit="s",
        dynamic=True,
    )
    min_real_transitions: int = setting(
        32,
        "Rounds wait until this many real transitions are recorded.",
        low=1,
        high=10**9,
        dynamic=True,
    )
    # Screening gate.
    screen: ScreenSettings = group(
        ScreenSettings, "How a candidate is screened in sim before it may be promoted."
    )
    # System identification (simreal_ros/sysid): the best available model of the arm.
    sysid: SysidSettings = group(
        SysidSettings, "System identification from the real bags (simreal_ros/sysid)."
    )
    # Sim-side adaptation (method adapt, simreal_ros/learner/adaptation.py).
    adapt: AdaptSettings = group(
        AdaptSettings, "Sim-side adaptation (method adapt, learner/adaptation.py)."
    )
    promotion: PromotionSettings = group(
        PromotionSettings, "The screening gate's rule and thresholds (learner/gate.py)."
    )
    task: str = setting("push", "Task screened and trained.", choices=("push", "reach"))
    critic_warmup_updates: int = setting(
        100,
        "Critic-only updates before the actor moves (a fresh critic must fit first).",
        low=0,
        high=10**7,
    )
    # Data and files.
    checkpoint_dir: str = setting(
        "", "Base checkpoint directory; empty = the shipped checkpoint of the task."
    )
    sim_data_dir: str = setting(
        "", "Sim episode bags for replay, EWC and the shaping scale; empty = collect in sim."
    )
    sim_episodes: int = setting(
        10,
        "Sim episodes the learner collects with the base policy when no sim bags are given.",
        low=0,
        high=100000,
    )
    store_root: str = setting("models", "Directory of the versioned adapter store.")

    def __post_init__(self) -> None:
        validate(self)
        check_profile(self.screen.profile)
        if self.sysid.profile:
            check_profile(self.sysid.profile)
        critic_from_checkpoint = self.critic_init in ("checkpoint", "checkpoint_lora")
        if method_traits(self.method).shaped and critic_from_checkpoint and self.horizon != 0:
            raise ValueError(
                "critic_init=checkpoint needs horizon=0 (infinite): the checkpoint's "
                "critic has no horizon-indexed heads. Use critic_init=fresh or auto."
            )
        if self.critic_init == "sim_advantage" and not method_traits(self.method).shaped:
            raise ValueError(
                "critic_init=sim_advantage is SGFT's warm start (the critic learns the shaped "
                "return, whose sim value is Q_sim - V_sim); use it with method=sgft."
            )
        bad = [c for c in self.screen.conditions if c not in ("train", "shifted")]
        if bad:
            raise ValueError(f"screen.conditions {bad} unknown; use train and/or shifted.")

    @property
    def identifies_from_bags(self) -> bool:
        """Rounds first identify the dynamics from the newest real bags (sysid always does,
        unless a profile was identified beforehand)."""
        identifying = self.sysid.enabled or method_traits(self.method).identifies
        return identifying and not self.sysid.profile

    @property
    def wants_sim_episodes(self) -> bool:
        """Sim episodes of the base policy are collected when no sim bags are given: for
        replay, EWC or (a shaped method) the shaping scale."""
        uses = self.sim_replay or self.ewc or method_traits(self.method).shaped
        return self.sim_episodes > 0 and uses

    @property
    def horizon_or_none(self) -> int | None:
        """H as used by the algorithms: None is infinite."""
        return None if self.horizon == 0 else self.horizon

    @property
    def resolved_critic_init(self) -> str:
        if self.critic_init != "auto":
            return self.critic_init
        return method_traits(self.method).auto_critic_init

    @property
    def effective_learning_rate(self) -> float:
        return min(self.learning_rate, self.learning_rate_cap)

    @property
    def effective_critic_learning_rate(self) -> float:
        return min(self.critic_learning_rate, self.learning_rate_cap)

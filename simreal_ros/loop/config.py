"""Settings of `simreal loop`, the fine-tuning loop on the real-twin stand-in."""

from __future__ import annotations

import dataclasses

from simreal_ros.config_schema import check_names, setting, shared_setting, validate
from simreal_ros.learner.config import LearnerConfig
from simreal_ros.learner.methods import METHODS, method_traits
from simreal_ros.loop.arm_decision import INCONCLUSIVE
from simreal_ros.loop.plan import MAX_ROUND_INDEX


@dataclasses.dataclass
class LoopConfig:
    task: str = setting("push", "task to fine-tune", choices=("push", "reach"))
    checkpoint: str = setting("", "base checkpoint directory (empty: the shipped one)")
    method: str = shared_setting(LearnerConfig, "method", "adapt")
    methods: str = setting(
        "",
        "comma-separated methods the rounds alternate (round 1 the first, round 2 the "
        "second, ...), e.g. sgft,sysid; empty: --method every round. A change of method "
        "restarts the learner node with it (a method's critic and value are its own)",
    )
    last_mile_method: str = setting(
        "cotrain",
        "the method of a round after a model_misspecified diagnosis (identification cannot "
        "fit the arm, so the arm's own episodes must close the gap); empty: keep --method",
        choices=("", *METHODS),
    )
    arm_decision: bool = setting(
        True,
        "after a promotion, the incumbent replays the candidate's evaluation seeds on the "
        "stand-in and the paired comparison keeps the candidate or rolls it back "
        "(simreal_ros/loop/arm_decision.py)",
    )
    arm_inconclusive: str = setting(
        "point_estimate",
        "what an inconclusive arm comparison does: point_estimate keeps the candidate "
        "unless its mean paired difference is negative; keep; rollback",
        choices=INCONCLUSIVE,
    )
    # Learner settings the loop sets with its own defaults (small rounds on the stand-in);
    # each is declared once, in LearnerConfig, and graph_overrides hands them all on.
    identify_dynamics: bool = shared_setting(LearnerConfig, "sysid.enabled", True)
    sysid_max_episodes: int = shared_setting(LearnerConfig, "sysid.max_episodes", 8)
    sysid_evaluations: int = shared_setting(LearnerConfig, "sysid.evaluations", 200)
    sysid_restarts: int = shared_setting(LearnerConfig, "sysid.restarts", 2)
    learner_set: str = setting(
        "",
        "learner settings for this run, KEY=VALUE separated by ';' (YAML values), e.g. "
        "'promotion.rule=relative;promotion.ci_low=0.3'",
    )
    horizon: int = shared_setting(LearnerConfig, "horizon", 1)
    rounds: int = setting(
        3, "fine-tuning rounds after the zero-shot round 0", low=0, high=MAX_ROUND_INDEX
    )
    eval_episodes: int = setting(
        8, "stand-in evaluation episodes per condition and round", low=1, high=1000
    )
    collect_episodes: int = setting(
        8, "extra episodes collected per round, aimed at the failing condition", low=0, high=1000
    )
    expert_demos: int = setting(
        0, "scripted-expert demonstrations per round for methods that use them (bc)", low=0,
        high=1000,
    )  # fmt: skip
    explore_collection: bool = setting(
        True,
        "collection episodes explore from the policy's own distribution (the policy node's "
        "explore); evaluation episodes never do",
    )
    stand_in_profile: str = setting(
        "real_twin",
        "sim dynamics standing in for the physical arm (the stand-in, never the arm): a "
        "shipped profile name or a YAML path",
    )
    real_time_factor: float = setting(
        1.0, "sim speed against the wall clock; nodes follow /clock", low=0.1, high=50.0
    )
    joint_state_rate_hz: float = setting(
        100.0,
        "/joint_states rate of the stand-in's sim bridge (the policy acts at 20 Hz and the "
        "safety filter at 100 Hz; 500 Hz costs a 2-core machine half its CPU in subscribers)",
        low=10.0,
        high=2000.0,
        unit="Hz",
    )
    episode_timeout_s: float = setting(
        20.0, "wall-clock limit per episode", low=1.0, high=3600.0, unit="s"
    )
    round_timeout_s: float = setting(
        900.0, "wall-clock limit for one learner round (train + screen)", low=10.0, high=86400.0,
        unit="s",
    )  # fmt: skip
    updates_per_round: int = shared_setting(LearnerConfig, "updates_per_round", 300)
    sim_episodes: int = shared_setting(LearnerConfig, "sim_episodes", 10)
    screen_seeds: int = shared_setting(LearnerConfig, "screen.seeds", 20)
    screen_workers: int = shared_setting(LearnerConfig, "screen.workers", 2)
    check_episodes: int = setting(
        50,
        "per round and condition: off-ROS stand-in episodes behind the safety filter on the "
        "same seeds every round, a low-noise check beside the graph's few trials (0: off; "
        "there is no such check on a physical arm)",
        low=0,
        high=10000,
    )
    seed: int = setting(0, "seed of the run (episode seeds derive from it)", low=0, high=2**31)
    domain_id: int = setting(-1, "ROS_DOMAIN_ID for the graph (-1: inherit)", low=-1, high=101)

    def __post_init__(self) -> None:
        validate(self)
        self.round_methods()
        self.learner_overrides()
        self.stand_in_name()

    def stand_in_name(self) -> str:
        """The stand-in profile's name, once its file loads and says ``stand_in: true``
        (episodes on any other profile are sim data, which the learner never takes for the
        arm's)."""
        from simreal_ros.sim.profiles import load_profile

        profile = load_profile(self.stand_in_profile)
        if not profile.is_stand_in:
            raise ValueError(
                f"stand_in_profile {self.stand_in_profile!r} (profile {profile.name!r}) does "
                "not say stand_in: true, so its episodes would be labelled sim and never "
                "count as the arm's; add 'stand_in: true' to the file if it plays the arm."
            )
        return profile.name

    def round_methods(self) -> list[str]:
        """The methods the rounds cycle through, validated."""
        names = [m.strip() for m in self.methods.split(",") if m.strip()] or [self.method]
        unknown = [m for m in names if m not in METHODS]
        if unknown:
            raise ValueError(f"methods {unknown} unknown; the learner has {', '.join(METHODS)}.")
        return names

    def method_of_round(self, index: int) -> str:
        """Round 0 is zero-shot (no training): the first method; round i >= 1 cycles."""
        names = self.round_methods()
        return names[(max(index, 1) - 1) % len(names)]

    def method_after(self, index: int, diagnosis: dict) -> str:
        """Round ``index``'s method once the round before it was diagnosed ``diagnosis``
        (its label and evidence): the last mile after a model_misspecified label, and after
        a healthy one whose identified sim could not fit the arm either (more
        identification cannot lift it; the arm's own episodes can)."""
        from simreal_ros.diagnosis.classify import Thresholds

        label = diagnosis.get("label", "")
        residual = (diagnosis.get("evidence") or {}).get("identification_residual")
        unfit = residual is not None and residual > Thresholds().misspecified_residual
        if self.last_mile_method and (
            label == "model_misspecified" or (label == "healthy" and unfit)
        ):
            return self.last_mile_method
        return self.method_of_round(index)

    def uses_expert(self) -> bool:
        """Whether some round collects scripted-expert demonstrations (method bc)."""
        uses = any(method_traits(m).uses_expert_demos for m in self.round_methods())
        return uses and self.expert_demos > 0

    def base_checkpoint(self) -> str:
        """The checkpoint the rounds fine-tune: ``checkpoint``, or the task's shipped one."""
        from simreal_ros.policy.checkpoint import shipped_checkpoint

        return self.checkpoint or str(shipped_checkpoint(self.task))

    def learner_settings(self) -> dict:
        """Every learner setting this config carries (``shared_setting`` fields), then
        ``learner_set`` on top."""
        shared = {
            f.metadata["shared_name"]: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.metadata.get("shared_with") == LearnerConfig.__name__
        }
        return {**shared, **self.learner_overrides()}

    def learner_overrides(self) -> dict:
        """``learner_set`` as a mapping, each key a LearnerConfig setting (dotted)."""
        import yaml

        out = {}
        for item in filter(None, (p.strip() for p in self.learner_set.split(";"))):
            key, sep, value = item.partition("=")
            if not sep:
                raise ValueError(
                    f"learner_set item {item!r}: write KEY=VALUE with KEY a learner setting "
                    "(see simreal_ros/learner/config.py)."
                )
            out[key.strip()] = yaml.safe_load(value)
        check_names(LearnerConfig, out, "learner_set setting")
        return out

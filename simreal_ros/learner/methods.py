"""What each fine-tuning method is, in one table.

The learner, the loop and the bench ask a method's traits here instead of testing its
name, so a new method is one row (and, for a new kind of update, one trainer function).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Method:
    name: str
    # behaviour_cloning, actor_critic (a critic, a reward scale, the trust region), or
    # adaptation (learner/adaptation.py: the sim training recipe in the identified sim).
    update: str
    # Real reward shaped by V_sim with horizon H (SGFT); needs V_sim and sim episodes.
    shaped: bool
    # The critic's start when critic_init is auto.
    auto_critic_init: str
    # real: the update reads the recorded transitions; identified_sim: only episodes in
    # the sim identified from them reach it.
    trains_in: str
    # Identifies the arm's dynamics before every round, whatever sysid.enabled says.
    identifies: bool
    # Takes the scripted expert's demonstrations when the loop collects them.
    uses_expert_demos: bool
    # Adaptation co-trained on the arm's own states, labelled by the retuned teacher.
    labels_arm_states: bool = False

    @property
    def actor_critic(self) -> bool:
        return self.update == "actor_critic"


METHOD_TABLE = {
    m.name: m
    for m in (
        Method("bc", "behaviour_cloning", False, "fresh", "real", False, True),
        Method("rl", "actor_critic", False, "checkpoint", "real", False, False),
        Method("sgft", "actor_critic", True, "fresh", "real", False, False),
        Method("sysid", "actor_critic", False, "checkpoint", "identified_sim", True, False),
        Method("adapt", "adaptation", False, "fresh", "identified_sim", True, False),
        # adapt plus the arm's own states labelled by the same teacher (co-training).
        Method("cotrain", "adaptation", False, "fresh", "real", True, False, True),
    )
}
METHODS = tuple(METHOD_TABLE)


def method_traits(name: str) -> Method:
    try:
        return METHOD_TABLE[name]
    except KeyError:
        raise ValueError(
            f"method {name!r} unknown; the learner has {', '.join(METHODS)}."
        ) from None

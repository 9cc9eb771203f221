"""Why a loop stops before its last round: each is one line a user can act on."""

from __future__ import annotations


class LoopStopped(RuntimeError):
    """The loop cannot go on; ``str()`` is the cause and what to do."""


class NoArmData(LoopStopped):
    """The learner answered a round with no arm data to train on: waiting for episodes
    that the loop will not record (its collection for the round is done)."""

    def __init__(self, learner_reason: str) -> None:
        super().__init__(
            f"the learner has no arm data for this round, and none will come: {learner_reason}"
        )

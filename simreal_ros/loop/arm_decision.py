"""The arm decides: keep a promoted candidate or roll it back, from paired arm trials.

Design: after the hot swap the candidate plays the round's evaluation seeds on the arm,
then the policy node rolls back to the incumbent, which plays the SAME seeds (the
stand-in's reset takes a seed; on a physical arm the operator resets to the same listed
start states). Pairing by (condition, seed) cancels what makes one start state harder
than another, the largest noise in a handful of trials; both run on the same graph in
the same session, so nothing but the policy differs. Blocks (all candidate, then all
incumbent) cost two switches per round; on a physical arm whose behaviour drifts
during a session, alternate the order per pair instead.

Rule, per pair d = candidate - incumbent, for per-episode success (0/1) and return, each
with a paired-bootstrap 95% CI of the mean:
  1. the success CI excludes 0: it decides (below 0: lost, above: won);
  2. else the return CI excludes 0: it decides (success is rare on a hard stand-in,
     return still tells policies apart);
  3. else inconclusive: ``inconclusive`` = point_estimate (default) keeps the candidate
     unless its mean success difference is negative, or zero with a negative mean return
     difference; keep or rollback decide inconclusive cases outright.
No pairs at all: ``unverified``, rolled back (the arm never saw the two compared).
A rolled-back candidate passed the sim screen and lost on the arm: kind
``passed_sim_lost_on_arm``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from simreal_ros.stats import paired_bootstrap_ci

INCONCLUSIVE = ("point_estimate", "keep", "rollback")
KEPT, LOST, UNVERIFIED = "kept", "passed_sim_lost_on_arm", "unverified"


@dataclasses.dataclass
class ArmDecision:
    kind: str
    keep: bool
    candidate: str
    incumbent: str
    basis: str
    reason: str
    pairs: int = 0
    candidate_successes: int = 0
    incumbent_successes: int = 0
    success_difference: float = 0.0
    success_ci: tuple[float, float] = (0.0, 0.0)
    return_difference: float = 0.0
    return_ci: tuple[float, float] = (0.0, 0.0)
    per_pair: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["success_ci"], out["return_ci"] = list(self.success_ci), list(self.return_ci)
        return out


def pair_episodes(
    candidate: Sequence[dict[str, Any]], incumbent: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Match episodes by (condition, seed); an episode without a partner is left out."""
    theirs = {(e["condition"], int(e["seed"])): e for e in incumbent}
    pairs = []
    for ours in candidate:
        key = (ours["condition"], int(ours["seed"]))
        if key in theirs:
            other = theirs[key]
            pairs.append({
                "condition": key[0], "seed": key[1],
                "candidate_success": bool(ours["success"]),
                "incumbent_success": bool(other["success"]),
                "candidate_return": float(ours["episode_return"]),
                "incumbent_return": float(other["episode_return"]),
            })  # fmt: skip
    return pairs


def decide_on_arm(
    candidate_episodes: Sequence[dict[str, Any]],
    incumbent_episodes: Sequence[dict[str, Any]],
    candidate: str,
    incumbent: str,
    inconclusive: str = "point_estimate",
    resamples: int = 10000,
    seed: int = 0,
) -> ArmDecision:
    """Episodes: dicts with condition, seed, success, episode_return (see module doc)."""
    if inconclusive not in INCONCLUSIVE:
        raise ValueError(f"inconclusive={inconclusive!r}: use one of {', '.join(INCONCLUSIVE)}.")
    pairs = pair_episodes(candidate_episodes, incumbent_episodes)
    if not pairs:
        return ArmDecision(
            UNVERIFIED, False, candidate, incumbent, "no pairs",
            f"rolled back to {incumbent}: no paired arm trials of {candidate} and {incumbent}.",
        )  # fmt: skip
    cs = np.asarray([p["candidate_success"] for p in pairs], float)
    is_ = np.asarray([p["incumbent_success"] for p in pairs], float)
    cr = np.asarray([p["candidate_return"] for p in pairs], float)
    ir = np.asarray([p["incumbent_return"] for p in pairs], float)
    if not (np.all(np.isfinite(cr)) and np.all(np.isfinite(ir))):
        raise ValueError("an arm episode has a non-finite return; check the task's reward.")
    s_ci = paired_bootstrap_ci(cs, is_, resamples=resamples, seed=seed)
    r_ci = paired_bootstrap_ci(cr, ir, resamples=resamples, seed=seed + 1)
    ds, dr = float(np.mean(cs - is_)), float(np.mean(cr - ir))
    if s_ci[1] < 0 or s_ci[0] > 0:
        basis, keep = "success CI excludes 0", s_ci[0] > 0
    elif r_ci[1] < 0 or r_ci[0] > 0:
        basis, keep = "return CI excludes 0", r_ci[0] > 0
    elif inconclusive == "point_estimate":
        basis, keep = "inconclusive, point estimate", ds > 0 or (ds == 0 and dr >= 0)
    else:
        basis, keep = f"inconclusive, {inconclusive}", inconclusive == "keep"
    numbers = (
        f"{len(pairs)} paired trials: success {int(cs.sum())} vs {int(is_.sum())}, mean "
        f"difference {ds:+.2f} [95% CI {s_ci[0]:+.2f}, {s_ci[1]:+.2f}]; return difference "
        f"{dr:+.2f} [{r_ci[0]:+.2f}, {r_ci[1]:+.2f}]"
    )
    verdict = f"kept {candidate}" if keep else f"rolled back {candidate} to {incumbent}"
    return ArmDecision(
        kind=KEPT if keep else LOST,
        keep=keep,
        candidate=candidate,
        incumbent=incumbent,
        basis=basis,
        reason=f"{verdict} ({basis}): {numbers}.",
        pairs=len(pairs),
        candidate_successes=int(cs.sum()),
        incumbent_successes=int(is_.sum()),
        success_difference=ds,
        success_ci=(float(s_ci[0]), float(s_ci[1])),
        return_difference=dr,
        return_ci=(float(r_ci[0]), float(r_ci[1])),
        per_pair=pairs,
    )

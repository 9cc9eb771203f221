"""The loop's diagnosis on gapped stand-ins: a dynamics gap is not a convention mismatch,
and a convention bug still is one.

Each case is diagnosed as the loop diagnoses a round (``loop.diagnose_round``): 10
episodes per condition on the stand-in, the replay check on 3 scripted demonstrations
there and in the policy's own sim, 20 episodes in its own sim.
- controls: the push policy (``--checkpoint``, default the shipped one; and each
  ``--adapter`` version of it) on every ``--profiles`` stand-in, from ``--replay-sets``
  sets of replay starts: none may be labelled ``action_convention_mismatch``;
- bugs (``--bugs``): every bug kind of the convention matrix
  (``diagnosis.induced_failures.convention_matrix``) built into that checkpoint, on every
  stand-in, one set each: counted where labelled a mismatch.
The arm is this process's (``SIMREAL_ROBOT``). ``bench/profiles/`` holds gaps of other
kinds than the shipped stand-ins' (for the first arm). The cases run on the project's
executor (every local core by default). Prints a row per case and the totals; exits 1 if
a control is labelled a mismatch.

    PYTHONPATH=. .venv/bin/python bench/diagnosis_gaps.py [--profiles real_twin
        bench/profiles/gap_sticky.yaml ...] [--adapter DIR ...] [--replay-sets 8] [--bugs]
    SIMREAL_ROBOT=panda PYTHONPATH=. .venv/bin/python bench/diagnosis_gaps.py \
        --checkpoint checkpoints/panda/push --profiles real_twin_panda --bugs
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))

from simreal_ros.cli.executor_options import (  # noqa: E402
    add_executor_options,
    executor_from_args,
)

MISMATCH = "action_convention_mismatch"
FIRST_SEED = 930_000
PROFILES = (
    "real_twin",
    "real_twin_mild",
    *(str(p) for p in sorted((REPO / "bench" / "profiles").glob("*.yaml"))),
)


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    checkpoint: str
    adapter_dir: str | None
    profile: str
    replay_first: int
    bug: bool
    robot: str  # the arm, as a worker process finds it (``robot_reference``)


def run_case(case: Case) -> dict:
    import torch

    torch.set_num_threads(1)
    from simreal_ros.loop.diagnose_round import diagnose_round
    from simreal_ros.loop.state import ConditionScore
    from simreal_ros.robot.description import load_robot_description
    from simreal_ros.training.evaluate import PolicySource, build_policy, evaluate_policy

    arm = load_robot_description(case.robot)
    source = PolicySource(case.checkpoint, adapter_dir=case.adapter_dir)
    seeds = list(range(FIRST_SEED, FIRST_SEED + 10))
    scores = [
        ConditionScore.of(c, [r.success for r in evaluate_policy(
            source, case.profile, c, seeds, robot=arm).records])
        for c in ("train", "shifted")
    ]  # fmt: skip
    policy = build_policy(source, robot=arm)
    out = diagnose_round(
        [], scores, policy, policy.converter.spec.task, case.profile,
        list(range(case.replay_first, case.replay_first + 3)), robot=arm,
    )  # fmt: skip
    return {
        **dataclasses.asdict(case),
        "train": scores[0].successes,
        "shifted": scores[1].successes,
        "label": out["label"],
        "own_sim": out["evidence"]["own_sim"],
        "arm_only": out["evidence"]["replay_fails_only_on_arm"],
    }


def cases(args, folder: Path) -> list[Case]:
    from simreal_ros.diagnosis.induced_failures import convention_bug_checkpoint, convention_matrix
    from simreal_ros.robot.description import load_robot_description, robot_reference

    push, arm = args.checkpoint, robot_reference(load_robot_description().source)
    out = []
    for profile in args.profiles:
        short = Path(profile).stem
        for adapter in (None, *args.adapter):
            who = "base" if adapter is None else Path(adapter).name
            out += [
                Case(f"{who} @{short} set {k}", push, adapter, profile,
                     FIRST_SEED + 500 + 10 * k, False, arm)
                for k in range(args.replay_sets)
            ]  # fmt: skip
    if args.bugs:
        # The matrix's bugs once each: here every bug runs on every stand-in.
        bugs = {(c.kind, c.joints, c.amount): c for c in convention_matrix("push")}
        for i, bug in enumerate(c for c in bugs.values() if c.kind != "none"):
            checkpoint = str(convention_bug_checkpoint(
                push, folder / f"bug{i}", bug.kind, bug.joints, bug.amount))  # fmt: skip
            name = bug.name.split(" ", 1)[1]
            out += [
                Case(f"{name} @{Path(p).stem}", checkpoint, None, p, FIRST_SEED + 500, True, arm)
                for p in args.profiles
            ]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", default=None, help="default: the shipped push policy")
    parser.add_argument("--profiles", nargs="+", default=list(PROFILES))
    parser.add_argument("--adapter", nargs="*", default=[], help="adapted versions to add")
    parser.add_argument("--replay-sets", type=int, default=8, help="per control")
    parser.add_argument("--bugs", action="store_true", help="the push convention matrix too")
    add_executor_options(parser)
    args = parser.parse_args()
    if args.checkpoint is None:
        from simreal_ros.policy.checkpoint import shipped_checkpoint

        args.checkpoint = str(shipped_checkpoint("push"))
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder, executor_from_args(args) as executor:
        rows = executor.map(run_case, cases(args, Path(folder)), progress="diagnoses")
    tally = Counter()
    for row in rows:
        kind = "bug" if row["bug"] else "control"
        tally[kind, row["label"] == MISMATCH] += 1
        flag = " (replay failed on the arm only)" if row["arm_only"] else ""
        print(f"{row['name']:44s} {row['train']:2d}/10 {row['shifted']:2d}/10  "
              f"{row['label']}{flag}  own sim {Path(row['own_sim']).name}")  # fmt: skip
    controls = tally["control", True] + tally["control", False]
    bugs = tally["bug", True] + tally["bug", False]
    print(f"controls labelled a mismatch: {tally['control', True]} of {controls}")
    if bugs:
        print(f"bugs labelled a mismatch: {tally['bug', True]} of {bugs}")
    print(f"{time.perf_counter() - start:.0f} s")
    return 1 if tally["control", True] else 0


if __name__ == "__main__":
    sys.exit(main())

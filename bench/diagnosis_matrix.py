"""The diagnosis over induced convention bugs: a matrix of bugs built into copies of the
shipped checkpoints, each diagnosed, against healthy controls.

Bugs (``simreal_ros.diagnosis.induced_failures.convention_matrix``): sign flip, step
offset, action scale, joint order, wrong observation mean / std, each on single joints and
on several, in nominal and in the real_twin stand-in (a simulated stand-in for the arm).
Prints one row per case: expected and given label, the replay numbers and the joints the
fit blames; a case is right when the label is the expected one and, for action-side bugs,
the blamed joints are exactly the bug's.

    PYTHONPATH=. .venv/bin/python bench/diagnosis_matrix.py [--task reach push]
        [--episodes 8] [--replay-episodes 8]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from simreal_ros.diagnosis.induced_failures import BugCase, convention_matrix
from simreal_ros.diagnosis.run import diagnose
from simreal_ros.robot.description import load_robot_description


def run_case(case: BugCase, folder: Path, episodes: int, replay_episodes: int) -> dict:
    checkpoint = case.build(folder / case.name.replace("/", "_").replace(" ", "_"))
    start = time.perf_counter()
    result = diagnose(
        str(checkpoint),
        profile=case.profile,
        episodes=episodes,
        seed=0,
        replay_episodes=replay_episodes,
        robot=load_robot_description(),
    )
    replay = result.evidence["replay"]
    numbers = replay.get("numbers", {})
    names = load_robot_description().joint_names
    expected_joints = case.expected_joints(names)
    blamed = replay.get("joints_at_fault", [])
    label_ok = (result.label == "action_convention_mismatch") == case.expects_mismatch
    joints_ok = (
        expected_joints is None
        or not case.expects_mismatch
        or (sorted(blamed) == sorted(expected_joints))
    )
    return {
        "case": case.name,
        "expected": "action_convention_mismatch" if case.expects_mismatch else "no mismatch",
        "label": result.label,
        "train": f"{result.evidence['train']['successes']}/{episodes}",
        "shifted": f"{result.evidence['shifted']['successes']}/{episodes}",
        "tool": (
            f"{numbers['tool_rms_m'] * 100:.1f}/{numbers['baseline_tool_rms_m'] * 100:.1f}"
            if numbers
            else "-"
        ),
        "goal": (
            f"{numbers['policy_replays_reaching_goal']}/"
            f"{numbers['recorded_replays_reaching_goal']}/"
            f"{numbers['closed_loop_from_same_starts_reaching_goal']} of {numbers['episodes']}"
            if numbers
            else "-"
        ),
        "replay": "fails" if replay.get("failed") else "passes",
        "blamed": ", ".join(n.replace("_joint", "") for n in blamed) or "-",
        "expected_joints": (
            "-"
            if expected_joints is None
            else ", ".join(n.replace("_joint", "") for n in expected_joints) or "-"
        ),
        "ok": label_ok and joints_ok,
        "seconds": time.perf_counter() - start,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", nargs="+", default=["reach", "push"])
    parser.add_argument("--episodes", type=int, default=8, help="per condition")
    parser.add_argument("--replay-episodes", type=int, default=8)
    args = parser.parse_args()
    torch.set_num_threads(1)
    start = time.perf_counter()
    rows = []
    header = (
        "| case | expected | label | train | shifted | replay | tool cm (policy/recorded) "
        "| goal (replay/recorded/closed loop) | joints blamed | bug's joints | right |"
    )
    print(header)
    print("|" + "---|" * 11)
    with tempfile.TemporaryDirectory() as folder:
        for task in args.task:
            for case in convention_matrix(task):
                row = run_case(case, Path(folder), args.episodes, args.replay_episodes)
                rows.append(row)
                print(
                    f"| {row['case']} | {row['expected']} | {row['label']} | {row['train']} "
                    f"| {row['shifted']} | {row['replay']} | {row['tool']} | {row['goal']} "
                    f"| {row['blamed']} | {row['expected_joints']} "
                    f"| {'yes' if row['ok'] else 'NO'} |",
                    flush=True,
                )
    right = sum(r["ok"] for r in rows)
    print(
        f"\n{right}/{len(rows)} cases right; {time.perf_counter() - start:.0f} s wall "
        f"({args.episodes} episodes per condition, {args.replay_episodes} replayed)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

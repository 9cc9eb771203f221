"""A home posture computed, not guessed: the tool at a point over the table, pointing down.

``simreal robot home`` prints what ``solve_home`` finds, ready to paste into robot.yaml.
The tool frame's z axis is taken as its approach axis (the ROS ``tool0`` convention, and
the shipped arms'), so "pointing down" means that axis along -z of the table. The scripted
experts then hold the tool in the orientation it has at home (``ToolKinematics.for_robot``).

Damped least squares on the arm's own MuJoCo model, inside the joint limits, from several
starts; of the solutions that reach the target, the one nearest the middle of its joint ranges
(mean squared distance from the middle of each range, in ranges) wins, so the arm has room
to move from home in every direction.
A redundant arm's spare freedom is spent pulling towards the middle of its ranges.
"""

from __future__ import annotations

import dataclasses

import mujoco
import numpy as np

from simreal_ros.robot.description_record import RobotDescription
from simreal_ros.robot.kinematics import ToolKinematics

DOWN = np.array([0.0, 0.0, -1.0])
POSITION_TOLERANCE = 1e-4  # m
AXIS_TOLERANCE = 1e-3  # |tool z x down|, about 0.06 degrees
POLISH_ITERATIONS = 60
STARTS = 24  # the middle of the ranges, then random starts drawn from a fixed seed


@dataclasses.dataclass(frozen=True)
class HomeSolution:
    """A posture of the arm joints (controller order, gripper excluded) and how well it
    does: tool position reached, position error (m), angle of the tool axis from straight
    down (rad), and the smallest margin to a joint limit as a fraction of that range."""

    arm_q: np.ndarray
    tool_position: np.ndarray
    position_error: float
    axis_error: float
    limit_margin: float
    centring: float  # mean squared distance from the middle of the ranges, in ranges

    @property
    def reached(self) -> bool:
        return (
            self.position_error <= 10 * POSITION_TOLERANCE
            and self.axis_error <= 10 * AXIS_TOLERANCE
        )


def _descend(
    kinematics: ToolKinematics,
    target: np.ndarray,
    q: np.ndarray,
    lower: np.ndarray,
    upper: np.ndarray,
    iterations: int = 300,
    damping: float = 1e-4,
) -> np.ndarray:
    middle = 0.5 * (lower + upper)
    span = np.maximum(upper - lower, 1e-9)
    pull = (span.mean() / span) ** 2  # a narrow range pulls harder
    for iteration in range(iterations):
        jacp, jacr = kinematics.jacobian(q)
        axis = kinematics.last_rotation[:, 2]
        # The axis error lies in the table's plane; a turn about the vertical (the tool's
        # roll) is left free, so only the x and y rows of the rotation Jacobian count.
        error = np.concatenate([target - kinematics.last_position, np.cross(axis, DOWN)[:2]])
        jacobian = np.vstack([jacp, jacr[:2]])
        inverse = jacobian.T @ np.linalg.inv(jacobian @ jacobian.T + damping * np.eye(5))
        step = inverse @ error
        # Spare freedom (a 7-joint arm has one, and the tool's roll is free): towards the
        # middle of the ranges, projected so it does not disturb the target. Only once
        # the target is near, so it cannot pull the search into a worse basin, and not
        # in the last iterations, which converge on the target alone.
        polishing = iteration >= iterations - POLISH_ITERATIONS
        if not polishing and np.linalg.norm(error[:3]) < 0.01:
            null = np.eye(len(q)) - inverse @ jacobian
            step += null @ (0.2 * pull * (middle - q))
        norm = np.linalg.norm(step)
        if norm > 0.3:
            step *= 0.3 / norm
        q = np.clip(q + step, lower, upper)
    return q


def solve_home(
    robot: RobotDescription,
    model: mujoco.MjModel,
    target: np.ndarray,
    seed: int = 0,
) -> HomeSolution:
    """The arm joints putting ``robot``'s tool frame at ``target`` (base frame, m) pointing
    straight down, within the description's position limits; the best of ``STARTS`` tries
    (see the module's docstring). ``model`` is the arm's (``compile_robot``)."""
    arm = list(robot.arm_indices)
    kinematics = ToolKinematics(model, robot.arm_joint_names, robot.tool_frame)
    lower = np.asarray(robot.position_lower, dtype=float)[arm]
    upper = np.asarray(robot.position_upper, dtype=float)[arm]
    target = np.asarray(target, dtype=float)
    rng = np.random.default_rng(seed)
    starts = [0.5 * (lower + upper)] + [rng.uniform(lower, upper) for _ in range(STARTS - 1)]
    best: HomeSolution | None = None
    for start in starts:
        q = _descend(kinematics, target, start, lower, upper)
        position, rotation = kinematics.pose(q)
        margin = float(np.min(np.minimum(q - lower, upper - q) / (upper - lower)))
        solution = HomeSolution(
            arm_q=q,
            tool_position=position,
            position_error=float(np.linalg.norm(position - target)),
            axis_error=float(np.arccos(np.clip(rotation[:, 2] @ DOWN, -1.0, 1.0))),
            limit_margin=margin,
            centring=float(np.mean(((q - 0.5 * (lower + upper)) / (upper - lower)) ** 2)),
        )
        if best is None or _better(solution, best):
            best = solution
    assert best is not None
    return best


def _better(candidate: HomeSolution, incumbent: HomeSolution) -> bool:
    if candidate.reached != incumbent.reached:
        return candidate.reached
    if candidate.reached:
        return candidate.centring < incumbent.centring
    return (candidate.position_error + 0.1 * candidate.axis_error) < (
        incumbent.position_error + 0.1 * incumbent.axis_error
    )


def full_home(robot: RobotDescription, arm_q: np.ndarray) -> np.ndarray:
    """Every controller joint's home: the arm's from ``arm_q``, the gripper closed (its
    lower limit, as the experts push with closed fingers)."""
    home = np.array(robot.home_position, dtype=float)
    home[list(robot.arm_indices)] = arm_q
    if robot.gripper_index is not None:
        home[robot.gripper_index] = robot.position_lower[robot.gripper_index]
    return home

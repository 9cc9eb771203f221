"""Does the task lie within the arm's reach? The task region against the tool frame's reach.

An arm can pass every model check and still be unable to do the task: the cube and goal
regions of the task (``sim/tasks.py``, fixed in the table's frame) may lie too near its
base, where the elbow cannot fold far enough, or beyond its reach. ``task_fit`` draws the
episodes of a condition as the simulator does (same seeds), takes the points the scripted
push expert must put the tool at (behind the cube, where it pushes from, and where it
stops at the goal, at its pushing height; the goal itself for reach), and solves the
expert's own IK for each from home, holding the tool's home orientation. A point is
within reach when that IK lands within ``REACH_TOLERANCE``.
"""

from __future__ import annotations

import dataclasses

import mujoco
import numpy as np

from simreal_ros.robot.description_record import RobotDescription
from simreal_ros.robot.kinematics import ToolKinematics
from simreal_ros.robot.model import compile_robot, compile_scene
from simreal_ros.sim.expert import PUSH_HEIGHT, PushExpert
from simreal_ros.sim.physics import ArmPhysics
from simreal_ros.sim.tasks import make_task

REACH_TOLERANCE = 0.005  # m: the expert's IK landing within this counts as reached


@dataclasses.dataclass(frozen=True)
class TaskFit:
    """One condition's task points against the arm: the points (m, table frame), which
    are within reach, and their horizontal distances from the base (the origin)."""

    task: str
    condition: str
    points: np.ndarray
    reached: np.ndarray
    table_contacts: tuple[str, ...] = ()  # arm links in the table at a reached point

    @property
    def touching_advice(self) -> str:
        """When the arm is in the table at the task's points: what to fix."""
        if not self.table_contacts:
            return ""
        return (
            f"with the tool frame at the task's points ({1000 * PUSH_HEIGHT:.0f} mm over "
            f"the table for push), {', '.join(self.table_contacts)} would be in the table: "
            "the tool frame is not the lowest point of the arm. Put it at the tip of the "
            "tool that touches the cube (tool_frame: {link: ..., offset: [...]}), not at "
            "the flange or a link above the tool."
        )

    @property
    def fraction(self) -> float:
        return float(np.mean(self.reached))

    @property
    def distance(self) -> np.ndarray:
        return np.linalg.norm(self.points[:, :2], axis=1)

    def advice(self) -> str:
        """What to move when points are out of reach: the base away from the region when
        the missed points lie nearer the base than the reached ones, towards it when
        farther; empty when every point is reached."""
        if self.reached.all():
            return ""
        missed = self.distance[~self.reached]
        if self.reached.any():
            near = float(np.median(missed)) < float(np.median(self.distance[self.reached]))
        else:
            near = float(np.median(missed)) < 0.5
        where = "too near the base (the elbow cannot fold enough)" if near else "out of reach"
        move = "back, away from" if near else "forward, towards"
        return (
            f"{(~self.reached).sum()} of {len(self.reached)} points are {where}: move the "
            f"arm's base {move} the task region in the model (docs/configuration.md, "
            "'Does the task fit the arm?'), or accept that the expert, and so the "
            "policy, cannot solve those episodes."
        )


def task_points(robot: RobotDescription, task: str, condition: str, episodes: int,
                first_seed: int = 0) -> np.ndarray:  # fmt: skip
    """The tool positions the scripted expert needs in the episodes of seeds
    ``first_seed``.. of ``task``/``condition``, drawn exactly as the simulator draws them."""
    physics = ArmPhysics(robot)
    drawn = make_task(task)
    expert = PushExpert(robot) if task == "push" else None
    points = []
    for seed in range(first_seed, first_seed + episodes):
        task_seed = np.random.SeedSequence(seed).spawn(2)[0]  # as ArmTaskEnv.reset
        drawn.initialize_episode(physics, np.random.default_rng(task_seed), condition)
        goal = np.asarray(physics.goal(), dtype=float)
        if expert is None:
            points.append(goal)
            continue
        cube = np.asarray(physics.object_position(), dtype=float)
        line = goal[:2] - cube[:2]
        direction = line / max(float(np.linalg.norm(line)), 1e-9)
        for xy in (
            cube[:2] - direction * expert.approach_offset,  # where the push starts from
            cube[:2] - direction * expert.contact_offset,  # touching the cube
            goal[:2] - direction * expert.contact_offset,  # the cube on the goal
        ):
            points.append(np.array([*xy, PUSH_HEIGHT]))
    return np.asarray(points)


def task_fit(robot: RobotDescription, task: str, condition: str, episodes: int = 30,
             first_seed: int = 0) -> TaskFit:  # fmt: skip
    """Which of the task's points (``task_points``) the tool frame reaches from home
    holding its home orientation, by the scripted expert's IK."""
    points = task_points(robot, task, condition, episodes, first_seed)
    kinematics = ToolKinematics.for_robot(robot, arm_only=True)
    home = np.asarray(robot.home_position, dtype=float)[list(robot.arm_indices)]
    reached = np.zeros(len(points), dtype=bool)
    in_table: set[str] = set()
    scene = _TableProbe(robot)
    for i, point in enumerate(points):
        solution, _ = kinematics.solve(point, home, iterations=200, tolerance=1e-5)
        reached[i] = np.linalg.norm(kinematics(solution) - point) < REACH_TOLERANCE
        if reached[i]:
            in_table |= scene.links_in_table(solution)
    return TaskFit(task, condition, points, reached, tuple(sorted(in_table)))


class _TableProbe:
    """Which arm links are in the table top at an arm posture (collision only)."""

    def __init__(self, robot: RobotDescription) -> None:
        arm = compile_robot(robot)
        self.arm_bodies = {arm.body(i).name for i in range(1, arm.nbody)}
        self.model = compile_scene(robot)
        self.data = mujoco.MjData(self.model)
        self.table = self.model.geom("table").id
        self.qpos = [int(self.model.joint(n).qposadr[0]) for n in robot.arm_joint_names]
        for i, name in enumerate(robot.joint_names):
            self.data.qpos[self.model.joint(name).qposadr[0]] = robot.home_position[i]

    def links_in_table(self, arm_q: np.ndarray) -> set[str]:
        self.data.qpos[self.qpos] = arm_q
        mujoco.mj_fwdPosition(self.model, self.data)
        found = set()
        for contact in self.data.contact[: self.data.ncon]:
            geoms = (int(contact.geom1), int(contact.geom2))
            if self.table not in geoms:
                continue
            other = geoms[1] if geoms[0] == self.table else geoms[0]
            body = self.model.body(self.model.geom_bodyid[other]).name
            if body in self.arm_bodies:
                found.add(body)
        return found

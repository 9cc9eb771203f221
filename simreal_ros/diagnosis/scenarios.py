"""Environments and demonstrators for diagnosis, including a scenario the sim core lacks.

``make_environment(task, profile, condition, robot=robot)`` returns a ``TaskEnvironment`` (the sim
core's reset/step interface) for the sim core's tasks (``push``, ``reach``) and for:

``reach_around``: bring the tool to a goal on the far side of a pillar.
  A box pillar (6 x 6 x 14 cm, colliding with the arm) stands at (0.45, 0.0) on the table.
  - train:   the tool starts near (0.45, -0.18, 0.05..0.08) and the goal is near
    (0.45, +0.18, 0.05..0.08) (x and y jittered by up to 2 cm);
  - shifted: the same detour in the other direction (start at +y, goal at -y).
  The straight line from start to goal runs through the pillar. The scripted
  demonstrator first approaches a split point just in front of the pillar, then goes
  round it on the near side (x = 0.31) or the far side (x = 0.59),
  chosen per episode from the seed and hidden from the observation, so demonstrations
  are bimodal: a policy regressed on them with plain MSE averages the two detours and
  drives into the pillar (mode collapse).

The pillar model is the arm's model plus one geom added with ``mujoco.MjSpec``, written
once to a cache file; the robot description is the arm's own with ``model_path`` pointing
at it (``dataclasses.replace``), so joints, limits and the tool frame are the arm's own.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import tempfile
from pathlib import Path

import numpy as np

from simreal_ros.atomic_files import write_text_atomic
from simreal_ros.robot.description_record import RobotDescription
from simreal_ros.sim.environment import EnvironmentConfig, TaskEnvironment
from simreal_ros.sim.tasks import CONDITIONS, TASKS, ReachTask

SCENARIO_TASKS = ("reach_around",)
TASK_NAMES = (*TASKS, *SCENARIO_TASKS)

PILLAR_CENTRE = np.array([0.45, 0.0])
PILLAR_HALF_SIZE = np.array([0.03, 0.03, 0.07])
DETOUR_OFFSET = 0.14  # lane distance from the pillar's centre line (x)
LANE_END = 0.11  # the lane beside the pillar runs from -LANE_END to +LANE_END (y)
TRAVEL_Y = 0.18  # start and goal distance from the pillar (y)


def check_task(task: str) -> str:
    if task not in TASK_NAMES:
        raise ValueError(f"unknown task {task!r}; use one of {', '.join(TASK_NAMES)}.")
    return task


@functools.lru_cache(maxsize=4)  # descriptions compare by identity, cached per file
def pillar_robot(robot: RobotDescription) -> RobotDescription:
    """``robot`` with the pillar added (model cached under the temp directory)."""
    import mujoco

    from simreal_ros.robot.model import robot_spec

    spec = robot_spec(robot)
    spec.worldbody.add_geom(
        name="pillar",
        type=mujoco.mjtGeom.mjGEOM_BOX,
        size=PILLAR_HALF_SIZE.tolist(),
        pos=[*PILLAR_CENTRE.tolist(), float(PILLAR_HALF_SIZE[2])],
        contype=1,
        conaffinity=3,  # like the table: the arm (contype 2) collides with it
        rgba=[0.25, 0.3, 0.8, 1.0],
    )
    xml = spec.to_xml()
    digest = hashlib.sha256(xml.encode()).hexdigest()[:16]
    folder = Path(tempfile.gettempdir()) / "simreal_ros_scenarios"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"arm_pillar_{digest}.xml"
    if not path.is_file():  # parallel workers may write the same file at once
        write_text_atomic(path, xml)
    return dataclasses.replace(robot, model_path=path)


class ReachAroundTask(ReachTask):
    """Reach a goal behind a pillar; ``detour_side`` (-1 near, +1 far) is hidden state.

    Judged and rewarded like ``reach`` (tool to goal); only the episodes differ.
    """

    name = "reach_around"

    def __init__(self, tolerance: float = 0.03) -> None:
        super().__init__(tolerance)
        self.detour_side = 1.0
        self._kinematics = None

    def _start_joints(self, physics, tool: np.ndarray) -> np.ndarray:
        from simreal_ros.robot.kinematics import ToolKinematics

        if self._kinematics is None:
            robot = physics.robot
            self._kinematics = ToolKinematics.for_robot(robot, arm_only=True, model=physics.model)
        start = np.array(physics.robot.home_position, dtype=float)
        arm = list(physics.robot.arm_indices)
        start[arm], _ = self._kinematics.solve(tool, start[arm], iterations=200)
        return start

    def initialize_episode(self, physics, rng, condition):
        if condition not in CONDITIONS:
            raise ValueError(
                f"unknown condition {condition!r}; use one of {', '.join(CONDITIONS)}."
            )
        direction = 1.0 if condition == "train" else -1.0  # shifted: the other way round

        def point(y: float) -> np.ndarray:
            return np.array(
                [
                    PILLAR_CENTRE[0] + rng.uniform(-0.02, 0.02),
                    PILLAR_CENTRE[1] + y + rng.uniform(-0.02, 0.02),
                    rng.uniform(0.05, 0.08),
                ]
            )

        start = point(-direction * TRAVEL_Y)
        goal = point(direction * TRAVEL_Y)
        self.detour_side = float(rng.choice([-1.0, 1.0]))
        physics.reset(
            joint_positions=self._start_joints(physics, start),
            cube_position=np.array([0.22, -direction * 0.35, physics.cube_half_size]),
            goal=goal,
            noise_seed=int(rng.integers(2**31)),
        )


class ReachAroundExpert:
    """IK demonstrator: to a waypoint beside the pillar (near or far side), then the goal."""

    def __init__(
        self,
        robot: RobotDescription,
        control_rate_hz: float = 20.0,
        side: float | None = None,
    ):
        """``robot``: the arm (its ``pillar_robot``); ``side``: always this detour (-1 near,
        +1 far); None: the episode's coin flip."""
        from simreal_ros.robot.kinematics import ToolKinematics

        self.kinematics = ToolKinematics.for_robot(robot, arm_only=True)
        self.arm = list(robot.arm_indices)
        self.home = np.asarray(robot.home_position, dtype=float)
        self.step_length = 0.5 / control_rate_hz  # tool waypoint speed 0.5 m/s
        self.forced_side = side
        self.side = 1.0 if side is None else float(side)

    def reset(self, env: TaskEnvironment | None = None) -> None:
        if self.forced_side is not None:
            self.side = float(self.forced_side)
        elif env is not None:
            self.side = float(getattr(env.task, "detour_side", 1.0))

    def act(self, observation: dict) -> np.ndarray:
        q = np.asarray(observation["joint_position"], dtype=float)
        goal = np.asarray(observation["goal_position"], dtype=float)
        tool, _ = self.kinematics.pose(q[self.arm])
        travel = np.sign(goal[1] - PILLAR_CENTRE[1]) or 1.0
        lane_x = PILLAR_CENTRE[0] + self.side * DETOUR_OFFSET
        passed = (tool[1] - PILLAR_CENTRE[1]) * travel  # < 0: not yet beside the pillar
        if passed < LANE_END - 0.02:
            # Into the lane beside the pillar first, then along it past the pillar.
            into_lane = abs(tool[0] - lane_x) > 0.03 and passed < -LANE_END + 0.02
            lane_y = PILLAR_CENTRE[1] + travel * (-LANE_END if into_lane else LANE_END)
            waypoint = np.array([lane_x, lane_y, goal[2]])
            # Both detours start with the same approach straight at the pillar, to a split
            # point in front of it: there the two modes differ only by the hidden side.
            split = np.array([PILLAR_CENTRE[0], PILLAR_CENTRE[1] - travel * LANE_END])
            on_centre = abs(tool[0] - PILLAR_CENTRE[0]) < 0.03
            approaching = passed < -LANE_END - 0.015  # not yet at the split point's line
            if into_lane and on_centre and approaching:
                waypoint = np.array([*split, goal[2]])
        else:
            waypoint = goal
        delta = waypoint - tool
        distance = float(np.linalg.norm(delta))
        target = (
            waypoint
            if distance <= self.step_length
            else tool + delta * (self.step_length / distance)
        )
        command = self.home.copy()  # the gripper stays as at home (closed)
        command[self.arm], _ = self.kinematics.solve(target, q[self.arm], iterations=20)
        return command


class _CoreExpert:
    """The sim core's scripted experts behind the same ``reset(env)``/``act`` interface."""

    def __init__(
        self, task: str, control_rate_hz: float, robot: RobotDescription, tuning=None
    ) -> None:
        from simreal_ros.sim.expert import make_expert

        self.expert = make_expert(task, robot, control_rate_hz, tuning)

    def reset(self, env: TaskEnvironment | None = None) -> None:
        self.expert.reset()

    def act(self, observation: dict) -> np.ndarray:
        return self.expert.act(observation)


def make_demonstrator(
    task: str, control_rate_hz: float = 20.0, *, robot: RobotDescription, tuning=None,
    **options,
):  # fmt: skip
    """A scripted demonstrator of ``robot`` with ``reset(env)`` (after each env reset) and
    ``act(obs)``.

    ``tuning``: the core experts' ``sim.expert.ExpertTuning`` (None: nominal); ``options``
    go to the scenario's expert (``side=`` for reach_around)."""
    check_task(task)
    if task == "reach_around":
        if tuning is not None:
            raise ValueError("the reach_around expert takes no tuning.")
        return ReachAroundExpert(pillar_robot(robot), control_rate_hz=control_rate_hz, **options)
    if options:
        raise ValueError(f"the {task} expert takes no options ({', '.join(options)}).")
    return _CoreExpert(task, control_rate_hz, robot, tuning)


def _imitating_version(adapter_dir: str | Path) -> tuple[Path, dict] | None:
    """The nearest version on ``adapter_dir``'s lineage (itself, then its parents in the same
    store) whose adaptation imitated a retuned teacher, with its metadata; None: none did."""
    from simreal_ros.policy.checkpoint import read_adapter_metadata

    directory = Path(adapter_dir)
    for _ in range(10_000):  # a lineage is finite; a cycle in the metadata is not
        metadata = read_adapter_metadata(directory)
        metrics = metadata.get("metrics") or {}
        if float(metrics.get("adapt_imitated", 0.0)) == 1.0:
            return directory, metadata
        parent = str(metadata.get("parent_version") or "")
        # A sibling in the same store only: a name, never a path read from the metadata.
        if not parent or Path(parent).name != parent or not (directory.parent / parent).is_dir():
            return None
        directory = directory.parent / parent
    raise ValueError(f"{adapter_dir}: its parent versions form a cycle; the store is damaged.")


def adapted_teacher(adapter_dir: str | Path, robot: RobotDescription):
    """The teacher a stored version learned from, as ``sim.expert.ExpertTuning`` at the
    per-tick step it ran with: that of the nearest version on its lineage whose adaptation
    imitated a retuned teacher (``adapt``'s metrics). None when no version on it did: the
    base's nominal teacher. A version's actions are judged against its own teacher's (the
    replay check), not the nominal one's: a student of a teacher at lead 2 commands about
    twice the nominal step."""
    from simreal_ros.sim.expert import ExpertTuning, arm_joint_step

    found = _imitating_version(adapter_dir)
    if found is None:
        return None
    directory, metadata = found
    metrics = metadata["metrics"]
    lead = float(metrics["adapt_teacher_lead"])
    speed = float(metrics["adapt_teacher_speed"])
    scale = [float(v) for v in metadata["action_scale"]]
    if not all(math.isfinite(v) and v > 0 for v in (lead, speed, *scale)):
        raise ValueError(
            f"{directory}: the adaptation's teacher (lead {lead}, speed {speed}, "
            f"step {scale}) is not finite and positive; the metadata is damaged, "
            "re-run the adaptation or diagnose without this version."
        )
    return ExpertTuning(lead, speed, arm_joint_step(robot, scale))


def teacher_sim(adapter_dir: str | Path | None, default: str) -> str | None:
    """The sim in which a stored version's teacher (``adapted_teacher``) is the reference:
    for a version on a lineage that imitated a retuned teacher, the profile that version
    was screened in (the identified sim it was adapted in); else ``default`` (the sim the
    base policy and the nominal teacher were made for). None when that profile is neither
    a shipped one nor a file the version's own store holds, or is a stand-in."""
    from simreal_ros.sim.profiles import PROFILE_NAMES, is_stand_in

    found = _imitating_version(adapter_dir) if adapter_dir else None
    if found is None:
        return default
    directory, metadata = found
    name = str(metadata.get("screening_profile") or "")
    if name not in PROFILE_NAMES:
        store = directory.parent.resolve()
        parts = Path(name).parts
        # The learner wrote it relative to its own working directory: re-root it at the
        # store, and read only inside the store (a path from metadata may point anywhere).
        if store.name in parts:
            at = len(parts) - 1 - parts[::-1].index(store.name)
            parts = (str(store), *parts[at + 1 :])
        path = Path(*parts).resolve() if parts else store
        if not path.is_file() or store not in path.parents:
            return None
        name = str(path)
    return None if is_stand_in(name) else name


def version_demonstrator(policy, task: str, *, robot: RobotDescription):
    """The demonstrator a replay check compares ``policy`` (a ``DeployedPolicy``) with:
    the teacher its version learned from (``adapted_teacher``), or None (the nominal)."""
    adapter_dir = getattr(policy, "adapter_dir", None)
    tuning = adapted_teacher(adapter_dir, robot) if adapter_dir else None
    if tuning is None:
        return None
    rate = policy.converter.spec.control_rate_hz
    return make_demonstrator(task, rate, robot=robot, tuning=tuning)


def make_environment(
    task: str,
    profile: str = "nominal",
    condition: str = "train",
    control_rate_hz: float = 20.0,
    episode_seconds: float = 6.0,
    *,
    robot: RobotDescription,
) -> TaskEnvironment:
    """A task environment of ``robot`` (reset(seed, condition) / step(command)) for any task
    name."""
    check_task(task)
    core_task = task if task in TASKS else "reach"
    config = EnvironmentConfig(
        task=core_task,
        profile=profile,
        condition=condition,
        control_rate_hz=control_rate_hz,
        episode_seconds=episode_seconds,
    )
    if task == "reach_around":
        from simreal_ros.sim.physics import ArmPhysics

        env = TaskEnvironment(config, physics=ArmPhysics(pillar_robot(robot)))
        env.task = ReachAroundTask()
        return env
    return TaskEnvironment(config, robot=robot)

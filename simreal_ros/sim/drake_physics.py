"""The arm and task in Drake: a stand-in outside the MuJoCo family (``engine: drake``).

``DrakeArmPhysics`` offers the interface of ``sim.physics.ArmPhysics`` (the forward
position controller's command, the arm's and the cube's state, named dynamics), so the
task, the environment, the sim bridge, evaluation and the executor run it unchanged. It
keeps the MuJoCo model of the same description as its parameter model: the named
dynamics (``mass.cube``, ``gain.*``, ``latency_steps``, ...) are read and written there,
with the same vocabulary and checks, and the Drake plant is generated from it
(``sim/drake_scene.py``) whenever they change. The effects no MuJoCo profile can express
(``sim/effects.py``) act in a servo loop stepped with every physics step.
"""

from __future__ import annotations

import collections
import hashlib

import numpy as np
from pydrake.math import RigidTransform, RotationMatrix
from pydrake.systems.analysis import Simulator

from simreal_ros.robot.description_record import RobotDescription
from simreal_ros.sim.drake_scene import build_scene
from simreal_ros.sim.effects import EngineEffects, ServoLoop
from simreal_ros.sim.physics import ArmPhysics

# The parameter model's fields the Drake plant is generated from.
_BUILT_FROM = (
    "body_mass",
    "body_inertia",
    "geom_friction",
    "dof_damping",
    "actuator_gainprm",
    "actuator_biasprm",
)


class DrakeArmPhysics:
    """``ArmPhysics``'s interface over a Drake plant with the stand-in's effects."""

    def __init__(self, robot: RobotDescription, effects: EngineEffects | None = None) -> None:
        self.robot = robot
        self.effects = effects or EngineEffects()
        self.parameters = ArmPhysics(robot)  # the named dynamics, on the description's model
        self.model = self.parameters.model
        self.nominal_dynamics = self.parameters.nominal_dynamics
        self.cube_half_size = self.parameters.cube_half_size
        self._arm = list(robot.arm_indices)
        self.servo = ServoLoop(self.effects, len(self._arm), self.effects.time_step_s)
        self.ctrl_lower = self.parameters.ctrl_lower
        self.ctrl_upper = self.parameters.ctrl_upper
        self._command = np.array(robot.home_position, dtype=float)
        self._pending: collections.deque[tuple[int, np.ndarray]] = collections.deque()
        self._goal = np.zeros(3)
        self._stuck = np.zeros(len(self._arm), dtype=bool)
        self.step_count = 0
        self._fingerprint = ""
        self._changed = False  # named dynamics set since the plant was built
        self._build()

    # ----------------------------------------------------------------- the plant
    def _parameters_fingerprint(self) -> str:
        digest = hashlib.sha1()
        for field in _BUILT_FROM:
            digest.update(np.ascontiguousarray(getattr(self.model, field)).tobytes())
        return digest.hexdigest()

    def _build(self) -> None:
        """Generate the plant from the parameter model's current values."""
        names = self.robot.joint_names
        scale = self.effects.per_joint("servo_torque_scale", len(self._arm))
        effort_scale = {names[i]: float(s) for i, s in zip(self._arm, scale, strict=True)}
        scene = build_scene(self.model, self.effects, effort_scale)
        self.scene, plant = scene, scene.plant
        self.simulator = Simulator(scene.diagram)
        self.root = self.simulator.get_mutable_context()
        self.context = plant.GetMyMutableContextFromRoot(self.root)
        self._q_index = np.array([scene.joints[n].position_start() for n in names])
        self._v_index = np.array([scene.joints[n].velocity_start() for n in names])
        self._zero = np.array([scene.offsets[n] for n in names])
        # Each actuated model instance has its own desired-state and actuation ports,
        # ordered by actuator index: (instance ports, the controller joints' slots there).
        self._ports = []
        for instance in scene.instances:
            order = [plant.get_joint_actuator(a).joint().name()
                     for a in plant.GetJointActuatorIndices(instance)]  # fmt: skip
            slots = [(names.index(n), k) for k, n in enumerate(order) if n in names]
            self._ports.append(
                (
                    plant.get_desired_state_input_port(instance),
                    plant.get_actuation_input_port(instance),
                    len(order),
                    slots,
                )
            )
        self._gain = np.array([scene.gains[n] for n in names])  # (Kp, Kd) per joint
        self._effort = np.array([scene.effort_limits[n] for n in names])
        self._frame = scene.frames.get(self.robot.tool_frame)
        if self._frame is None:
            self._frame = scene.bodies[self.robot.tool_frame].body_frame()
        self._couplings = self._coupled_joints()
        self._fingerprint = self._parameters_fingerprint()

    def _rebuild_if_changed(self) -> None:
        """Regenerate the plant if the named dynamics set since it was built differ from
        its values (a reset restores and re-applies a profile's every time)."""
        if not self._changed:
            return
        self._changed = False
        if self._parameters_fingerprint() == self._fingerprint:
            return
        state = self._state()
        self._build()
        self._restore(state)

    def _state(self):
        return (
            self.root.get_time(),
            self.scene.plant.GetPositions(self.context).copy(),
            self.scene.plant.GetVelocities(self.context).copy(),
        )

    def _restore(self, state) -> None:
        time, q, v = state
        self.root.SetTime(time)
        self.scene.plant.SetPositions(self.context, q)
        self.scene.plant.SetVelocities(self.context, v)
        self.simulator.Initialize()

    # ----------------------------------------------------------------- state
    def reset(
        self,
        joint_positions: np.ndarray | None = None,
        cube_position: np.ndarray | None = None,
        cube_yaw: float = 0.0,
        goal: np.ndarray | None = None,
        noise_seed: int | None = None,
    ) -> None:
        """Put the arm, cube and goal at a start state, at rest, with no command pending."""
        self._rebuild_if_changed()
        plant, context = self.scene.plant, self.context
        q = np.array(
            self.robot.home_position if joint_positions is None else joint_positions, float
        )
        positions = np.zeros(plant.num_positions())
        cube_pose = plant.EvalBodyPoseInWorld(context, self.scene.cube)
        plant.SetPositions(context, positions)
        plant.SetFloatingBaseBodyPoseInWorldFrame(
            context, self.scene.cube, cube_pose
        )  # kept unless given
        positions = plant.GetPositions(context)
        positions[self._q_index] = q - self._zero
        for follower, leader, shift, ratio in self._couplings:
            positions[follower] = shift + ratio * positions[leader]
        plant.SetPositions(context, positions)
        plant.SetVelocities(context, np.zeros(plant.num_velocities()))
        if cube_position is not None:
            where = np.asarray(cube_position, dtype=float).copy()
            where[2] += self.effects.table_height_offset_m  # it rests on the table as it is
            rotation = RotationMatrix.MakeZRotation(float(cube_yaw))
            plant.SetFloatingBaseBodyPoseInWorldFrame(
                context, self.scene.cube, RigidTransform(rotation, where)
            )
        if goal is not None:
            self._goal = np.asarray(goal, dtype=float).copy()
        self._stuck[:] = False
        self._command = q.copy()
        self.servo.reset(q[self._arm])
        self._pending.clear()
        self.step_count = 0
        if noise_seed is not None:
            self.parameters.noise_rng = np.random.default_rng(noise_seed)
        self.root.SetTime(0.0)
        self.simulator.Initialize()

    def _coupled_joints(self) -> list[tuple[int, int, float, float]]:
        """(follower, leader) Drake position indices and (offset, ratio) of each joint the
        parameter model mirrors from a controller joint (a gripper's second finger)."""
        model, scene = self.model, self.scene
        by_qpos = {int(model.jnt_qposadr[j]): model.joint(j).name for j in range(model.njnt)}
        out = []
        for follower, leader, offset, ratio in self.parameters._mirrored:
            f, lead = by_qpos[follower], by_qpos[leader]
            # About Drake's zeros (qpos0): q_f = offset + ratio q_l in MuJoCo's coordinates.
            shift = offset + ratio * scene.offsets[lead] - scene.offsets[f]
            out.append((scene.joints[f].position_start(), scene.joints[lead].position_start(),
                        shift, ratio))  # fmt: skip
        return out

    @property
    def time(self) -> float:
        return float(self.root.get_time())

    @property
    def timestep(self) -> float:
        return float(self.effects.time_step_s)

    @property
    def latency_steps(self) -> int:
        return self.parameters.latency_steps

    @property
    def obs_noise(self) -> float:
        return self.parameters.obs_noise

    def validate_command(self, targets) -> np.ndarray:
        return self.parameters.validate_command(targets)

    def set_command(self, targets) -> None:
        """Queue absolute joint position targets (controller order); latency applies."""
        command = np.clip(self.validate_command(targets), self.ctrl_lower, self.ctrl_upper)
        if self.latency_steps <= 0:
            self._command = command
        else:
            self._pending.append((self.step_count + self.latency_steps, command))

    @property
    def command(self) -> np.ndarray:
        return self._command

    def step(self, n: int = 1) -> None:
        """Advance ``n`` physics steps; the servo loop runs at every one."""
        self._rebuild_if_changed()
        for _ in range(n):
            while self._pending and self._pending[0][0] <= self.step_count:
                self._command = self._pending.popleft()[1]
            self._servo_step()
            self.simulator.AdvanceTo(self.root.get_time() + self.effects.time_step_s)
            self.step_count += 1

    def _servo_step(self) -> None:
        plant, context = self.scene.plant, self.context
        q = self.joint_positions()
        v = self.joint_velocities()
        reference = self._command.copy()
        # The servo regulates the encoders: the arm joints' set-point after the effects.
        reference[self._arm] = self.servo.reference(self._command[self._arm], q[self._arm])
        feedforward = np.zeros(len(q))
        servo = self.servo
        if servo.coulomb.any() or servo.stiction.any():
            arm = self._arm
            kp, kd = self._gain[arm, 0], self._gain[arm, 1]
            drive = np.clip(kp * (reference[arm] - q[arm]) - kd * v[arm],
                            -self._effort[arm], self._effort[arm])  # fmt: skip
            gravity = plant.CalcGravityGeneralizedForces(context)[self._v_index[arm]]
            inertia = np.diag(plant.CalcMassMatrix(context))[self._v_index[arm]]
            feedforward[arm], self._stuck = servo.friction(
                v[arm], drive + gravity, inertia, self._stuck
            )
        desired = reference - self._zero
        for state_port, actuation_port, size, slots in self._ports:
            state = np.zeros(2 * size)
            effort = np.zeros(size)
            for joint, slot in slots:
                state[slot] = desired[joint]
                effort[slot] = feedforward[joint]
            state_port.FixValue(context, state)
            actuation_port.FixValue(context, effort)

    # ----------------------------------------------------------- measurements
    def joint_positions(self) -> np.ndarray:
        return self.scene.plant.GetPositions(self.context)[self._q_index] + self._zero

    def joint_velocities(self) -> np.ndarray:
        return self.scene.plant.GetVelocities(self.context)[self._v_index].copy()

    def joint_efforts(self) -> np.ndarray:
        kp, kd = self._gain[:, 0], self._gain[:, 1]
        desired = self._command
        effort = kp * (desired - self.joint_positions()) - kd * self.joint_velocities()
        return np.clip(effort, -self._effort, self._effort)

    def measured_joint_positions(self) -> np.ndarray:
        """Joint positions as the encoders report them (offsets and the profile's noise)."""
        q = self.joint_positions()
        q[self._arm] = self.servo.measured(q[self._arm])
        if self.obs_noise > 0:
            q += self.parameters.noise_rng.normal(0.0, self.obs_noise, q.shape)
        return q

    def _cube_pose(self) -> RigidTransform:
        return self.scene.plant.EvalBodyPoseInWorld(self.context, self.scene.cube)

    def object_position(self) -> np.ndarray:
        return np.array(self._cube_pose().translation())

    def object_orientation(self) -> np.ndarray:
        """Cube orientation quaternion (w, x, y, z)."""
        return np.array(self._cube_pose().rotation().ToQuaternion().wxyz())

    def measured_object_position(self) -> np.ndarray:
        p = self.object_position()
        if self.obs_noise > 0:
            p += self.parameters.noise_rng.normal(0.0, self.obs_noise, 3)
        return p

    def ee_position(self) -> np.ndarray:
        return np.array(self._frame.CalcPoseInWorld(self.context).translation())

    def goal(self) -> np.ndarray:
        return self._goal.copy()

    def set_goal(self, goal: np.ndarray) -> None:
        self._goal = np.asarray(goal, dtype=float).copy()

    @property
    def data(self):
        """This state as MuJoCo data of the same description (what a camera renders): the
        parameter model's data with the joints, the cube and the goal set from Drake."""
        import mujoco

        mirror, data = self.parameters, self.parameters.data
        data.qpos[mirror.qpos_idx] = self.joint_positions()
        for follower, leader, offset, ratio in mirror._mirrored:
            data.qpos[follower] = offset + ratio * data.qpos[leader]
        data.qpos[mirror.cube_qpos : mirror.cube_qpos + 3] = self.object_position()
        data.qpos[mirror.cube_qpos + 3 : mirror.cube_qpos + 7] = self.object_orientation()
        data.mocap_pos[mirror.goal_mocap] = self._goal
        mujoco.mj_kinematics(mirror.model, data)
        return data

    # --------------------------------------------------------------- dynamics
    def dynamics_names(self) -> list[str]:
        return self.parameters.dynamics_names()

    def get_dynamics(self, names: list[str] | None = None) -> dict[str, float]:
        return self.parameters.get_dynamics(names)

    def set_dynamics(self, values) -> None:
        """Named dynamics, checked and kept by the parameter model; the plant follows at
        the next step or reset."""
        self.parameters.set_dynamics(values)
        self._changed = True

    def restore_nominal(self) -> None:
        self.parameters.restore_nominal()
        self._pending.clear()
        self._changed = True

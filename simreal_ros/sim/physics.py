"""MuJoCo physics of the arm, table, cube and goal marker (the dm_control "Physics" part).

The controller interface is the one a ros2_control arm with a forward position controller
offers: a command is one absolute position target per controller joint, in the robot
description's joint order (rad; m for a prismatic joint such as a gripper). Dynamics
parameters (masses, friction, damping, actuator gains, command latency, observation
noise) are read and written by name so profiles, domain randomization and system
identification share one vocabulary:

``mass.<body>`` (``mass.tool``: the body carrying the tool frame, or the nearest one
above it with mass, on any arm),
``friction.<geom>`` (sliding), ``damping.<joint>``, ``gain.<joint>``
(position gain of the joint's actuator), ``latency_steps`` (physics steps between a
command arriving and being applied), ``obs_noise`` (std of Gaussian noise on measured
joint positions [rad] and object position [m]).
"""

from __future__ import annotations

import collections
import math
from collections.abc import Collection, Mapping

import mujoco
import numpy as np

from simreal_ros.robot.description_record import RobotDescription
from simreal_ros.robot.model import compile_scene, joint_address

# Bodies and geoms whose parameters are exposed by default (any valid name is accepted).
DEFAULT_MASS_BODIES = ("cube", "tool")
TOOL_BODY = "tool"  # alias of the body that carries the robot's tool frame
DEFAULT_FRICTION_GEOMS = ("cube_geom", "table")


def _signature(a: int, b: int) -> int:
    """MuJoCo's key of an unordered pair of ids (body excludes, explicit geom pairs)."""
    return (min(a, b) << 16) + max(a, b)


def geoms_collide(model: mujoco.MjModel, g: int, h: int, excluded: Collection[int]) -> bool:
    """Whether MuJoCo's filter lets geoms ``g`` and ``h`` touch: their collision bits, then
    its body filter (not within one weld, nor a weld and its parent's unless that is the
    world), then the body excludes (``excluded``: ``model.exclude_signature`` as a set)."""
    if not (
        model.geom_contype[g] & model.geom_conaffinity[h]
        or model.geom_contype[h] & model.geom_conaffinity[g]
    ):
        return False
    weld = model.body_weldid
    bg, bh = int(model.geom_bodyid[g]), int(model.geom_bodyid[h])
    wg, wh = int(weld[bg]), int(weld[bh])
    parents = int(weld[model.body_parentid[wg]]), int(weld[model.body_parentid[wh]])
    filter_parent = not model.opt.disableflags & mujoco.mjtDisableBit.mjDSBL_FILTERPARENT
    if wg == wh or (filter_parent and wg and wh and (wg == parents[1] or wh == parents[0])):
        return False
    return _signature(bg, bh) not in excluded


def friction_floor(
    model: mujoco.MjModel, geoms: Collection[int], sliding: np.ndarray | None = None
) -> tuple[float, int]:
    """The factor on the sliding friction of ``geoms`` (scaled together) below which they
    decide none of the contacts they can make, and the geom that decides the first contact
    they lose (-1: none). MuJoCo gives a contact the friction of the geom of higher
    priority, the larger of the two at equal priority, and an explicit pair's its own; so
    below this factor every value simulates the same. ``sliding``: the geoms' sliding
    frictions to use (default: the model's). 0.0: they decide a contact at any value;
    inf: none at all."""
    sliding = model.geom_friction[:, 0] if sliding is None else sliding
    group = {int(g) for g in geoms}
    excluded = set(model.exclude_signature.tolist())
    explicit = {
        _signature(int(a), int(b)) for a, b in zip(model.pair_geom1, model.pair_geom2, strict=True)
    }
    floor, decider = math.inf, -1
    for g in group:
        for h in range(model.ngeom):
            if h == g or not geoms_collide(model, g, h, excluded):
                continue
            if _signature(g, h) in explicit:  # the pair's friction decides it
                continue
            if h in group or model.geom_priority[g] > model.geom_priority[h]:
                return 0.0, int(h)
            if model.geom_priority[g] < model.geom_priority[h] or sliding[g] <= 0:
                continue
            threshold = float(sliding[h] / sliding[g])
            if threshold < floor:
                floor, decider = threshold, int(h)
    return floor, decider


class ArmPhysics:
    """The MuJoCo model and data, with the arm's controller interface and named dynamics."""

    def __init__(self, robot: RobotDescription) -> None:
        self.robot = robot
        self.model = compile_scene(self.robot)
        self.data = mujoco.MjData(self.model)
        model = self.model
        names = self.robot.joint_names
        self.qpos_idx, self.dof_idx = joint_address(model, names)
        actuator_of_joint = {int(model.actuator_trnid[i, 0]): i for i in range(model.nu)}
        self.actuator_idx = np.array([actuator_of_joint[model.joint(n).id] for n in names])
        self.cube_body = model.body("cube").id
        cube_joint = model.joint("cube_joint")
        self.cube_qpos = int(cube_joint.qposadr[0])
        self.cube_dof = int(cube_joint.dofadr[0])
        self.cube_half_size = float(model.geom("cube_geom").size[0])
        self.goal_mocap = int(model.body("goal").mocapid[0])
        self.ee_site = model.site(self.robot.tool_frame).id
        self.tool_body = int(model.site_bodyid[self.ee_site])
        while model.body_mass[self.tool_body] <= 0 and model.body_parentid[self.tool_body] > 0:
            # A massless tool link (a URDF's tool0): the hand that carries it has the mass.
            self.tool_body = int(model.body_parentid[self.tool_body])
        self._mirrored = self._mirrored_joints()
        self.ctrl_lower = model.actuator_ctrlrange[self.actuator_idx, 0].copy()
        self.ctrl_upper = model.actuator_ctrlrange[self.actuator_idx, 1].copy()

        self.latency_steps = 0
        self.obs_noise = 0.0
        self.noise_rng = np.random.default_rng(0)
        # Commands waiting out the latency: (physics step at which to apply, targets).
        self._pending: collections.deque[tuple[int, np.ndarray]] = collections.deque()
        self.step_count = 0
        self._command = np.array(self.robot.home_position, dtype=float)
        self._nominal_model = compile_scene(self.robot)
        self.nominal_dynamics = self.get_dynamics()

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
        mujoco.mj_resetData(self.model, self.data)
        q = self.robot.home_position if joint_positions is None else joint_positions
        self.data.qpos[self.qpos_idx] = q
        # Joints coupled to a controller joint (a gripper's second finger) follow it.
        for follower, leader, offset, ratio in self._mirrored:
            self.data.qpos[follower] = offset + ratio * self.data.qpos[leader]
        if cube_position is not None:
            self.data.qpos[self.cube_qpos : self.cube_qpos + 3] = cube_position
            self.data.qpos[self.cube_qpos + 3 : self.cube_qpos + 7] = [
                math.cos(cube_yaw / 2),
                0.0,
                0.0,
                math.sin(cube_yaw / 2),
            ]
        if goal is not None:
            self.data.mocap_pos[self.goal_mocap] = goal
        self._command = np.array(q, dtype=float)
        self.data.ctrl[self.actuator_idx] = self._command
        self._pending.clear()
        self.step_count = 0
        if noise_seed is not None:
            self.noise_rng = np.random.default_rng(noise_seed)
        mujoco.mj_forward(self.model, self.data)

    def _mirrored_joints(self) -> list[tuple[int, int, float, float]]:
        """(follower qpos, leader qpos, offset, ratio) of each linear joint equality whose
        leader is a controller joint: the coupling a parallel gripper's linkage makes."""
        model = self.model
        controlled = set(self.qpos_idx.tolist())
        out = []
        for i in range(model.neq):
            if model.eq_type[i] != mujoco.mjtEq.mjEQ_JOINT or model.eq_obj2id[i] < 0:
                continue
            follower = int(model.jnt_qposadr[model.eq_obj1id[i]])
            leader = int(model.jnt_qposadr[model.eq_obj2id[i]])
            if leader in controlled and follower not in controlled:
                out.append(
                    (follower, leader, float(model.eq_data[i, 0]), float(model.eq_data[i, 1]))
                )
        return out

    @property
    def time(self) -> float:
        return float(self.data.time)

    @property
    def timestep(self) -> float:
        return float(self.model.opt.timestep)

    def validate_command(self, targets) -> np.ndarray:
        """The command as a float array, or ValueError saying what is wrong with it."""
        command = np.asarray(targets, dtype=float).reshape(-1)
        if command.shape[0] != self.robot.num_joints:
            raise ValueError(
                f"command has {command.shape[0]} values but the arm has "
                f"{self.robot.num_joints} joints ({', '.join(self.robot.joint_names)}); "
                "send one absolute position target per joint in that order."
            )
        if not np.all(np.isfinite(command)):
            raise ValueError(f"command contains non-finite values {command.tolist()}.")
        return command

    def set_command(self, targets) -> None:
        """Queue absolute joint position targets (controller order); latency applies.

        Targets outside the joint limits are clipped, as the arm's controller would.
        """
        command = np.clip(self.validate_command(targets), self.ctrl_lower, self.ctrl_upper)
        if self.latency_steps <= 0:
            self._command = command
            self.data.ctrl[self.actuator_idx] = command
        else:
            self._pending.append((self.step_count + self.latency_steps, command))

    @property
    def command(self) -> np.ndarray:
        """The targets the actuators track now (after latency)."""
        return self._command

    def step(self, n: int = 1) -> None:
        """Advance ``n`` physics steps, applying delayed commands when they fall due."""
        model, data = self.model, self.data
        if not self._pending:
            mujoco.mj_step(model, data, nstep=n)
            self.step_count += n
            return
        for _ in range(n):
            while self._pending and self._pending[0][0] <= self.step_count:
                self._command = self._pending.popleft()[1]
                data.ctrl[self.actuator_idx] = self._command
            mujoco.mj_step(model, data)
            self.step_count += 1

    # ----------------------------------------------------------- measurements
    def joint_positions(self) -> np.ndarray:
        return self.data.qpos[self.qpos_idx].copy()

    def joint_velocities(self) -> np.ndarray:
        return self.data.qvel[self.dof_idx].copy()

    def joint_efforts(self) -> np.ndarray:
        return self.data.actuator_force[self.actuator_idx].copy()

    def measured_joint_positions(self) -> np.ndarray:
        """Joint positions as a sensor reports them (with the profile's noise)."""
        q = self.joint_positions()
        if self.obs_noise > 0:
            q += self.noise_rng.normal(0.0, self.obs_noise, q.shape)
        return q

    def object_position(self) -> np.ndarray:
        return self.data.qpos[self.cube_qpos : self.cube_qpos + 3].copy()

    def object_orientation(self) -> np.ndarray:
        """Cube orientation quaternion (w, x, y, z)."""
        return self.data.qpos[self.cube_qpos + 3 : self.cube_qpos + 7].copy()

    def measured_object_position(self) -> np.ndarray:
        p = self.object_position()
        if self.obs_noise > 0:
            p += self.noise_rng.normal(0.0, self.obs_noise, 3)
        return p

    def ee_position(self) -> np.ndarray:
        return self.data.site_xpos[self.ee_site].copy()

    def goal(self) -> np.ndarray:
        return self.data.mocap_pos[self.goal_mocap].copy()

    def set_goal(self, goal: np.ndarray) -> None:
        self.data.mocap_pos[self.goal_mocap] = goal

    # --------------------------------------------------------------- dynamics
    def dynamics_names(self) -> list[str]:
        names = [f"mass.{b}" for b in DEFAULT_MASS_BODIES]
        names += [f"friction.{g}" for g in DEFAULT_FRICTION_GEOMS]
        names += [f"damping.{j}" for j in self.robot.joint_names]
        names += [f"gain.{j}" for j in self.robot.joint_names]
        return [*names, "latency_steps", "obs_noise"]

    def _resolve(self, name: str) -> tuple[str, int]:
        kind, _, target = name.partition(".")
        object_type = {
            "mass": mujoco.mjtObj.mjOBJ_BODY,
            "friction": mujoco.mjtObj.mjOBJ_GEOM,
            "damping": mujoco.mjtObj.mjOBJ_JOINT,
            "gain": mujoco.mjtObj.mjOBJ_JOINT,
        }.get(kind)
        index = mujoco.mj_name2id(self.model, object_type, target) if object_type else -1
        if kind == "mass" and target == TOOL_BODY and index < 0:
            index = self.tool_body
        if index < 0:
            raise ValueError(
                f"unknown dynamics parameter {name!r}; use latency_steps, obs_noise, "
                "mass.<body>, friction.<geom>, damping.<joint> or gain.<joint>, e.g. "
                f"{', '.join(self.dynamics_names()[:6])}."
            )
        if kind == "gain":
            actuators = np.flatnonzero(self.model.actuator_trnid[:, 0] == index)
            if actuators.size == 0:
                raise ValueError(f"joint {target!r} has no actuator, so no gain to set.")
            index = int(actuators[0])
        return kind, index

    def get_dynamics(self, names: list[str] | None = None) -> dict[str, float]:
        values = {}
        for name in names or self.dynamics_names():
            if name == "latency_steps":
                values[name] = float(self.latency_steps)
            elif name == "obs_noise":
                values[name] = float(self.obs_noise)
            else:
                kind, index = self._resolve(name)
                values[name] = float(
                    {
                        "mass": lambda i: self.model.body_mass[i],
                        "friction": lambda i: self.model.geom_friction[i, 0],
                        "damping": lambda i: self.model.dof_damping[self.model.jnt_dofadr[i]],
                        "gain": lambda i: self.model.actuator_gainprm[i, 0],
                    }[kind](index)
                )
        return values

    def set_dynamics(self, values: Mapping[str, float]) -> None:
        """Set named dynamics parameters (SI units); all are checked before any is set."""
        checked = []
        for name, value in values.items():
            value = float(value)
            if not math.isfinite(value):
                raise ValueError(f"dynamics parameter {name} = {value} is not finite.")
            if name == "latency_steps":
                if value < 0 or value != int(value):
                    raise ValueError(f"latency_steps = {value} must be a whole number >= 0.")
                checked.append((name, None, value))
                continue
            if name == "obs_noise":
                if value < 0:
                    raise ValueError(f"obs_noise = {value} must be >= 0.")
                checked.append((name, None, value))
                continue
            kind, index = self._resolve(name)
            if kind in ("mass", "gain") and value <= 0:
                raise ValueError(f"{name} = {value} must be positive.")
            if value < 0:
                raise ValueError(f"{name} = {value} must be >= 0.")
            checked.append((kind, index, value))
        masses_changed = False
        model = self.model
        for kind, index, value in checked:
            if kind == "latency_steps":
                self.latency_steps = int(value)
            elif kind == "obs_noise":
                self.obs_noise = value
            elif kind == "mass":
                # Scale the inertia with the mass so the body keeps its shape.
                ratio = value / model.body_mass[index]
                model.body_mass[index] = value
                model.body_inertia[index] *= ratio
                masses_changed = True
            elif kind == "friction":
                model.geom_friction[index, 0] = value
            elif kind == "damping":
                model.dof_damping[model.jnt_dofadr[index]] = value
            elif kind == "gain":
                # A position actuator: force = kp * (target - q) - kv * qdot.
                model.actuator_gainprm[index, 0] = value
                model.actuator_biasprm[index, 1] = -value
        if masses_changed:
            self._set_const()

    def restore_nominal(self) -> None:
        """Undo every dynamics change (back to the model file's values)."""
        nominal = self._nominal_model
        for field in (
            "body_mass",
            "body_inertia",
            "geom_friction",
            "dof_damping",
            "actuator_gainprm",
            "actuator_biasprm",
        ):
            getattr(self.model, field)[:] = getattr(nominal, field)
        self.latency_steps = 0
        self.obs_noise = 0.0
        self._pending.clear()
        self._set_const()

    def _set_const(self) -> None:
        # mj_setConst recomputes mass-dependent constants; it runs kinematics at qpos0 on
        # the data it is given, so keep the simulation state and restore it afterwards.
        state = (self.data.qpos.copy(), self.data.qvel.copy(), self.data.time)
        mujoco.mj_setConst(self.model, self.data)
        self.data.qpos[:], self.data.qvel[:], self.data.time = state
        mujoco.mj_forward(self.model, self.data)

"""Contacts of the arm at rest: what touches what at home, and how hard.

A model can look right and simulate wrong: a URDF's meshes that meet at a joint press the
base into link 1 with tens of kilonewtons while the arm stands still, and every episode
then runs on that. At rest the only loads are gravity's, so any arm contact at home is a
modelling error (links through each other, or a home posture in the table). ``robot
check`` lists each contact with its normal force, beside the arm's weight for scale.
"""

from __future__ import annotations

import dataclasses

import mujoco
import numpy as np

from simreal_ros.robot.description_record import RobotDescription
from simreal_ros.robot.model import compile_robot, compile_scene


@dataclasses.dataclass(frozen=True)
class RestContact:
    """One contact: the bodies (links) and geoms on each side, the normal force (N),
    the penetration (m, positive when the geoms overlap) and whether both sides belong
    to the arm."""

    body1: str
    body2: str
    geom1: str
    geom2: str
    normal_force: float
    penetration: float
    arm_arm: bool

    def describe(self) -> str:
        kind = "arm-arm" if self.arm_arm else "arm-scene"
        return (
            f"{self.body1} <-> {self.body2} ({kind}): {self.normal_force:.3g} N, "
            f"{1000 * self.penetration:.1f} mm deep"
        )


def arm_weight(robot: RobotDescription) -> float:
    """The arm's weight (N): the scale a contact force at rest is read against."""
    model = compile_robot(robot)
    return float(np.sum(model.body_mass) * np.linalg.norm(model.opt.gravity))


def contacts_at(robot: RobotDescription, q: np.ndarray | None = None) -> list[RestContact]:
    """Every contact involving an arm geom with the arm at rest at ``q`` (default: home)
    in the task scene, its servos holding that posture; the cube where the scene puts it."""
    arm = compile_robot(robot)
    arm_bodies = {arm.body(i).name for i in range(1, arm.nbody)}
    model = compile_scene(robot)
    data = mujoco.MjData(model)
    q = np.asarray(robot.home_position if q is None else q, dtype=float)
    for i, name in enumerate(robot.joint_names):
        data.qpos[model.joint(name).qposadr[0]] = q[i]
        actuator = model.actuator_trnid[:, 0].tolist().index(model.joint(name).id)
        data.ctrl[actuator] = q[i]
    mujoco.mj_forward(model, data)
    found = []
    wrench = np.zeros(6)
    for index in range(data.ncon):
        contact = data.contact[index]
        bodies = [model.body(model.geom_bodyid[g]).name for g in (contact.geom1, contact.geom2)]
        on_arm = [body in arm_bodies for body in bodies]
        if not any(on_arm):
            continue  # the cube on the table
        mujoco.mj_contactForce(model, data, index, wrench)
        geoms = [model.geom(g).name or f"geom {g}" for g in (contact.geom1, contact.geom2)]
        found.append(
            RestContact(
                body1=bodies[0],
                body2=bodies[1],
                geom1=geoms[0],
                geom2=geoms[1],
                normal_force=float(abs(wrench[0])),
                penetration=float(max(0.0, -contact.dist)),
                arm_arm=all(on_arm),
            )
        )
    return found

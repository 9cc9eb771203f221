"""The arm and the task scene in Drake, generated from the compiled MuJoCo model.

The robot description and the scene file are compiled once by MuJoCo (``robot/model.py``,
any MJCF or URDF arm); this module reads that compiled model (bodies, inertias, joints,
limits, collision geometry, collision filters, actuators, joint couplings) and builds the
same arm and task in a Drake ``MultibodyPlant``. Nothing is written twice by hand, and an
arm that MuJoCo compiles needs no file of its own here.

What differs from MuJoCo, by design of the two engines (docs/simulation.md):
- contact: Drake's discrete SAP solver with compliant point contact (stiffness from its
  penetration allowance, Hunt-Crossley dissipation), against MuJoCo's soft constraints;
- friction: Drake combines two surfaces' coefficients as 2ab/(a+b) and has no torsional
  or rolling friction; MuJoCo takes the larger and models both;
- servo: Drake's implicit PD actuators with an effort limit, tracking a set-point the
  stand-in's servo loop (``sim/effects.py``) moves; MuJoCo's position actuators;
- joint friction loss and armature of unactuated joints are not carried over (the servo
  loop models joint friction itself); gravity compensation is a body's gravity switched
  off, for bodies whose ``gravcomp`` is at least one half.
"""

from __future__ import annotations

import dataclasses
import math

import mujoco
import numpy as np
from pydrake.common.eigen_geometry import Quaternion
from pydrake.geometry import (
    AddContactMaterial,
    Box,
    Capsule,
    CollisionFilterDeclaration,
    Convex,
    Cylinder,
    Ellipsoid,
    GeometrySet,
    HalfSpace,
    ProximityProperties,
    Sphere,
)
from pydrake.math import RigidTransform, RotationMatrix
from pydrake.multibody.plant import (
    AddMultibodyPlant,
    CoulombFriction,
    MultibodyPlant,
    MultibodyPlantConfig,
)
from pydrake.multibody.tree import (
    FixedOffsetFrame,
    PdControllerGains,
    PrismaticJoint,
    RevoluteJoint,
    RigidBody,
    RotationalInertia,
    SpatialInertia,
    WeldJoint,
)
from pydrake.systems.framework import Diagram, DiagramBuilder

from simreal_ros.sim.effects import EngineEffects
from simreal_ros.sim.physics import geoms_collide

# Compliant point contact: stiff enough that the cube sinks well under a millimetre into
# the table (N/m), with Hunt-Crossley dissipation (s/m); SAP stays stable at this stiffness.
CONTACT_STIFFNESS = 1e5
CONTACT_DISSIPATION = 10.0
CUBE_BODY = "cube"
CUBE_GEOM = "cube_geom"
TABLE_GEOM = "table"


@dataclasses.dataclass
class DrakeScene:
    """The built diagram and what the stand-in's physics needs of it."""

    diagram: Diagram
    plant: MultibodyPlant
    joints: dict[str, object]  # MuJoCo joint name -> Drake joint
    offsets: dict[str, float]  # MuJoCo joint name -> its qpos0 (Drake's zero)
    actuators: dict[str, object]  # MuJoCo joint name -> Drake joint actuator
    gains: dict[str, tuple[float, float]]  # joint -> (Kp, Kd) of its servo, Drake units
    effort_limits: dict[str, float]
    bodies: dict[str, RigidBody]
    frames: dict[str, object]  # sites -> Drake frames
    cube: RigidBody
    instances: list  # model instances with actuators (each has its own input ports)


def _transform(pos, quat) -> RigidTransform:
    w, x, y, z = (float(v) for v in quat)
    norm = math.sqrt(w * w + x * x + y * y + z * z)
    rotation = RotationMatrix(Quaternion(w / norm, x / norm, y / norm, z / norm))
    return RigidTransform(rotation, np.asarray(pos, dtype=float))


def _spatial_inertia(model: mujoco.MjModel, body: int) -> SpatialInertia:
    mass = float(model.body_mass[body])
    if mass <= 0:
        return SpatialInertia.Zero()  # a massless frame body (a URDF's tool0 or base)
    rotation = _transform(np.zeros(3), model.body_iquat[body]).rotation().matrix()
    about_com = rotation @ np.diag(model.body_inertia[body]) @ rotation.T
    return SpatialInertia.MakeFromCentralInertia(
        mass, np.asarray(model.body_ipos[body], dtype=float), _rotational(about_com)
    )


def _rotational(matrix: np.ndarray) -> RotationalInertia:
    m = matrix
    return RotationalInertia(m[0, 0], m[1, 1], m[2, 2], m[0, 1], m[0, 2], m[1, 2])


def _shape(model: mujoco.MjModel, geom: int):
    """The Drake shape of a MuJoCo geom; ValueError for a kind Drake cannot collide."""
    kind, size = int(model.geom_type[geom]), model.geom_size[geom]
    types = mujoco.mjtGeom
    if kind == types.mjGEOM_PLANE:
        return HalfSpace()
    if kind == types.mjGEOM_SPHERE:
        return Sphere(float(size[0]))
    if kind == types.mjGEOM_CAPSULE:
        return Capsule(float(size[0]), 2.0 * float(size[1]))
    if kind == types.mjGEOM_CYLINDER:
        return Cylinder(float(size[0]), 2.0 * float(size[1]))
    if kind == types.mjGEOM_ELLIPSOID:
        return Ellipsoid(*(float(s) for s in size))
    if kind == types.mjGEOM_BOX:
        return Box(*(2.0 * float(s) for s in size))
    if kind == types.mjGEOM_MESH:
        mesh = int(model.geom_dataid[geom])
        start, count = int(model.mesh_vertadr[mesh]), int(model.mesh_vertnum[mesh])
        points = np.asarray(model.mesh_vert[start : start + count], dtype=float).T
        return Convex(points, f"mesh{mesh}")  # MuJoCo collides a mesh's convex hull too
    name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_GEOM, geom) or f"geom {geom}"
    raise ValueError(
        f"{name}: MuJoCo geom type {kind} has no Drake counterpart here; use a primitive or "
        "a mesh for collision."
    )


def rounded_box_points(half: float, radius: float, per_corner: int = 24) -> np.ndarray:
    """Points whose convex hull is a cube of half-size ``half`` with edges rounded to
    ``radius`` (3 x N)."""
    rng = np.random.default_rng(0)  # a fixed sphere sampling: the same hull every build
    directions = rng.normal(size=(per_corner, 3))
    directions = np.abs(directions / np.linalg.norm(directions, axis=1, keepdims=True))
    points = []
    for signs in np.array(np.meshgrid([-1, 1], [-1, 1], [-1, 1])).T.reshape(-1, 3):
        centre = signs * (half - radius)
        points.append(centre + radius * signs * directions)
        points.append(centre + radius * signs * np.eye(3))  # the faces stay flat and full
    return np.concatenate(points).T


def _name(model: mujoco.MjModel, kind, index: int, fallback: str) -> str:
    return mujoco.mj_id2name(model, kind, index) or f"{fallback}{index}"


def build_scene(
    model: mujoco.MjModel, effects: EngineEffects, effort_scale: dict[str, float] | None = None
) -> DrakeScene:
    """The arm and task of ``model`` (a compiled scene, with its current dynamics values) in
    Drake, with the scene effects of ``effects`` (table height, the cube) and each servo's
    effort limit scaled by ``effort_scale`` (joint name: factor; a current limit)."""
    builder = DiagramBuilder()
    config = MultibodyPlantConfig(
        time_step=effects.time_step_s,
        discrete_contact_approximation="similar",  # SAP family: needed by PD actuators
        contact_model="point",
    )
    plant, scene_graph = AddMultibodyPlant(config, builder)
    plant_instances = {
        False: plant.AddModelInstance("scene"),
        True: plant.AddModelInstance("gravity_compensated"),
    }
    types = mujoco.mjtObj
    bodies: dict[int, RigidBody] = {0: plant.world_body()}
    named_bodies: dict[str, RigidBody] = {}
    joints, offsets = {}, {}
    joint_of_mj: dict[int, object] = {}
    cube_body = mujoco.mj_name2id(model, types.mjOBJ_BODY, CUBE_BODY)
    for b in range(1, model.nbody):
        name = _name(model, types.mjOBJ_BODY, b, "body")
        instance = plant_instances[bool(model.body_gravcomp[b] >= 0.5)]
        inertia = _spatial_inertia(model, b)
        if b == cube_body:
            inertia = _cube_inertia(model, b, effects)
        body = plant.AddRigidBody(name, instance, inertia)
        bodies[b], named_bodies[name] = body, body
        parent = bodies[int(model.body_parentid[b])]
        x_pb = _transform(model.body_pos[b], model.body_quat[b])
        count, first = int(model.body_jntnum[b]), int(model.body_jntadr[b])
        if count == 0:
            plant.AddJoint(WeldJoint(f"{name}_weld", parent.body_frame(), body.body_frame(), x_pb))
            continue
        if count > 1:
            raise ValueError(
                f"body {name!r} has {count} joints; the Drake stand-in takes one joint per "
                "body (split it into bodies chained by one joint each)."
            )
        kind = int(model.jnt_type[first])
        if kind == mujoco.mjtJoint.mjJNT_FREE:
            plant.SetDefaultFloatingBaseBodyPose(body, x_pb)  # floating: Drake adds the joint
            continue
        joint = _joint(plant, model, first, parent, body, x_pb)
        joint_name = _name(model, types.mjOBJ_JOINT, first, "joint")
        joints[joint_name], joint_of_mj[first] = joint, joint
        offsets[joint_name] = float(model.qpos0[model.jnt_qposadr[first]])
    frames = {}
    for s in range(model.nsite):
        site = _name(model, types.mjOBJ_SITE, s, "site")
        body = bodies[int(model.site_bodyid[s])]
        frame = FixedOffsetFrame(
            f"site_{site}", body.body_frame(), _transform(model.site_pos[s], model.site_quat[s])
        )
        frames[site] = plant.AddFrame(frame)
    _add_geometry(plant, scene_graph, model, bodies, effects)
    actuators, gains, limits, instances = _add_actuators(
        plant, model, joint_of_mj, effort_scale or {}
    )
    _add_couplings(plant, model, joint_of_mj)
    plant.set_gravity_enabled(plant_instances[True], False)  # MuJoCo's gravcomp
    plant.Finalize()
    diagram = builder.Build()
    return DrakeScene(
        diagram=diagram, plant=plant, joints=joints, offsets=offsets, actuators=actuators,
        gains=gains, effort_limits=limits, bodies=named_bodies, frames=frames,
        cube=named_bodies[CUBE_BODY], instances=instances,
    )  # fmt: skip


def _joint(plant, model, j: int, parent: RigidBody, body: RigidBody, x_pb: RigidTransform):
    name = _name(model, mujoco.mjtObj.mjOBJ_JOINT, j, "joint")
    x_bj = RigidTransform(np.asarray(model.jnt_pos[j], dtype=float))
    on_parent = plant.AddFrame(
        FixedOffsetFrame(f"{name}_parent", parent.body_frame(), x_pb @ x_bj)
    )
    on_child = plant.AddFrame(FixedOffsetFrame(f"{name}_child", body.body_frame(), x_bj))
    axis = np.asarray(model.jnt_axis[j], dtype=float)
    qpos0 = float(model.qpos0[model.jnt_qposadr[j]])
    damping = float(model.dof_damping[model.jnt_dofadr[j]])
    lower, upper = -math.inf, math.inf
    if model.jnt_limited[j]:
        lower, upper = (float(v) - qpos0 for v in model.jnt_range[j])
    kind = int(model.jnt_type[j])
    if kind == mujoco.mjtJoint.mjJNT_HINGE:
        joint = RevoluteJoint(name, on_parent, on_child, axis, lower, upper, damping)
    elif kind == mujoco.mjtJoint.mjJNT_SLIDE:
        joint = PrismaticJoint(name, on_parent, on_child, axis, lower, upper, damping)
    else:
        raise ValueError(
            f"joint {name!r}: a ball joint has no counterpart in the Drake stand-in; model it "
            "as three hinges on chained bodies."
        )
    return plant.AddJoint(joint)


def _cube_inertia(model: mujoco.MjModel, body: int, effects: EngineEffects) -> SpatialInertia:
    """The cube's inertia: the model's, or a solid cube of the effects' mass whose centre of
    mass is offset (a cube loaded off-centre)."""
    mass = effects.cube_mass_kg or float(model.body_mass[body])
    offset = np.asarray(effects.cube_com_offset_m, dtype=float)
    if not effects.cube_mass_kg and not offset.any():
        return _spatial_inertia(model, body)
    geom = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, CUBE_GEOM)
    side = 2.0 * float(model.geom_size[geom][0])
    moment = mass * side * side / 6.0
    return SpatialInertia.MakeFromCentralInertia(
        mass, offset, RotationalInertia(moment, moment, moment)
    )


def _add_geometry(plant, scene_graph, model, bodies, effects: EngineEffects) -> None:
    """Collision geometry with MuJoCo's pairs: every pair MuJoCo would not collide is
    filtered out (Drake's own filter of adjacent bodies stays on top)."""
    colliding = [
        g for g in range(model.ngeom) if model.geom_contype[g] or model.geom_conaffinity[g]
    ]
    ids = {}
    table = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, TABLE_GEOM)
    cube = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, CUBE_GEOM)
    for g in colliding:
        name = _name(model, mujoco.mjtObj.mjOBJ_GEOM, g, "geom")
        pose = _transform(model.geom_pos[g], model.geom_quat[g])
        shape = _shape(model, g)
        friction = float(model.geom_friction[g, 0])
        if g == table:
            pose = RigidTransform(
                pose.rotation(),
                pose.translation() + np.array([0, 0, effects.table_height_offset_m]),
            )
        if g == cube:
            friction = effects.cube_friction or friction
            if effects.cube_edge_radius_m > 0:
                half = float(model.geom_size[g][0])
                shape = Convex(rounded_box_points(half, effects.cube_edge_radius_m), "cube")
        properties = ProximityProperties()
        AddContactMaterial(
            dissipation=CONTACT_DISSIPATION,
            point_stiffness=CONTACT_STIFFNESS,
            friction=CoulombFriction(friction, friction),
            properties=properties,
        )
        body = bodies[int(model.geom_bodyid[g])]
        ids[g] = plant.RegisterCollisionGeometry(body, pose, shape, name, properties)
    declaration = CollisionFilterDeclaration()
    excluded = set(model.exclude_signature.tolist())
    for i, g in enumerate(colliding):
        for h in colliding[i + 1 :]:
            if not geoms_collide(model, g, h, excluded):
                declaration.ExcludeBetween(GeometrySet(ids[g]), GeometrySet(ids[h]))
    scene_graph.collision_filter_manager().Apply(declaration)


def _add_actuators(plant, model, joint_of_mj, effort_scale: dict[str, float]):
    actuators, gains, limits, instances = {}, {}, {}, []
    for a in range(model.nu):
        if model.actuator_trntype[a] != mujoco.mjtTrn.mjTRN_JOINT:
            raise ValueError("the Drake stand-in drives joints only (actuator transmission).")
        j = int(model.actuator_trnid[a, 0])
        joint = joint_of_mj[j]
        name = _name(model, mujoco.mjtObj.mjOBJ_JOINT, j, "joint")
        kp = float(model.actuator_gainprm[a, 0])
        if kp <= 0 or not math.isclose(-float(model.actuator_biasprm[a, 1]), kp, rel_tol=1e-9):
            raise ValueError(
                f"actuator of {name!r} is not a position servo (kp {kp}); the Drake stand-in "
                "drives the arm as a ros2_control forward position controller does."
            )
        gear = float(model.actuator_gear[a, 0])
        kv = -float(model.actuator_biasprm[a, 2])
        effort = math.inf
        if model.actuator_forcelimited[a]:
            effort = gear * float(np.max(np.abs(model.actuator_forcerange[a])))
        elif model.jnt_actfrclimited[j]:
            effort = float(np.max(np.abs(model.jnt_actfrcrange[j])))
        effort *= effort_scale.get(name, 1.0)
        actuator = plant.AddJointActuator(f"{name}_servo", joint, effort)
        gains[name] = (gear * gear * kp, gear * gear * kv)
        actuator.set_controller_gains(PdControllerGains(p=gains[name][0], d=gains[name][1]))
        armature = float(model.dof_armature[model.jnt_dofadr[j]])
        if armature > 0:
            actuator.set_default_rotor_inertia(armature)
            actuator.set_default_gear_ratio(1.0)
        actuators[name], limits[name] = actuator, effort
        if joint.model_instance() not in instances:
            instances.append(joint.model_instance())
    return actuators, gains, limits, instances


def _add_couplings(plant, model, joint_of_mj) -> None:
    """A joint equality (a gripper's mirrored finger) as Drake's coupler constraint."""
    for e in range(model.neq):
        if model.eq_type[e] != mujoco.mjtEq.mjEQ_JOINT or model.eq_obj2id[e] < 0:
            continue
        follower, leader = int(model.eq_obj1id[e]), int(model.eq_obj2id[e])
        if follower not in joint_of_mj or leader not in joint_of_mj:
            continue
        data = model.eq_data[e]
        if np.any(np.abs(data[2:5]) > 0):
            raise ValueError("a nonlinear joint coupling has no Drake counterpart here.")
        # MuJoCo: qf - qf0 = c0 + c1 (ql - ql0); Drake's coordinates start at qpos0 too.
        plant.AddCouplerConstraint(
            joint_of_mj[follower], joint_of_mj[leader], float(data[1]), float(data[0])
        )

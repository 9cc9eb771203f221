"""CDR bytes of the messages the graph publishes, built without ROS for writing into bags.

Serialized with the bag typestore (``project_typestore``), so the bytes are what rclpy
publishes for the same message and what the recorder writes. Used where episodes are made
without a running graph: sim rollouts (``learner.sim_episodes``) and synthetic episodes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from simreal_ros.episodes.typestore import project_typestore


def header(t_ns: int, frame_id: str = "base"):
    """A std_msgs/Header stamped ``t_ns`` (nanoseconds)."""
    types = project_typestore().types
    stamp = types["builtin_interfaces/msg/Time"](sec=t_ns // 10**9, nanosec=t_ns % 10**9)
    return types["std_msgs/msg/Header"](stamp=stamp, frame_id=frame_id)


def joint_state(
    t_ns: int, names: Sequence[str], position, velocity, effort=(), frame_id: str = "base"
):
    """sensor_msgs/JointState (SI units, radians)."""
    store = project_typestore()
    msg = store.types["sensor_msgs/msg/JointState"](
        header=header(t_ns, frame_id),
        name=list(names),
        position=np.asarray(position, float),
        velocity=np.asarray(velocity, float),
        effort=np.asarray(effort, float),
    )
    return store.serialize_cdr(msg, "sensor_msgs/msg/JointState")


def float64_multi_array(values):
    """std_msgs/Float64MultiArray with no layout: a ros2_control forward command."""
    store = project_typestore()
    types = store.types
    layout = types["std_msgs/msg/MultiArrayLayout"](dim=[], data_offset=0)
    msg = types["std_msgs/msg/Float64MultiArray"](
        layout=layout, data=np.asarray(values, dtype=np.float64)
    )
    return store.serialize_cdr(msg, "std_msgs/msg/Float64MultiArray")


def pose_stamped(t_ns: int, position, orientation_wxyz=(1.0, 0.0, 0.0, 0.0)):
    """geometry_msgs/PoseStamped; the orientation is given w first, as the sim observes it."""
    store = project_typestore()
    P = store.types["geometry_msgs/msg/Point"]
    Q = store.types["geometry_msgs/msg/Quaternion"]
    x, y, z = (float(v) for v in position)
    qw, qx, qy, qz = (float(v) for v in orientation_wxyz)
    msg = store.types["geometry_msgs/msg/PoseStamped"](
        header=header(t_ns),
        pose=store.types["geometry_msgs/msg/Pose"](
            position=P(x=x, y=y, z=z), orientation=Q(x=qx, y=qy, z=qz, w=qw)
        ),
    )
    return store.serialize_cdr(msg, "geometry_msgs/msg/PoseStamped")


def policy_action(
    t_ns: int,
    values,
    *,
    version: str,
    sequence: int = 0,
    joint_names: Sequence[str] = (),
    human: bool = False,
):
    """simreal_ros/PolicyAction (a takeover is one with ``human=True``)."""
    store = project_typestore()
    msg = store.types["simreal_ros/msg/PolicyAction"](
        header=header(t_ns),
        policy_version=version,
        sequence=int(sequence),
        joint_names=list(joint_names),
        values=np.asarray(values, float),
        human_intervention=bool(human),
    )
    return store.serialize_cdr(msg, "simreal_ros/msg/PolicyAction")


def task_status(
    t_ns: int,
    *,
    episode_id: str,
    task: str,
    condition: str,
    seed: int,
    step: int,
    goal,
    reward: float,
    success: bool,
    done: bool,
    truncated: bool = False,
):
    """simreal_ros/TaskStatus."""
    store = project_typestore()
    gx, gy, gz = (float(v) for v in goal)
    msg = store.types["simreal_ros/msg/TaskStatus"](
        header=header(t_ns),
        episode_id=episode_id,
        task=task,
        condition=condition,
        seed=int(seed),
        step=int(step),
        goal=store.types["geometry_msgs/msg/Point"](x=gx, y=gy, z=gz),
        reward=float(reward),
        success=bool(success),
        done=bool(done),
        truncated=bool(truncated),
    )
    return store.serialize_cdr(msg, "simreal_ros/msg/TaskStatus")


def safety_status(
    t_ns: int,
    *,
    state: int,
    interventions: Sequence[Mapping] = (),
    limited_joints: Sequence[str] = (),
    policy_version: str = "",
    watchdog_tripped: bool = False,
    estop_latched: bool = False,
    engaged: bool = True,
    command_age: float = 0.0,
    state_age: float = 0.0,
    interventions_total: int = 0,
):
    """simreal_ros/SafetyStatus; each intervention maps SafetyIntervention's field names."""
    store = project_typestore()
    intervention = store.types["simreal_ros/msg/SafetyIntervention"]
    msg = store.types["simreal_ros/msg/SafetyStatus"](
        header=header(t_ns),
        state=int(state),
        interventions=[intervention(**fields) for fields in interventions],
        limited_joints=list(limited_joints),
        watchdog_tripped=bool(watchdog_tripped),
        estop_latched=bool(estop_latched),
        engaged=bool(engaged),
        policy_version=policy_version,
        command_age=float(command_age),
        state_age=float(state_age),
        interventions_total=int(interventions_total),
    )
    return store.serialize_cdr(msg, "simreal_ros/msg/SafetyStatus")


def image(t_ns: int, pixels, encoding: str = "rgb8", frame_id: str = "camera"):
    """sensor_msgs/Image of an (H, W, C) uint8 array, rows packed (step = W * C)."""
    store = project_typestore()
    pixels = np.ascontiguousarray(pixels, np.uint8)
    height, width = pixels.shape[:2]
    msg = store.types["sensor_msgs/msg/Image"](
        header=header(t_ns, frame_id),
        height=height,
        width=width,
        encoding=encoding,
        is_bigendian=0,
        step=pixels[0].size,
        data=pixels.reshape(-1),
    )
    return store.serialize_cdr(msg, "sensor_msgs/msg/Image")


def camera_info(t_ns: int, width: int, height: int, fx: float, fy: float, cx: float, cy: float,
                frame_id: str = "camera"):  # fmt: skip
    """sensor_msgs/CameraInfo of an undistorted pinhole camera (plumb_bob, zero distortion)."""
    store = project_typestore()
    msg = store.types["sensor_msgs/msg/CameraInfo"](
        header=header(t_ns, frame_id),
        height=int(height),
        width=int(width),
        distortion_model="plumb_bob",
        d=np.zeros(5),
        k=np.array([fx, 0.0, cx, 0.0, fy, cy, 0.0, 0.0, 1.0]),
        r=np.eye(3).reshape(-1),
        p=np.array([fx, 0.0, cx, 0.0, 0.0, fy, cy, 0.0, 0.0, 0.0, 1.0, 0.0]),
        binning_x=0,
        binning_y=0,
        roi=store.types["sensor_msgs/msg/RegionOfInterest"](
            x_offset=0, y_offset=0, height=0, width=0, do_rectify=False
        ),
    )
    return store.serialize_cdr(msg, "sensor_msgs/msg/CameraInfo")

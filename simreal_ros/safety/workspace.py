"""End-effector workspace check by forward kinematics of the robot's MuJoCo model.

The checker owns its ``ToolKinematics`` (the project's one kinematics, with a private
``MjData``): nothing else steps or reads it, so it never races the simulation and needs
no lock. Only ``mj_kinematics`` runs (no collision, no dynamics).

Whole paths (a step and the braking that may follow it) are checked soundly and cheaply
with a Lipschitz bound: moving joint j by dq_j moves the tool centre point by at most
r_j |dq_j|, where r_j is the length of the kinematic chain from joint j's axis to the tool
(a constant of the model). A point whose clearance to every box face is d therefore proves
every configuration within weighted distance sum_j r_j |q_j - q0_j| < d of it safe; only
the parts of a path that no such ball covers need more forward kinematics.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def _box_text(lower: Sequence[float], upper: Sequence[float]) -> str:
    return "[" + ", ".join(f"{lo:g}..{hi:g}" for lo, hi in zip(lower, upper, strict=True)) + "]"


class Workspace:
    """Tool centre point inside a box and outside keep-out boxes (base frame, metres)."""

    def __init__(
        self,
        kinematics,
        lower: Sequence[float],
        upper: Sequence[float],
        keep_out: Sequence[Sequence[float]] = (),
    ) -> None:
        """``kinematics``: the arm's ``robot.kinematics.ToolKinematics`` (its controller
        joints, base at the world origin); the checker keeps it, and its data, to itself."""
        import mujoco  # imported here: limits-only users need not load MuJoCo

        self._mujoco = mujoco
        self.kinematics = kinematics
        self.model, self.data = kinematics.model, kinematics.data
        joint_names = kinematics.joint_names
        site_id = kinematics.site_id
        self.site = self.model.site(site_id).name
        self._site_xpos = self.data.site_xpos[site_id]  # a view, refreshed by mj_kinematics
        self.lower = tuple(float(x) for x in lower)
        self.upper = tuple(float(x) for x in upper)
        if len(self.lower) != 3 or len(self.upper) != 3:
            raise ValueError("workspace box corners need x, y and z each.")
        for axis, lo, hi in zip("xyz", self.lower, self.upper, strict=True):
            if not lo < hi:
                raise ValueError(
                    f"workspace box: {axis} lower {lo:g} is not below {axis} upper {hi:g}; "
                    "swap them."
                )
        boxes = []
        for index, box in enumerate(keep_out):
            box = tuple(float(x) for x in box)
            if len(box) != 6:
                raise ValueError(f"keep-out box {index} needs 6 numbers, got {len(box)}.")
            for axis in range(3):
                if not box[axis] < box[axis + 3]:
                    raise ValueError(
                        f"keep-out box {index}: {'xyz'[axis]} min {box[axis]:g} is not below "
                        f"{'xyz'[axis]} max {box[axis + 3]:g}."
                    )
            boxes.append(box)
        self.keep_out = tuple(boxes)
        self.lever_arms = self._lever_arms(joint_names, site_id)
        self._r = self.lever_arms
        self._moving = tuple(i for i, r in enumerate(self._r) if r > 0.0)
        # A ball in joint space known to be inside: centre and clearance (metres). It stays
        # true forever (geometry only), so it is shared by every path check.
        self._ball_centre = [0.0] * len(self._r)
        self._ball_radius = -1.0
        self._start: tuple[list, tuple[float, str]] = ([], (0.0, ""))  # newest path start
        self.fk_calls = 0  # forward kinematics run by path checks (for the benchmark)

    def _lever_arms(self, joint_names: Sequence[str], site_id: int) -> tuple:
        """Per controlled joint: an upper bound on |d(tool position)/dq_j| over all poses.

        For a hinge, the tool moves at most (distance from its anchor to the tool) per
        radian, and that distance is at most the sum of the fixed distances between
        successive joint anchors of the chain down to the tool's site. A slide moves it by
        at most 1 m/m and, for hinges above it, lengthens the chain by its travel.
        """
        mujoco, model, data = self._mujoco, self.model, self.data
        mujoco.mj_kinematics(model, data)  # at qpos0: anchor distances are pose-independent
        chain = []  # joints between the world and the site's body, root first
        body = int(model.site_bodyid[site_id])
        while body > 0:
            first, count = int(model.body_jntadr[body]), int(model.body_jntnum[body])
            chain[:0] = range(first, first + count)
            body = int(model.body_parentid[body])
        reach = {}
        point = np.array(data.site_xpos[site_id])
        length = 0.0  # chain length from the current anchor to the tool
        for joint in reversed(chain):
            kind = int(model.jnt_type[joint])
            anchor = np.array(data.xanchor[joint])
            length += float(np.linalg.norm(point - anchor))
            point = anchor
            if kind == mujoco.mjtJoint.mjJNT_HINGE:
                reach[joint] = length
            elif kind == mujoco.mjtJoint.mjJNT_SLIDE:
                reach[joint] = 1.0
                if not model.jnt_limited[joint]:
                    raise ValueError(
                        f"workspace check: slide joint {model.joint(joint).name!r} above the "
                        "tool site has no range in the model; limit it so the check can bound it."
                    )
                low, high = model.jnt_range[joint]
                q0 = model.qpos0[model.jnt_qposadr[joint]]
                length += float(max(abs(high - q0), abs(low - q0)))
            else:
                raise ValueError(
                    f"workspace check: joint {model.joint(joint).name!r} above the tool site "
                    "in the model is a ball or free joint; only hinge and slide joints are "
                    "supported."
                )
        arms = []
        for name in joint_names:
            joint = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)
            arms.append(reach.get(joint, 0.0))  # joints off the chain never move the tool
        return tuple(arms)

    def ee_position(self, q: np.ndarray) -> np.ndarray:
        """Tool centre point for joint positions ``q`` (a view; copy it to keep it)."""
        return self.kinematics.position(q)

    def violation(self, q: np.ndarray) -> tuple[str, float]:
        """("", 0) inside; else ("workspace", distance outside) or ("keep_out", depth)."""
        x, y, z = self.ee_position(q).tolist()
        lo, hi = self.lower, self.upper
        if not (lo[0] <= x <= hi[0] and lo[1] <= y <= hi[1] and lo[2] <= z <= hi[2]):
            dx = max(lo[0] - x, x - hi[0], 0.0)
            dy = max(lo[1] - y, y - hi[1], 0.0)
            dz = max(lo[2] - z, z - hi[2], 0.0)
            return "workspace", (dx * dx + dy * dy + dz * dz) ** 0.5
        for box in self.keep_out:
            if box[0] < x < box[3] and box[1] < y < box[4] and box[2] < z < box[5]:
                depth = min(x - box[0], box[3] - x, y - box[1], box[4] - y, z - box[2], box[5] - z)
                return "keep_out", depth
        return "", 0.0

    def slide_step(self, q: Sequence[float], step: Sequence[float], margin: float) -> list:
        """The joint step nearest ``step`` whose tool motion, to first order, stays
        ``margin`` inside every face of the box it would otherwise cross.

        It removes only the part of the motion that heads out of the box, so a tool pushed
        against a face (the table) slides along it instead of stopping. Keep-out boxes get
        no sliding: the arm stops at them rather than being steered around them by joints
        the policy did not move. It is a proposal: the caller proves its path like any
        other step.
        """
        jacobian = self.kinematics.jacobian(q)[0]  # tool metres per joint unit, 3 x n
        point = np.array(self._site_xpos)
        lo, hi = self.lower, self.upper
        step = np.array(step, dtype=float)
        for _ in range(3):  # a few passes settle a corner where two faces act
            moved = False
            end = point + jacobian @ step
            rows = []  # (inward sign, axis, least inward tool motion along that axis)
            for axis in range(3):
                if end[axis] < lo[axis] + margin:
                    rows.append((1.0, axis, lo[axis] + margin - point[axis]))
                elif end[axis] > hi[axis] - margin:
                    rows.append((-1.0, axis, point[axis] - (hi[axis] - margin)))
            for sign, axis, need in rows:
                gradient = sign * jacobian[axis]
                motion = float(gradient @ step)
                if motion < need:
                    norm = float(gradient @ gradient)
                    if norm > 1e-12:
                        step += ((need - motion) / norm) * gradient
                        moved = True
            if not moved:
                break
        return step.tolist()

    def clearance(self, q) -> tuple[float, str]:
        """Signed distance of the tool from the nearest limit, and that limit's name.

        Positive inside the allowed region (distance to the nearest workspace face or
        keep-out box); negative outside it (minus the depth, as ``violation`` reports).
        """
        self.fk_calls += 1
        x, y, z = self.kinematics.position(q).tolist()
        lo, hi = self.lower, self.upper
        if not (lo[0] <= x <= hi[0] and lo[1] <= y <= hi[1] and lo[2] <= z <= hi[2]):
            dx = max(lo[0] - x, x - hi[0], 0.0)
            dy = max(lo[1] - y, y - hi[1], 0.0)
            dz = max(lo[2] - z, z - hi[2], 0.0)
            return -math.sqrt(dx * dx + dy * dy + dz * dz), "workspace"
        best = min(x - lo[0], hi[0] - x, y - lo[1], hi[1] - y, z - lo[2], hi[2] - z)
        limit = "workspace"
        for box in self.keep_out:
            dx = max(box[0] - x, x - box[3])
            dy = max(box[1] - y, y - box[4])
            dz = max(box[2] - z, z - box[5])
            if dx < 0.0 and dy < 0.0 and dz < 0.0:
                return max(dx, dy, dz), "keep_out"  # inside: minus the depth
            outside = math.sqrt(max(dx, 0.0) ** 2 + max(dy, 0.0) ** 2 + max(dz, 0.0) ** 2)
            if outside < best:
                best, limit = outside, "keep_out"
        return best, limit

    def braking_path_violation(
        self,
        q: list[float],
        end: list[float],
        velocity: list[float],
        decel_step: Sequence[float],
        inv_two_decel: Sequence[float],
        dt: float,
        tolerance: float = 0.0,
        max_depth: int = 4,
    ) -> tuple[str, float]:
        """Whether the commanded path from ``q`` through the step ``end`` and on, braking
        every joint at its deceleration to rest, is proved inside: ("", 0.0) if so, else
        (limit, metres) for the first point found outside (or inside a keep-out), or for
        the most a segment that could not be proved inside may cross.

        Every point the path passes at a tick (each a future output while braking) must be
        inside; between them, where the straight joint-space segment bends the tool path,
        it may be proved only to within ``tolerance`` metres outside. That slack is what
        lets the tool slide along a face it touches instead of sticking to it.

        The braking profile is the filter's own (each tick every joint's speed falls by
        ``decel_step`` toward zero), so a proved path stays proved while the filter
        brakes along it. Per joint the path is monotone, so it lies in the joint-space box
        between ``q`` and the continuous stop point ``end + v|v| inv_two_decel``: one
        bound of that box against a known-safe ball usually proves everything.
        """
        r = self._r
        centre, radius = self._ball_centre, self._ball_radius
        reach = 0.0
        for j in self._moving:
            c = centre[j]
            v = velocity[j]
            stop = end[j] + v * abs(v) * inv_two_decel[j]
            near, far = abs(q[j] - c), abs(stop - c)
            reach += r[j] * (near if near > far else far)
        if reach < radius:
            return "", 0.0
        return self._walk(q, end, velocity, decel_step, dt, max_depth, inv_two_decel, tolerance)

    def _distance(self, a: Sequence[float], b: Sequence[float]) -> float:
        r = self._r
        return sum(r[j] * abs(a[j] - b[j]) for j in self._moving)

    def _remember(self, point: Sequence[float], clearance: float) -> None:
        if clearance > 0.0:
            self._ball_centre = list(point)
            self._ball_radius = clearance

    def _rest_reach(self, point, velocity, inv_two_decel) -> float:
        """Weighted size of the box from ``point`` to where braking from ``velocity`` ends."""
        r = self._r
        return sum(r[j] * velocity[j] * velocity[j] * inv_two_decel[j] for j in self._moving)

    def _walk(self, q, end, velocity, decel_step, dt, max_depth, inv_two_decel, tolerance):
        """Check the path segment by segment: q -> end -> braking samples -> rest.

        Forward kinematics runs only where the balls of earlier points leave a segment
        uncovered; after each, the rest of the path is tried in one box bound. Stops at
        the first point or segment that is not proved inside.
        """
        point = list(q)
        bound = self._ball_radius - self._distance(self._ball_centre, point)
        limit, exact = "workspace", False
        if bound <= 0.0:
            if point == self._start[0]:  # the scaled-back trials of one tick share it
                bound, limit = self._start[1]
            else:
                bound, limit = self.clearance(point)
                self._start = (point, (bound, limit))
            self._remember(point, bound)
            if bound < 0.0:
                return limit, -bound
            if self._distance(point, end) + self._rest_reach(end, velocity, inv_two_decel) < bound:
                return "", 0.0
            exact = True
        v = list(velocity)
        nxt = list(end)
        first = True
        for _ in range(100_000):  # braking ends in |v| / decel_step ticks; a safety cap
            length = self._distance(point, nxt)
            if bound - length > 0.0:
                bound -= length
                exact = False
            else:
                if not exact:  # a loose bound at this end: measure it first
                    bound, limit = self.clearance(point)
                    if bound < 0.0:
                        return limit, -bound
                clearance, next_limit = self.clearance(nxt)
                if first:
                    self._remember(nxt, clearance)
                if clearance < 0.0:
                    return next_limit, -clearance
                excess, where = self._segment(
                    point, bound, limit, nxt, clearance, next_limit, length, max_depth, tolerance
                )
                if excess > 0.0:
                    return where, excess
                bound, limit, exact = clearance, next_limit, True
                if self._rest_reach(nxt, v, inv_two_decel) < bound:
                    break  # the rest of the braking path lies in this point's ball
            first = False
            point = nxt
            moving = False
            nxt = list(point)
            for j, vj in enumerate(v):
                if vj > 0.0:
                    vj = max(vj - decel_step[j], 0.0)
                elif vj < 0.0:
                    vj = min(vj + decel_step[j], 0.0)
                else:
                    continue
                v[j] = vj
                if vj != 0.0:
                    moving = True
                    nxt[j] = point[j] + vj * dt
            if not moving:
                break
        return "", 0.0

    def _segment(self, a, ca, la, b, cb, lb, length, depth, tolerance) -> tuple[float, str]:
        """0 when the straight segment a-b is proved to stay within ``tolerance`` of the
        allowed region from the clearances at its ends (bisecting where their balls do not
        reach far enough), else how far it may go outside."""
        if length <= 0.0 or ca + cb - length > 0.0:
            return 0.0, ""
        # Clearance at a fraction t along is >= max(ca - t L, cb - (1 - t) L).
        if ca - length >= cb:
            low, limit = ca - length, la
        elif cb - length >= ca:
            low, limit = cb - length, lb
        else:
            low, limit = 0.5 * (ca + cb - length), la if ca < cb else lb
        if low >= -tolerance:
            return 0.0, ""
        if depth <= 0:
            return -low, limit
        mid = [0.5 * (x + y) for x, y in zip(a, b, strict=True)]
        cm, lm = self.clearance(mid)
        if cm < -tolerance:
            return -cm, lm
        excess, where = self._segment(a, ca, la, mid, cm, lm, 0.5 * length, depth - 1, tolerance)
        if excess > 0.0:
            return excess, where
        return self._segment(mid, cm, lm, b, cb, lb, 0.5 * length, depth - 1, tolerance)

    def require_inside(self, q: np.ndarray, pose_name: str) -> None:
        """Refuse a configuration whose box or keep-outs exclude a pose (e.g. home)."""
        limit, excess = self.violation(q)
        if not limit:
            return
        point = ", ".join(f"{v:.3f}" for v in self._site_xpos)
        if limit == "workspace":
            raise ValueError(
                f"the workspace box {_box_text(self.lower, self.upper)} excludes the {pose_name} "
                f"pose: its tool centre point ({point}) is {excess:.3f} m outside; widen "
                "workspace_lower/workspace_upper."
            )
        raise ValueError(
            f"a keep-out box contains the {pose_name} pose's tool centre point ({point}), "
            f"{excess:.3f} m deep; move or shrink keep_out_boxes."
        )

"""MuJoCo arm simulation core: physics, tasks, profiles, environments, scripted experts.

MuJoCo reads MUJOCO_GL when it is first imported; default it to headless EGL here (before
any submodule imports mujoco) so offscreen cameras work without a display. Set MUJOCO_GL
yourself (e.g. osmesa, glfw) to choose another backend.
"""

import os

os.environ.setdefault("MUJOCO_GL", "egl")

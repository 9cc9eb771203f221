"""simreal_ros: on-robot fine-tuning of arm policies in one ROS 2 graph.

The generated interfaces (``simreal_ros.msg``, ``simreal_ros.srv``) are installed by cmake
into the environment's site-packages; extending ``__path__`` lets a source checkout see them.
"""

import os
import pkgutil

# MuJoCo picks its GL backend at first import; headless EGL unless the user chose one.
os.environ.setdefault("MUJOCO_GL", "egl")

__path__ = pkgutil.extend_path(__path__, __name__)
__version__ = "0.1.0"

"""simreal_ros: on-robot fine-tuning of arm policies in one ROS 2 graph.

The generated interfaces (``simreal_ros.msg``, ``simreal_ros.srv``) are installed by cmake
into the environment's site-packages; extending ``__path__`` lets a source checkout see them.

The development venv (``make setup``) holds the interfaces only, in a ``simreal_ros``
package of the same name, which a script run outside the checkout finds first. cmake
installs this file there too, with a ``.pth`` file that puts the checkout's root on
``sys.path``, so the same ``__path__`` extension finds the checkout's code from any
directory (CMakeLists.txt, ``SIMREAL_INSTALL_PYTHON=OFF``).
"""

import os
import pkgutil

# MuJoCo picks its GL backend at first import; headless EGL unless the user chose one.
os.environ.setdefault("MUJOCO_GL", "egl")


def _one_source(path: list[str]) -> list[str]:
    """``path`` with the Python code from one place only: the first folder that holds it
    (this file's own, when it has the code), and every folder with only generated
    interfaces. Another checkout or install found on ``sys.path`` is left out, so no module
    is taken from a second copy of the code."""
    kept, code_seen = [], False
    for folder in path:
        has_code = os.path.isfile(os.path.join(folder, "resources.py"))
        if has_code and code_seen:
            continue
        code_seen = code_seen or has_code
        kept.append(folder)
    return kept


__path__ = _one_source(pkgutil.extend_path(__path__, __name__))
__version__ = "0.1.0"

"""Where the package's data lives: the install's share/simreal_ros, or the source checkout.

The nodes read files that are not Python: the shipped checkpoints (``checkpoints/``), the
parameter YAML and dynamics profiles (``config/``), the message definitions (``msg/``) and
the launch files (``launch/``). A source checkout keeps them at its root; colcon (and a
ROS 2 install) puts them in ``<prefix>/share/simreal_ros/``. Both hold the same layout, so
everything asks :func:`data_root` and appends its own sub-path.

Which one applies is decided by where this module was imported from, never by what else is
on ``AMENT_PREFIX_PATH``: the dev venv has a ``share/simreal_ros`` too (cmake installs the
generated interfaces there, without config or checkpoints), and a checkout must not pick
that up.

- **installed**: this file is ``<prefix>/lib/pythonX.Y/site-packages/simreal_ros/`` (or
  ``dist-packages``) and ``<prefix>/share/simreal_ros/package.xml`` exists;
- **checkout**: the folder above the package holds ``package.xml`` and ``CMakeLists.txt``;
- otherwise (the package copied somewhere else): the first ``share/simreal_ros`` with a
  ``package.xml`` that the ament index (or ``AMENT_PREFIX_PATH``) knows.

Plain Python: no rclpy.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

PACKAGE = "simreal_ros"
# Not resolved: an install made with symlinks (colcon --symlink-install) counts as installed.
_PACKAGE_DIR = Path(os.path.abspath(__file__)).parent
_SITE_DIRS = ("site-packages", "dist-packages")


def install_share(package_dir: Path = _PACKAGE_DIR) -> Path | None:
    """``<prefix>/share/simreal_ros`` when ``package_dir`` was installed into ``<prefix>``."""
    site = package_dir.parent
    if site.name not in _SITE_DIRS:
        return None
    # <prefix>/lib/pythonX.Y/site-packages, <prefix>/lib/python3/dist-packages, lib64 alike.
    if len(site.parents) < 3:
        return None
    share = site.parents[2] / "share" / PACKAGE
    return share if (share / "package.xml").is_file() else None


def checkout_root(package_dir: Path = _PACKAGE_DIR) -> Path | None:
    """The source checkout's root when ``package_dir`` is a checkout's package folder."""
    if install_share(package_dir) is not None:
        return None
    root = package_dir.parent
    if (root / "package.xml").is_file() and (root / "CMakeLists.txt").is_file():
        return root
    return None


def _indexed_share() -> Path | None:
    try:
        from ament_index_python.packages import get_package_share_directory
    except ImportError:
        prefixes = [p for p in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep) if p]
        candidates = [Path(prefix) / "share" / PACKAGE for prefix in prefixes]
    else:
        try:
            candidates = [Path(get_package_share_directory(PACKAGE))]
        except (LookupError, OSError, ValueError):  # not indexed, or no AMENT_PREFIX_PATH
            candidates = []
    return next((c for c in candidates if (c / "package.xml").is_file()), None)


@functools.cache
def data_root() -> Path:
    """The directory holding ``checkpoints/``, ``config/``, ``msg/`` and ``launch/``."""
    found = install_share() or checkout_root() or _indexed_share()
    if found is None:
        raise FileNotFoundError(
            f"simreal_ros data not found: {_PACKAGE_DIR} is neither in an install prefix with "
            f"share/{PACKAGE}/package.xml nor in a source checkout. Run from the checkout, "
            "or build with colcon and source install/setup.bash."
        )
    return found


def data_path(*parts: str) -> Path:
    """``data_root() / parts``, e.g. ``data_path("config", "profiles")``."""
    return data_root().joinpath(*parts)


def is_installed() -> bool:
    return install_share() is not None

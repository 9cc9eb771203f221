"""Does the pinned runtime set install on another Python (default 3.12, Jazzy's on Ubuntu
24.04)? Resolves every pin of requirements.txt that a ROS 2 machine installs with pip (the
README's `grep -v` line: ROS, colcon and catkin come from apt there) as binary wheels for
that Python on Linux x86_64 (glibc 2.39, Ubuntu 24.04's), without installing anything.

    .venv/bin/python tools/check_pins.py                  # 3.12, resolve only (metadata)
    .venv/bin/python tools/check_pins.py --download       # pip download the wheels too
    .venv/bin/python tools/check_pins.py --python-version 3.10   # Humble's: expected to fail

Needs the package registry. Exit 0 when every pin has a wheel for that Python, else 1 with
the pins that have none.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# What a ROS 2 machine takes from apt instead of pip (the README's install line drops them).
FROM_APT = re.compile(r"^(ros-jazzy|ros-kilted|colcon|catkin)")
# Every manylinux tag Ubuntu 24.04's glibc (2.39) installs, newest first: a wheel built for
# glibc 2.34 (drake's) installs there as well as one for 2.17.
GLIBC_MINOR = 39
PLATFORMS = [
    *(f"manylinux_2_{minor}_x86_64" for minor in range(GLIBC_MINOR, 16, -1)),
    "manylinux2014_x86_64",
    "linux_x86_64",
]


def runtime_pins(requirements: Path) -> list[str]:
    pins = []
    for line in requirements.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not FROM_APT.match(line):
            pins.append(line)
    return pins


def resolve(pin: str, python_version: str, work: Path, download: bool) -> str:
    """'' when ``pin`` has a wheel for ``python_version``, else pip's last error line."""
    target = ["-d", str(work)] if download else ["--dry-run", "--target", str(work)]
    command = [
        sys.executable, "-m", "pip", "download" if download else "install", "--no-deps",
        "--only-binary=:all:", "--python-version", python_version, "--implementation", "cp",
        *(arg for platform in PLATFORMS for arg in ("--platform", platform)),
        "--quiet", *target, pin,
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode == 0:
        return ""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    return lines[-1] if lines else f"pip exited {result.returncode}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python-version", default="3.12")
    parser.add_argument("--requirements", default=str(ROOT / "requirements.txt"))
    parser.add_argument("--download", action="store_true", help="pip download the wheels")
    args = parser.parse_args(argv)
    pins = runtime_pins(Path(args.requirements))
    failed = []
    with tempfile.TemporaryDirectory(prefix="check-pins-") as work:
        for pin in pins:
            problem = resolve(pin, args.python_version, Path(work), args.download)
            print(f"{'ok  ' if not problem else 'FAIL'} {pin}{': ' + problem if problem else ''}")
            if problem:
                failed.append(pin)
    print(
        f"Python {args.python_version}: {len(pins) - len(failed)}/{len(pins)} runtime pins "
        f"have a wheel" + (f"; none for {', '.join(failed)}" if failed else "")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

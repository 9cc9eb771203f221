"""Write the sim cube's marker texture, sim/assets/cube_marker.png, from OpenCV's ArUco.

    .venv/bin/python tools/make_marker_texture.py

The scene (sim/scene.xml) maps it onto the cube's top face: DICT_4X4_50 id 0, its black
square 6 of the texture's 8 cells across the 0.05 m face (0.0375 m), a white margin
around it. The picture is what
``simreal_ros.perception.markers.marker_texture`` draws; test/core/test_perception_markers.py
checks the shipped file still equals it, so rerun this after changing either.
"""

from __future__ import annotations

from pathlib import Path

import cv2

from simreal_ros.perception.markers import marker_texture

TEXTURE = (
    Path(__file__).resolve().parents[1] / "simreal_ros" / "sim" / "assets" / "cube_marker.png"
)


def main() -> None:
    if not cv2.imwrite(str(TEXTURE), marker_texture()):
        raise SystemExit(f"could not write {TEXTURE}")
    print(f"wrote {TEXTURE}")


if __name__ == "__main__":
    main()

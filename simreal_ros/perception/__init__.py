"""Perception: the task's object pose from a camera (fiducial markers). No ROS."""

# The sim scene's camera that sees the cube's marker (sim/scene.xml), the size the sim
# bridge renders it at for perception (the marker spans 24-50 px there), and its
# calibration file under config/.
SIM_CAMERA = "workspace"
SIM_CAMERA_SIZE = (960, 720)
SIM_CAMERA_CALIBRATION = "calibration/sim_workspace_camera.yaml"

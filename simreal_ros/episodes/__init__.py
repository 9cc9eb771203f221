"""Episodes: one rosbag2 (MCAP) bag per episode, its metadata, crash recovery, and the
dataset reader that turns bags into training transitions. Plain Python: no rclpy."""

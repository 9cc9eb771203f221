"""The arm policy: conventions (spec), networks, checkpoints, pretraining and evaluation.

Plain Python and torch; the ROS adapter is ``simreal_ros.nodes.policy``.
"""

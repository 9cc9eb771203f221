"""Trials: drive labelled episodes through the running graph (reset, record, wait, label).

Plain Python: the graph is reached through the ``TrialGraph`` protocol, which the
trial_runner node implements over ROS services and topics.
"""

"""Failure diagnosis: three evaluation sets and the failure mode they point to.

Public API (what ``simreal diagnose`` and the fine-tuning loop call):

- ``diagnose(source, task, profile, episodes, seed, workers, bags=None) -> Diagnosis``
  (``run.py``): train and shifted evaluations plus the open-loop replay check, classified;
- ``classify(train, shifted, replay, stats, thresholds) -> Diagnosis(label, evidence,
  summary)`` (``classify.py``); labels: action_convention_mismatch, over_specialization,
  mode_collapse, healthy, inconclusive; ``Thresholds`` holds every number it uses;
- ``replay_check(policy, episodes, profile) -> ReplayResult`` (``replay.py``), with
  ``fit_action_convention`` (per-joint scale/offset and the best joint permutation);
- ``action_statistics(commands, positions, tool_positions, goal, dt) -> ActionStats``
  (``action_stats.py``);
- ``RecordedEpisode``, ``record_demonstrations``, ``episodes_from_bags`` (``episodes.py``);
- scenarios beyond the sim core's tasks, e.g. ``reach_around`` (a pillar between start and
  goal, bimodal demonstrations) (``scenarios.py``);
- policies with induced failures for tests and demos (``induced_failures.py``).

Modules are imported on use (``from simreal_ros.diagnosis.run import diagnose``) so that
importing the package stays cheap.
"""

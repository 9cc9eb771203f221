"""The arm policy: conventions (spec), networks, checkpoints, pretraining and evaluation.

Plain Python and torch; the ROS adapter is ``simreal_ros.nodes.policy``. Public API:

- ``spec.PolicySpec`` / ``spec.SpecConverter``: observation layout and normalisation,
  ``command_from_action`` / ``action_from_command`` (the one conversion everybody uses),
  ``spec.validate_against_robot``; ``spec.default_spec(description, task, rate)``.
- ``model.ActorCritic`` (``.actor`` with LoRA-targetable ``trunk.0``, ``trunk.2``,
  ``mean_head``; ``.critic`` twin Q) and ``ActorCritic.v_sim(obs)`` = min(Q1, Q2) at the
  actor's mean action, no grad.
- ``checkpoint.save_checkpoint`` / ``load_checkpoint(dir, description, control_rate_hz)``,
  ``write_adapter_metadata`` for adapters the learner saves with peft (the learner's
  ``learner.lora.load_actor_with_adapter`` gives a merged torch actor for training).
- ``lora_merge.merged_actor_state(base, adapter_dir)``: a peft LoRA adapter merged into the
  actor in numpy (no torch, no peft), the one merge every deployment runs.
- ``inference.DeployedPolicy`` (numpy, merged weights; ``act(obs_dict) -> targets``).
- ``evaluate.evaluate_policy(source, profile, condition, seeds, workers)`` with
  ``evaluate.PolicySource(checkpoint_dir, adapter_dir=...)`` and the ``build_policy`` hook.
- ``pretrain.Pretrainer`` behind ``simreal pretrain``.
"""

"""The deployable arm policy: conventions (spec), the checkpoint format, numpy inference.

Plain Python and numpy: no torch and no simulator (a test proves it), so the policy node
starts fast; training and evaluation with torch are ``simreal_ros.training``. The ROS
adapter is ``simreal_ros.nodes.policy``. Public API:

- ``spec.PolicySpec`` / ``spec.SpecConverter``: observation layout and normalisation,
  ``command_from_action`` / ``action_from_command`` (the one conversion everybody uses),
  ``spec.validate_against_robot``; ``spec.default_spec(description, task, rate)``.
- ``checkpoint.load_numpy_checkpoint(dir, description, control_rate_hz)``, ``read_metadata``
  / ``update_metadata``, ``shipped_checkpoint``, ``write_adapter_metadata`` for adapters
  the learner saves with peft.
- ``lora_merge.merged_actor_state(base, adapter_dir)``: a peft LoRA adapter merged into the
  actor in numpy (no torch, no peft), the one merge every deployment runs.
- ``inference.DeployedPolicy`` (numpy, merged weights; ``act(obs_dict) -> targets``).
- ``runtime``: the versions the policy node holds (base, adapters, rollback).
"""

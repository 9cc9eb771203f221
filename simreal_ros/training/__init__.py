"""Training and evaluation of the arm policy in sim, with torch: the networks, checkpoints
as torch models, pretraining and off-ROS evaluation. Plain Python (no rclpy).

The deployable policy (conventions, the checkpoint format, numpy inference, the runtime
the node holds) is ``simreal_ros.policy``, which imports neither torch nor the simulator;
this wing builds on it.

Entry points: ``model.ActorCritic`` (``.actor`` with LoRA-targetable ``trunk.0``,
``trunk.2``, ``mean_head``; ``.critic`` twin Q) and ``ActorCritic.v_sim(obs)`` = min(Q1, Q2)
at the actor's mean action, no grad; ``torch_checkpoint.save_checkpoint`` /
``load_checkpoint(dir, description, control_rate_hz)`` and ``as_torch_checkpoint`` (a
numpy-loaded base as a torch model); ``evaluate.evaluate_policy(source, profile,
condition, seeds, workers)`` with ``evaluate.PolicySource(checkpoint_dir, adapter_dir=...)``
and the ``build_policy`` hook; ``pretrain.Pretrainer`` behind ``simreal pretrain``;
``report`` renders a checkpoint's README.md.
"""

"""Online fine-tuning of the policy with LoRA adapters: BC, RL and SGFT, forgetting guards
and a screening gate in sim; versions go to ``simreal_ros.adapters.store.AdapterStore``.
Plain Python (no rclpy).

Entry points: ``session.LearnerSession`` (finetune / screen / commit / run_round),
``session.finetune`` and ``session.screen`` (one-shot), ``online.OnlineLearner`` (the
node's loop).
"""

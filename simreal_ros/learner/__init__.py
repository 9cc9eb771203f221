"""Online fine-tuning of the policy with LoRA adapters: BC, RL and SGFT, forgetting guards,
a screening gate in sim and a versioned adapter store. Plain Python (no rclpy).

Entry points: ``session.LearnerSession`` (finetune / screen / commit / run_round),
``session.finetune`` and ``session.screen`` (one-shot), ``online.OnlineLearner`` (the
node's loop), ``store.AdapterStore``.
"""

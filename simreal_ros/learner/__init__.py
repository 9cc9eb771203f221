"""Online fine-tuning of the policy with LoRA adapters: BC, RL and SGFT, forgetting guards,
a screening gate in sim and a versioned adapter store. Plain Python (no rclpy).

Entry points: ``trainer.LearnerSession`` (finetune / screen / commit / run_round),
``trainer.finetune`` and ``trainer.screen`` (one-shot), ``online.OnlineLearner`` (the
node's loop), ``store.AdapterStore``.
"""

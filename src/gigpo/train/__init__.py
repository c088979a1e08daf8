"""Training: config tree, SFT warm start, checkpoints, guards, the loop (the learner itself is ``gigpo.learner``).

Heavy pieces (the trainer, SFT) import models and envs lazily; importing ``gigpo.train`` is cheap.
"""

from gigpo.train.config import Config, ConfigError, load_config
from gigpo.learner import (
    PolicyUpdater,
    TrainingDiverged,
    actor_loss,
    agg_loss,
    gspo_loss,
    kl_penalty,
    policy_gradient_loss,
    token_budget_microbatches,
)

__all__ = [
    "Config",
    "ConfigError",
    "PolicyUpdater",
    "TrainingDiverged",
    "actor_loss",
    "agg_loss",
    "gspo_loss",
    "kl_penalty",
    "load_config",
    "policy_gradient_loss",
    "token_budget_microbatches",
]

"""Training: config tree, actor loss, policy update, SFT warm start, checkpoints, the loop.

Heavy pieces (the trainer, SFT) import models and envs lazily; importing ``gigpo.train`` is cheap.
"""

from gigpo.train.config import Config, ConfigError, load_config
from gigpo.train.loss import (
    actor_loss,
    agg_loss,
    gspo_loss,
    kl_penalty,
    policy_gradient_loss,
    token_budget_microbatches,
)
from gigpo.train.update import PolicyUpdater, TrainingDiverged

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

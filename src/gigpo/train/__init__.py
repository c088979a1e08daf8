"""Training: the config tree, the loop and its phases, SFT warm start, checkpoints, guards (the
learner itself, losses and updates, is ``gigpo.learner``).

Heavy pieces (the trainer, SFT) import models and envs lazily; importing ``gigpo.train`` is cheap.
"""

from gigpo.train.config import Config, ConfigError, load_config

__all__ = ["Config", "ConfigError", "load_config"]

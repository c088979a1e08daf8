"""The learner: losses, the policy and critic updates, micro-batching, precision, log-probs and
data-parallel coordination. It works on token-id rows and a torch model, and imports nothing from
rollout, agents or environments: the piece to swap or scale on accelerators.
"""

from gigpo.learner.logprobs import pad_rows, response_logprobs, token_logprobs
from gigpo.learner.loss import (
    actor_loss,
    agg_loss,
    gspo_loss,
    kl_penalty,
    policy_gradient_loss,
    token_budget_microbatches,
)
from gigpo.learner.update import PolicyUpdater, TrainingDiverged, batched_logprobs

__all__ = [
    "PolicyUpdater",
    "TrainingDiverged",
    "actor_loss",
    "agg_loss",
    "batched_logprobs",
    "gspo_loss",
    "kl_penalty",
    "pad_rows",
    "policy_gradient_loss",
    "response_logprobs",
    "token_budget_microbatches",
    "token_logprobs",
]

"""A user's own estimator, registered with gigpo.advantages.register (a test fixture, outside src/)."""

import numpy as np

from gigpo.advantages import compute_advantages, register


@register("signed_grpo")
def signed_grpo(*, scores, step_returns, episode_ids, traj_ids, anchors, scale=1.0):
    """GRPO's advantage reduced to its sign, times ``scale``."""
    res = compute_advantages("grpo", scores=scores, episode_ids=episode_ids)
    adv = (scale * np.sign(res.advantages)).astype(np.float32)
    return type(res)(adv, res.episode_advantages, res.step_advantages, res.step_groups)

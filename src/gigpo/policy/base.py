"""The narrow generator interface.

Anything that can turn prompt token ids into sampled response token ids with their sampling
log-probs is a ``Generator``: the in-process Hugging Face sampler (``HFGenerator``), or a backend of
the user's (docs/extending.md, "Add a model backend"), e.g. an inference-server client returning
token ids and log-probs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

import numpy as np


@dataclass
class Generation:
    """One sampled response.

    token_ids: int32 [L]   exact generated ids, EOS included when it was sampled.
    logprobs:  float32 [L] log-prob of each id under the sampling distribution (after
                           temperature / top-p), as the sampler drew it.
    finished:  bool        EOS was sampled (False: stopped at max_new_tokens).
    allowed:   restricted positions [(k, allowed ids)] when sampled under an action constraint
               (``gigpo.policy.constrain``); None otherwise.
    """

    token_ids: np.ndarray
    logprobs: np.ndarray
    finished: bool
    allowed: list | None = None


@dataclass
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 64
    seed: int | None = None


class Generator(Protocol):
    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        """Sample one response per prompt (prompt = token ids, chat template already applied).

        With ``rollout.constrain_actions`` the rollout loop also passes ``constraints=`` (one
        ``ActionConstraint`` or None per prompt, ``gigpo.policy.constrain``); a generator without
        that keyword serves every other setting.
        """
        ...


# What ``Trainer`` and ``evaluate_model`` take to build their generator: (model, tokenizer) -> Generator.
MakeGenerator = Callable[[Any, Any], Generator]

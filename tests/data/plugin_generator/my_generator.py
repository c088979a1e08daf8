"""docs/extending.md's model-backend example; tests/test_policy_backend.py runs it against ``tiny``."""

import numpy as np
import torch

from gigpo.policy import Generation, SamplingParams, default_eos_ids, sample_next


class PlainGenerator:
    """One prompt at a time, a full forward pass per token (no KV cache, no padding)."""

    def __init__(self, model, tokenizer):
        self.model = model
        self.eos_ids = set(default_eos_ids(model, tokenizer))

    @torch.no_grad()
    def generate(self, prompts, params: SamplingParams) -> list[Generation]:
        device = next(self.model.parameters()).device
        rng = torch.Generator(device=device)
        rng.manual_seed(params.seed) if params.seed is not None else rng.seed()
        out = []
        for prompt in prompts:
            ids, logprobs, finished = list(prompt), [], False
            for _ in range(params.max_new_tokens):
                logits = self.model(input_ids=torch.tensor([ids], device=device)).logits[:, -1].float()
                tok, lp = sample_next(logits, params.temperature, params.top_p, rng)
                ids.append(int(tok))
                logprobs.append(float(lp))
                if ids[-1] in self.eos_ids:
                    finished = True
                    break
            response = np.asarray(ids[len(prompt) :], dtype=np.int32)
            out.append(Generation(response, np.asarray(logprobs, dtype=np.float32), finished))
        return out

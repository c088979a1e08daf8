"""Models and generation through Hugging Face ``transformers``.

model, tokenizer = load_policy("tiny")          # or "smollm2-135m", a directory, a cached hub id
gen = HFGenerator(model, tokenizer)
outs = gen.generate([prompt_ids, ...], SamplingParams(temperature=1.0, max_new_tokens=64, seed=0))
"""

from gigpo.learner.logprobs import pad_rows, token_logprobs
from gigpo.policy.base import Generation, Generator, MakeGenerator, SamplingParams
from gigpo.policy.generate import HFGenerator, bare_generate, default_eos_ids, sample_next
from gigpo.policy.load import apply_lora, load_policy

__all__ = [
    "Generation",
    "Generator",
    "HFGenerator",
    "MakeGenerator",
    "SamplingParams",
    "apply_lora",
    "bare_generate",
    "default_eos_ids",
    "load_policy",
    "pad_rows",
    "sample_next",
    "token_logprobs",
]

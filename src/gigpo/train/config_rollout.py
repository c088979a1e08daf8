"""The ``rollout`` sections of gigpo's config (``rollout``, ``rollout.server``, ``rollout.api``):
how the agent's responses are sampled. ``gigpo.train.config`` assembles the tree."""

from __future__ import annotations

from dataclasses import dataclass, field

from gigpo.train.configtree import TOKENS, F, Section
from gigpo.train.configtree import check as _check
from gigpo.train.configtree import choice as _choice

# Names are read from the code that implements them, never copied here.
from gigpo.agent.prompts import PROMPT_FORMS

BACKENDS = ("hf", "server", "api")


@dataclass
class ServerConfig(Section):
    PREFIX = "rollout.server"
    TITLE = "inference servers of rollout.backend=server (docs/serving.md)"

    urls: list = F(
        [],
        "base URLs of OpenAI-compatible /v1/completions servers (vLLM), e.g. "
        "[http://127.0.0.1:8000]; requests go to the least loaded; [] = gigpo starts a local vLLM "
        "server on 127.0.0.1 for the run and stops it at the end (docs/serving.md)",
    )
    model: str = F("", "served model name ('' = the first one the server lists at /v1/models)")
    timeout_s: float = F(300.0, "seconds one completion request may take", gt=0)
    concurrency: int = F(16, "requests in flight per server", ge=1, le=4096)
    max_retries: int = F(
        3, "retries of a request after a connection error or a 5xx answer (with backoff)", ge=0, le=100
    )
    logprob_tolerance: float = F(
        0.02,
        "the start-up probe (and the one after each weight sync) fails when the server's "
        "log-probs differ from the trainer's by more than this",
        gt=0,
    )
    vllm_bin: str = F(
        "",
        "vllm executable for a server gigpo starts ('' = .venv-vllm/bin/vllm, made by `make "
        "setup-vllm`, then vllm on PATH)",
    )
    port: int = F(0, "port of a server gigpo starts (0 = a free one; `gigpo serve`: 8000)", ge=0, le=65535)
    start_timeout_s: float = F(
        900.0,
        "seconds a server gigpo starts (or restarts, rollout.server.max_restarts) may take to answer /health",
        gt=0,
    )
    max_restarts: int = F(
        2,
        "restarts of a server gigpo started (no urls) in one gigpo process, after it died mid-run "
        "(process exited, or /health failing once a request's retries are used up): it restarts on "
        "the weights it held and the interrupted generate call is retried whole, with the same "
        "seeds; 0 = stop with an error instead. Servers given by urls are never restarted",
        ge=0,
        le=100,
    )
    extra_args: list = F([], "more vllm command-line arguments for a server gigpo starts, e.g. [--enforce-eager]")

    def check(self):
        _check(
            all(isinstance(u, str) and u.startswith(("http://", "https://")) for u in self.urls),
            "rollout.server.urls",
            f"must be a list of http(s):// base URLs, e.g. [http://127.0.0.1:8000], got {self.urls!r}",
        )
        _check(
            all(isinstance(a, str) for a in self.extra_args),
            "rollout.server.extra_args",
            f"must be a list of strings, got {self.extra_args!r}",
        )


@dataclass
class APIConfig(Section):
    PREFIX = "rollout.api"
    TITLE = "an OpenAI-compatible API of rollout.backend=api (gigpo eval only)"

    base_url: str = F("https://api.openai.com/v1", "base URL of an OpenAI-compatible API, /v1 included")
    model: str = F("", "model name the API serves, e.g. gpt-4o (needed with rollout.backend=api)")
    endpoint: str = F(
        "chat",
        "chat (POST /chat/completions with the prompt as one user message; the server applies its "
        "chat template) or completions (POST /completions with the prompt text rendered with "
        "model.name_or_path's chat template)",
    )
    key_env: str = F(
        "OPENAI_API_KEY", "environment variable holding the API key, sent as a Bearer token (unset: no key sent)"
    )
    timeout_s: float = F(120.0, "seconds one request may take", gt=0)
    concurrency: int = F(8, "requests in flight", ge=1, le=1024)
    max_retries: int = F(
        3, "retries of a request after a connection error, a 429 or a 5xx answer (with backoff)", ge=0, le=100
    )

    def check(self):
        from gigpo.policy.api import ENDPOINTS

        _check(
            self.base_url.startswith(("http://", "https://")),
            "rollout.api.base_url",
            f"must be an http(s):// URL such as https://api.openai.com/v1, got {self.base_url!r}",
        )
        _choice(self.endpoint, "rollout.api.endpoint", ENDPOINTS)


@dataclass
class RolloutConfig(Section):
    PREFIX = "rollout"
    TITLE = "sampling the agent's responses"

    temperature: float = F(1.0, "sampling temperature during training rollouts", gt=0)
    top_p: float = F(1.0, "nucleus sampling threshold", gt=0, le=1)
    eval_temperature: float = F(0.4, "sampling temperature during evaluation", gt=0)
    max_response_tokens: int = F(512, "max generated tokens per step", ge=1, le=TOKENS)
    max_prompt_tokens: int = F(2048, "max prompt tokens per step (older history is dropped first)", ge=16, le=TOKENS)
    reuse_sampling_logprobs: bool = F(
        False,
        "use the sampler's log-probs as old log-probs (skips a forward "
        "pass per row; exact when top_p = 1, as the sampler and the update "
        "then use the same tempered distribution)",
    )
    constrain_actions: bool = F(
        False,
        "decode the <action> text only from the env's admissible actions "
        "(a trie mask over the action tokens; log-probs everywhere use the same "
        "masks). Off = the reference: free text, invalid actions penalised",
    )
    jump_forward: bool = F(
        False,
        "with rollout.constrain_actions: only the tokenizer's EOS may follow the close tag (as the "
        "SFT demonstrations end), so once one action is left the rest of the response is forced; "
        "the hf sampler writes it without running the model on it (the server backend already "
        "skips forced tokens). Off = any of the model's EOS ids may end an action",
    )
    repeat_task: bool = F(
        False,
        "end each prompt with the task once more, a few tokens before the response "
        "(helps small from-scratch models read it; off = the reference prompt)",
    )
    prompt: str = F(
        "full",
        "prompt form: full (the family's template: task, history, observation, admissible "
        "actions, format instruction; the reference) or observation (the observation alone, "
        "for families whose observation is the whole state, e.g. sokoban; needs "
        "env.history_length=0; small from-scratch models read a bare grid, not one inside "
        "the template)",
        choices=PROMPT_FORMS,
    )
    backend: str = F(
        "hf",
        "who samples the rollouts: hf (Hugging Face model in the trainer's process), server "
        "(an inference engine behind OpenAI-compatible HTTP servers, rollout.server; docs/serving.md) "
        "or api (text-only completions from any OpenAI-compatible API, rollout.api; gigpo eval only, "
        "docs/algorithm.md#prompting-baselines)",
        choices=BACKENDS,
    )
    server: ServerConfig = field(default_factory=ServerConfig)
    api: APIConfig = field(default_factory=APIConfig)

    def check(self):
        _check(
            not (self.backend == "api" and self.constrain_actions),
            "rollout.constrain_actions",
            "is not available with rollout.backend=api (a text-only API cannot apply gigpo's "
            "admissible-action mask); use rollout.backend=hf or server, or rollout.constrain_actions=false",
        )
        _check(
            self.constrain_actions or not self.jump_forward,
            "rollout.jump_forward",
            "skips the tokens forced by the action constraint; set rollout.constrain_actions=true, "
            "or rollout.jump_forward=false",
        )
        _check(
            self.backend != "api" or bool(self.api.model),
            "rollout.api.model",
            "rollout.backend=api needs the model name the API serves, e.g. rollout.api.model=gpt-4o",
        )
        # With top_p < 1 the sampler's log-probs are of the truncated distribution, the update's
        # are not: the PPO ratio would be off from the first step.
        _check(
            not (self.reuse_sampling_logprobs and self.top_p < 1),
            "rollout.reuse_sampling_logprobs",
            "needs rollout.top_p=1 (with nucleus sampling the sampler's log-probs differ from the "
            "update's); set it false or top_p=1",
        )

"""The one typed configuration tree: dataclasses whose field help text is the CLI/docs text.

Load with ``load_config(path, overrides)``: YAML file (optional) + ``key=value`` overrides with
dotted keys (``algorithm.estimator=grpo train.lr=1e-5``). Unknown keys and wrong types raise
``ConfigError`` naming the key and the closest valid one; every section validates itself in
``__post_init__`` so a loaded config never fails late.

Defaults follow the reference's GiGPO scripts (docs/algorithm.md#paper-settings) unless a field says otherwise.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


class ConfigError(ValueError):
    """A configuration value or key is invalid; the message names the key and the fix."""


def F(default: Any, help: str):  # noqa: A002 - 'help' is the natural name here
    """A dataclass field with a one-line description (shown by ``--help`` and in the docs)."""
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda d=default: type(d)(d), metadata={"help": help})
    return field(default=default, metadata={"help": help})


def _check(cond: bool, key: str, msg: str) -> None:
    if not cond:
        raise ConfigError(f"{key}: {msg}")


def _choice(value: str, key: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        close = difflib.get_close_matches(str(value), choices, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"{key}: {value!r} is not one of {list(choices)}.{hint}")


# Names are read from the code that implements them, never copied here.
from gigpo.advantages import NORM_MODES, canonical_name, estimator_options, needs_values, parse_anchor  # noqa: E402
from gigpo.learner.distributed import MODES as DIST_MODES  # noqa: E402
from gigpo.envs.executors import EXECUTORS  # noqa: E402
from gigpo.learner.loss import AGG_MODES, GSPO_AGG_MODE, KL_TYPES, POLICY_LOSSES  # noqa: E402
from gigpo.agent.prompts import PROMPT_FORMS  # noqa: E402


@dataclass
class ModelConfig:
    name_or_path: str = F("tiny", "model alias (tiny, smollm2-135m), HF hub id or local dir")
    dtype: str = F("float32", "parameter dtype: float32, bfloat16 or float16")
    device: str = F("cpu", "torch device: cpu, cuda, cuda:0, ...")
    lora: bool = F(False, "train LoRA adapters instead of all weights (needs peft)")
    cache_dir: str = F("", "where built/converted models are cached ('' = library default)")

    def __post_init__(self):
        _choice(self.dtype, "model.dtype", ("float32", "bfloat16", "float16"))
        _check(bool(self.name_or_path), "model.name_or_path", "must not be empty")


@dataclass
class EnvConfig:
    family: str = F(
        "alfworld",
        "env family: alfworld, webshop, search, or one registered by a plugin "
        "(entry point group gigpo.families, or env.family_module)",
    )
    family_module: str = F(
        "",
        "module (dotted name, .py file or package dir) whose FAMILY_SPEC is registered "
        "before env.family is looked up; a family outside any installed package",
    )
    group_size: int = F(8, "rollouts per task, all reset to the same initial state (verl-agent: env.rollout.n)")
    tasks_per_iter: int = F(16, "distinct tasks per training iteration (verl-agent: data.train_batch_size)")
    max_steps: int = F(50, "max agent steps per episode")
    history_length: int = F(2, "past (observation, action) pairs kept in the prompt")
    train_tasks: int = F(0, "size of the training task pool (0 = the family's whole train split)")
    eval_tasks: int = F(32, "held-out eval-split tasks used by evaluation (0 = whole split)")
    task_seed: int = F(0, "seed for generating/selecting the task pools")
    kwargs: dict = F({}, "family-specific env options passed to make_env")
    task_kwargs: dict = F({}, "family-specific task options passed to make_tasks")
    executor: str = F(
        "inline",
        "how envs run: inline, thread, process (worker processes on this machine) or ray "
        "(one Ray actor per env on a running Ray cluster, else a local Ray; needs gigpo[ray])",
    )
    step_timeout: float = F(
        -1.0,
        "seconds one env step may take before its episode is failed (a hung env "
        "worker or actor is killed and restarted); 0 = no limit; -1 = 60 with executor thread, "
        "process or ray, none inline (an inline env cannot be interrupted)",
    )
    reset_timeout: float = F(
        -1.0,
        "seconds one env reset may take (includes building the env on first use); "
        "0 = no limit; -1 = 300 with executor thread, process or ray, none inline",
    )
    ray_num_cpus: float = F(
        -1.0,
        "CPUs Ray reserves for each env actor (env.executor=ray): a node with C CPUs holds at "
        "most C / ray_num_cpus actors and Ray places the rest on other nodes; 0 = reserve none "
        "(any node, even one started with 0 CPUs); -1 = Ray's actor default (a node with a CPU, "
        "none reserved while it runs)",
    )

    def __post_init__(self):
        from gigpo.envs.spec import families, is_family, load_family_module

        try:
            if self.family_module:
                load_family_module(self.family_module)
            if not is_family(self.family):
                _choice(self.family, "env.family", tuple(families()))
        except ConfigError:
            raise
        except ValueError as e:  # a module or entry point that fails to load; the message names it
            raise ConfigError(str(e) if str(e).startswith("env.") else f"env.family: {e}") from None
        _choice(self.executor, "env.executor", EXECUTORS)
        for k in ("step_timeout", "reset_timeout"):
            v = getattr(self, k)
            _check(v == -1 or v >= 0, f"env.{k}", f"must be >= 0 seconds (0 = no limit) or -1 (default), got {v}")
            _check(
                not (self.executor == "inline" and v > 0),
                f"env.{k}",
                "needs env.executor=thread, process or ray (an inline env cannot be interrupted); set one of "
                f"those or env.{k}=0",
            )
        if self.executor == "ray":
            import importlib.util

            _check(
                importlib.util.find_spec("ray") is not None,
                "env.executor",
                'ray needs Ray installed: pip install "gigpo[ray]" (or use env.executor=process on one machine)',
            )
        v = self.ray_num_cpus
        _check(v == -1 or v >= 0, "env.ray_num_cpus", f"must be >= 0 CPUs or -1 (Ray's default), got {v}")
        _check(
            v == -1 or self.executor == "ray",
            "env.ray_num_cpus",
            f"applies only with env.executor=ray (it is {self.executor!r}); set env.executor=ray or drop it",
        )
        for k in ("group_size", "tasks_per_iter", "max_steps"):
            _check(getattr(self, k) >= 1, f"env.{k}", f"must be >= 1, got {getattr(self, k)}")
        for k in ("history_length", "train_tasks", "eval_tasks"):
            _check(getattr(self, k) >= 0, f"env.{k}", f"must be >= 0, got {getattr(self, k)}")

    def timeouts(self) -> tuple[float | None, float | None]:
        """(step, reset) seconds for ``GroupedEnvs`` (None = no limit), defaults resolved."""
        inline = self.executor == "inline"
        return tuple(
            None if v == 0 or (v == -1 and inline) else (default if v == -1 else v)
            for v, default in ((self.step_timeout, 60.0), (self.reset_timeout, 300.0))
        )


@dataclass
class AlgorithmConfig:
    estimator: str = F(
        "gigpo",
        "advantage estimator, a name registered in gigpo.advantages.ESTIMATORS: gigpo, "
        "grpo, rloo, gigpo_no_step, gigpo_no_episode, ppo (PPO with a learned critic, "
        "settings in critic.*; verl's name gae is accepted and recorded as ppo), graphgpo (step "
        "returns from a state graph of each group's rollouts, docs/algorithm.md#graphgpo), or your "
        "own (register)",
    )
    estimator_module: str = F(
        "",
        "a module (dotted name, .py file or package dir) that registers estimators "
        "with gigpo.advantages.register; imported before algorithm.estimator is checked",
    )
    anchor: str = F(
        "observation",
        "what a step is grouped by (docs/algorithm.md#anchor-definitions): observation (the paper's), "
        "state (the env's canonical state key; the observation where a family has none) or "
        "context-<k> (the observation with the last k (action, observation) pairs, falling back to "
        "fewer pairs where a row has no peer; k <= env.history_length)",
    )
    gamma: float = F(0.95, "discount for per-step returns (paper Eq. 5)")
    invalid_action_penalty: float = F(0.1, "subtracted from the return of steps with invalid actions")
    # Estimator options: the names of the estimator's own keyword options; unset (null) = the
    # estimator's default, so the CLI and compute_advantages agree. Setting one that the chosen
    # estimator does not take is an error.
    mode: str | None = F(
        None,
        "normalisation: mean_std_norm ((x - mean) / (std + epsilon)) or mean_norm "
        "(x - mean); unset = the estimator's default (gigpo: mean_norm, grpo and graphgpo: "
        "mean_std_norm); not an option of rloo",
    )
    step_weight: float | None = F(
        None,
        "weight of the step-level advantage (paper Eq. 8, omega); unset = 1.0; gigpo, gigpo_no_episode and graphgpo",
    )
    episode_weight: float | None = F(
        None, "graphgpo: weight of the episode-level advantage (0 = the graph's step signal alone); unset = 1.0"
    )
    distance_decay: float | None = F(
        None,
        "graphgpo: a step's return is 10 * distance_decay^d, d = shortest-path steps from the state it "
        "reached to the goal in its group's state graph (the recipe's algorithm.gamma); in (0, 1]; unset = 0.1",
    )
    normalize_distance: bool | None = F(
        None,
        "graphgpo: the return is 10 * distance_decay^(d(reached) - d(current) + 1), rewarding progress "
        "rather than nearness; unset = false",
    )
    similarity_threshold: float | None = F(
        None,
        "group anchor states whose texts have a difflib ratio >= this "
        "(in (0, 1]); unset = exact equality; gigpo variants (step groups) and graphgpo (graph nodes only)",
    )
    epsilon: float | None = F(None, "std floor in advantage normalisation; unset = 1e-6")
    options: dict = F(
        {},
        "other keyword options of the estimator, by its names (e.g. a registered estimator's "
        "own: algorithm.options.scale=0.5)",
    )

    OPTIONS: typing.ClassVar[tuple[str, ...]] = (
        "mode",
        "step_weight",
        "episode_weight",
        "distance_decay",
        "normalize_distance",
        "similarity_threshold",
        "epsilon",
    )

    def __post_init__(self):
        if self.estimator_module:
            from gigpo._imports import import_ref

            try:
                import_ref(self.estimator_module, "algorithm.estimator_module")
            except ValueError as e:
                raise ConfigError(str(e)) from None
        # An alias (gae) is stored as the name it stands for, so a run's config, its resume check
        # and its metrics name one estimator one way.
        try:
            self.estimator = canonical_name(self.estimator)
        except ValueError as e:
            raise ConfigError(f"algorithm.estimator: {e}") from None
        try:
            parse_anchor(self.anchor)
        except ValueError as e:
            raise ConfigError(f"algorithm.anchor: {e}") from None
        _check(0.0 <= self.gamma <= 1.0, "algorithm.gamma", f"must be in [0, 1] (>1 diverges), got {self.gamma}")
        _check(self.invalid_action_penalty >= 0, "algorithm.invalid_action_penalty", "must be >= 0")
        if self.mode is not None:
            _choice(self.mode, "algorithm.mode", NORM_MODES)
        if self.similarity_threshold is not None:
            _check(0.0 < self.similarity_threshold <= 1.0, "algorithm.similarity_threshold", "must be in (0, 1]")
        if self.epsilon is not None:
            _check(self.epsilon > 0, "algorithm.epsilon", "must be > 0")
        for k in ("step_weight", "episode_weight"):
            v = getattr(self, k)
            _check(v is None or math.isfinite(v), f"algorithm.{k}", f"must be a finite number, got {v}")
        if self.distance_decay is not None:
            _check(
                0.0 < self.distance_decay <= 1.0,
                "algorithm.distance_decay",
                f"must be in (0, 1] (the return is 10 * distance_decay^distance), got {self.distance_decay}",
            )
        accepted = estimator_options(self.estimator)
        for k in self.OPTIONS:
            v = getattr(self, k)
            _check(
                v is None or k in accepted,
                f"algorithm.{k}",
                f"{v!r} is set but estimator {self.estimator!r} has no option {k!r} (its options: "
                f"{sorted(o for o in accepted if o in self.OPTIONS) or 'none'}); remove it or set "
                f"algorithm.{k}=null",
            )
        for k in self.options:
            _check(
                k in accepted and k not in self.OPTIONS,
                f"algorithm.options.{k}",
                f"use algorithm.{k}"
                if k in self.OPTIONS
                else f"estimator {self.estimator!r} has no option {k!r} (its options: {sorted(accepted) or 'none'})",
            )

    def estimator_options(self) -> dict:
        """The options to pass to ``compute_advantages``: those set, by the estimator's names."""
        out = {k: getattr(self, k) for k in self.OPTIONS if getattr(self, k) is not None}
        return out | dict(self.options)

    # Keys of configs written before the options took the estimator's names (read as the new ones).
    @staticmethod
    def upgrade(data: dict) -> dict:
        if not isinstance(data, dict) or not {"step_advantage_w", "enable_similarity", "similarity_thresh"} & set(data):
            return data
        data = dict(data)
        if "step_advantage_w" in data:
            data.setdefault("step_weight", data.pop("step_advantage_w"))
        thresh = data.pop("similarity_thresh", 0.95)
        if data.pop("enable_similarity", False):
            data.setdefault("similarity_threshold", thresh)
        # Old configs listed every option whatever the estimator; keep those it takes.
        try:
            accepted = estimator_options(data.get("estimator", "gigpo"))
        except ValueError:
            return data  # an unknown estimator is reported by validation
        for k in AlgorithmConfig.OPTIONS:
            if k in data and k not in accepted:
                data.pop(k)
        return data


BACKENDS = ("hf", "server", "api")


@dataclass
class ServerConfig:
    urls: list = F(
        [],
        "base URLs of OpenAI-compatible /v1/completions servers (vLLM), e.g. "
        "[http://127.0.0.1:8000]; requests go to the least loaded; [] = gigpo starts a local vLLM "
        "server on 127.0.0.1 for the run and stops it at the end (docs/serving.md)",
    )
    model: str = F("", "served model name ('' = the first one the server lists at /v1/models)")
    timeout_s: float = F(300.0, "seconds one completion request may take")
    concurrency: int = F(16, "requests in flight per server")
    max_retries: int = F(3, "retries of a request after a connection error or a 5xx answer (with backoff)")
    logprob_tolerance: float = F(
        0.02,
        "the start-up probe (and the one after each weight sync) fails when the server's "
        "log-probs differ from the trainer's by more than this",
    )
    vllm_bin: str = F(
        "",
        "vllm executable for a server gigpo starts ('' = .venv-vllm/bin/vllm, made by `make "
        "setup-vllm`, then vllm on PATH)",
    )
    port: int = F(0, "port of a server gigpo starts (0 = a free one; `gigpo serve`: 8000)")
    start_timeout_s: float = F(
        900.0, "seconds a server gigpo starts (or restarts, rollout.server.max_restarts) may take to answer /health"
    )
    max_restarts: int = F(
        2,
        "restarts of a server gigpo started (no urls) in one gigpo process, after it died mid-run "
        "(process exited, or /health failing once a request's retries are used up): it restarts on "
        "the weights it held and the interrupted generate call is retried whole, with the same "
        "seeds; 0 = stop with an error instead. Servers given by urls are never restarted",
    )
    extra_args: list = F([], "more vllm command-line arguments for a server gigpo starts, e.g. [--enforce-eager]")

    def __post_init__(self):
        _check(
            all(isinstance(u, str) and u.startswith(("http://", "https://")) for u in self.urls),
            "rollout.server.urls",
            f"must be a list of http(s):// base URLs, e.g. [http://127.0.0.1:8000], got {self.urls!r}",
        )
        _check(self.timeout_s > 0, "rollout.server.timeout_s", f"must be > 0, got {self.timeout_s}")
        _check(self.concurrency >= 1, "rollout.server.concurrency", f"must be >= 1, got {self.concurrency}")
        _check(self.max_retries >= 0, "rollout.server.max_retries", f"must be >= 0, got {self.max_retries}")
        _check(self.logprob_tolerance > 0, "rollout.server.logprob_tolerance", "must be > 0")
        _check(0 <= self.port < 65536, "rollout.server.port", f"must be in [0, 65535], got {self.port}")
        _check(self.start_timeout_s > 0, "rollout.server.start_timeout_s", "must be > 0")
        _check(self.max_restarts >= 0, "rollout.server.max_restarts", f"must be >= 0, got {self.max_restarts}")
        _check(
            all(isinstance(a, str) for a in self.extra_args),
            "rollout.server.extra_args",
            f"must be a list of strings, got {self.extra_args!r}",
        )


@dataclass
class APIConfig:
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
    timeout_s: float = F(120.0, "seconds one request may take")
    concurrency: int = F(8, "requests in flight")
    max_retries: int = F(3, "retries of a request after a connection error, a 429 or a 5xx answer (with backoff)")

    def __post_init__(self):
        from gigpo.policy.api import ENDPOINTS

        _check(
            self.base_url.startswith(("http://", "https://")),
            "rollout.api.base_url",
            f"must be an http(s):// URL such as https://api.openai.com/v1, got {self.base_url!r}",
        )
        _choice(self.endpoint, "rollout.api.endpoint", ENDPOINTS)
        _check(self.timeout_s > 0, "rollout.api.timeout_s", f"must be > 0, got {self.timeout_s}")
        _check(self.concurrency >= 1, "rollout.api.concurrency", f"must be >= 1, got {self.concurrency}")
        _check(self.max_retries >= 0, "rollout.api.max_retries", f"must be >= 0, got {self.max_retries}")


@dataclass
class RolloutConfig:
    temperature: float = F(1.0, "sampling temperature during training rollouts")
    top_p: float = F(1.0, "nucleus sampling threshold")
    eval_temperature: float = F(0.4, "sampling temperature during evaluation")
    max_response_tokens: int = F(512, "max generated tokens per step")
    max_prompt_tokens: int = F(2048, "max prompt tokens per step (older history is dropped first)")
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
    )
    backend: str = F(
        "hf",
        "who samples the rollouts: hf (Hugging Face model in the trainer's process), server "
        "(an inference engine behind OpenAI-compatible HTTP servers, rollout.server; docs/serving.md) "
        "or api (text-only completions from any OpenAI-compatible API, rollout.api; gigpo eval only, "
        "docs/algorithm.md#prompting-baselines)",
    )
    server: ServerConfig = field(default_factory=ServerConfig)
    api: APIConfig = field(default_factory=APIConfig)

    def __post_init__(self):
        _check(self.temperature > 0, "rollout.temperature", "must be > 0")
        _check(self.eval_temperature > 0, "rollout.eval_temperature", "must be > 0")
        _check(0 < self.top_p <= 1, "rollout.top_p", "must be in (0, 1]")
        _check(self.max_response_tokens >= 1, "rollout.max_response_tokens", "must be >= 1")
        _check(self.max_prompt_tokens >= 16, "rollout.max_prompt_tokens", "must be >= 16")
        _choice(self.backend, "rollout.backend", BACKENDS)
        _choice(self.prompt, "rollout.prompt", PROMPT_FORMS)
        _check(
            not (self.backend == "api" and self.constrain_actions),
            "rollout.constrain_actions",
            "is not available with rollout.backend=api (a text-only API cannot apply gigpo's "
            "admissible-action mask); use rollout.backend=hf or server, or rollout.constrain_actions=false",
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


@dataclass
class TrainConfig:
    iterations: int = F(100, "training iterations (rollout + update)")
    lr: float = F(1e-6, "AdamW learning rate")
    weight_decay: float = F(0.01, "AdamW weight decay")
    warmup_iterations: int = F(0, "iterations of linear learning-rate warm-up")
    schedule: str = F("constant", "learning-rate schedule after warm-up: constant or cosine")
    grad_clip: float = F(1.0, "max global gradient norm (0 = no clipping)")
    ppo_epochs: int = F(1, "passes over each iteration's rows")
    mini_batch_rows: int = F(
        256,
        "step rows per optimizer step, at most (verl-agent: ppo_mini_batch_size); an iteration's "
        "rows are split into ceil(rows / mini_batch_rows) mini-batches of about equal size",
    )
    merge_identical_rows: bool = F(
        True,
        "update rows that are one sample repeated (same prompt, response and advantage sign, as "
        "in a state every rollout passes) as one row weighted by their count: the same loss and "
        "gradient for a mini-batch holding them, one forward/backward instead of many; a merged "
        "row counts as its rows in train.mini_batch_rows. Not with per-token advantages (PPO's "
        "critic) or policy_loss=gspo",
    )
    target_kl: float = F(
        0.0,
        "stop an iteration's update early, before the optimizer step of the first mini-batch "
        "whose mean KL to the sampling policy (k3 estimate, (r - 1) - log r, over its tokens) "
        "exceeds this (as PPO implementations' target_kl); the remaining mini-batches of the "
        "iteration are not trained on. 0 = off",
    )
    micro_token_budget: int = F(8192, "max padded tokens per micro-batch (gradient accumulation)")
    pad_multiple: int = F(
        64,
        "pad micro-batch rows to a multiple of this many tokens: a few repeated shapes "
        "let the CPU allocator reuse memory (varied shapes grew a bf16 run by ~0.5 GB "
        "per iteration); 1 = no extra padding",
    )
    policy_loss: str = F(
        "ppo",
        "policy-gradient loss: ppo (per-token ratio, clipped per token, dual clip) or gspo "
        "(GSPO, arXiv:2507.18071: one ratio per row, the geometric mean of its token ratios, "
        f"clipped with clip_low/clip_high, no dual clip; needs loss_agg_mode={GSPO_AGG_MODE}; "
        "the paper clips at 3e-4/4e-4)",
    )
    clip_low: float = F(0.2, "clip epsilon below 1 (of the token ratio; of the row's ratio under gspo)")
    clip_high: float = F(0.2, "clip epsilon above 1 (0.28 = clip-higher; of the row's ratio under gspo)")
    dual_clip_c: float = F(3.0, "dual-clip bound for negative advantages (> 1; unused by policy_loss=gspo)")
    use_kl: bool = F(True, "add a KL-to-reference loss term (off: no reference model is loaded)")
    kl_type: str = F("low_var_kl", "KL estimator: low_var_kl, kl, abs or mse")
    kl_coef: float = F(0.01, "weight of the KL loss term")
    entropy_coef: float = F(0.001, "weight of the entropy bonus")
    loss_agg_mode: str = F("token-mean", "loss aggregation: token-mean, seq-mean-token-sum, seq-mean-token-mean")
    skip_zero_advantage_rows: bool = F(
        False,
        "leave rows with advantage 0 out of the update (they carry no "
        "policy gradient; needs use_kl=false and entropy_coef=0, where they "
        "would only dilute the token mean; like DAPO's dynamic sampling)",
    )
    dynamic_sampling: bool = F(
        False,
        "DAPO's dynamic sampling: leave out episode groups whose rows all have "
        "advantage 0 (all rollouts tied: no signal) and roll out more tasks until "
        "env.tasks_per_iter groups carry signal or train.dynamic_sampling_rounds is used up",
    )
    dynamic_sampling_rounds: int = F(2, "extra rollout rounds per iteration that dynamic sampling may use")
    max_bad_updates: int = F(3, "consecutive non-finite losses that stop the run")
    torch_threads: int = F(1, "torch CPU threads (1 is fastest on a shared 2-core machine)")
    autocast: str = F(
        "none",
        "mixed precision of the update's and log-prob passes' forward: none (float32 "
        "matmuls), bf16 (torch.autocast; ~2x faster on CPUs with AVX512-BF16, ~40x slower on "
        "CPUs without AVX512; log-probs and the loss stay float32; sampling is unchanged) or "
        "auto (bf16 where the device has native bfloat16 matmuls, else none)",
    )
    distributed: str = F(
        "ddp",
        "how the processes of `torchrun --nproc-per-node N -m gigpo.cli train` share the update "
        "(one process ignores it): ddp (DistributedDataParallel: each rank holds the whole model) "
        "or fsdp (FSDP2 fully_shard: parameters, gradients and optimizer state sharded per decoder "
        "layer); rank 0 rolls out and evaluates (docs/architecture.md#where-each-rank-does-what)",
    )
    dist_timeout_min: float = F(
        120.0,
        "minutes a rank waits for the others in a collective (they wait while rank 0 rolls out, "
        "validates and evaluates; raise it for long evaluations)",
    )

    def __post_init__(self):
        _choice(self.schedule, "train.schedule", ("constant", "cosine"))
        _choice(self.kl_type, "train.kl_type", KL_TYPES)
        _choice(self.loss_agg_mode, "train.loss_agg_mode", AGG_MODES)
        _choice(self.policy_loss, "train.policy_loss", POLICY_LOSSES)
        _check(
            self.policy_loss != "gspo" or self.loss_agg_mode == GSPO_AGG_MODE,
            "train.loss_agg_mode",
            f"train.policy_loss=gspo averages per sequence: set train.loss_agg_mode={GSPO_AGG_MODE} "
            f"(got {self.loss_agg_mode})",
        )
        _choice(self.autocast, "train.autocast", ("none", "bf16", "auto"))
        _choice(self.distributed, "train.distributed", DIST_MODES)
        _check(self.dist_timeout_min > 0, "train.dist_timeout_min", f"must be > 0, got {self.dist_timeout_min}")
        _check(self.iterations >= 0, "train.iterations", "must be >= 0")
        _check(self.lr > 0, "train.lr", f"must be > 0, got {self.lr}")
        for k in (
            "ppo_epochs",
            "mini_batch_rows",
            "micro_token_budget",
            "max_bad_updates",
            "torch_threads",
            "pad_multiple",
        ):
            _check(getattr(self, k) >= 1, f"train.{k}", f"must be >= 1, got {getattr(self, k)}")
        _check(0 <= self.clip_low < 1, "train.clip_low", "must be in [0, 1)")
        _check(self.clip_high >= 0, "train.clip_high", "must be >= 0")
        _check(self.dual_clip_c > 1, "train.dual_clip_c", f"must be > 1, got {self.dual_clip_c}")
        _check(self.dynamic_sampling_rounds >= 0, "train.dynamic_sampling_rounds", "must be >= 0")
        for k in ("weight_decay", "warmup_iterations", "grad_clip", "kl_coef", "entropy_coef", "target_kl"):
            _check(getattr(self, k) >= 0, f"train.{k}", "must be >= 0")
        _check(
            not self.skip_zero_advantage_rows or (not self.use_kl and self.entropy_coef == 0),
            "train.skip_zero_advantage_rows",
            "needs train.use_kl=false and train.entropy_coef=0 (rows with "
            "advantage 0 still carry KL/entropy gradient otherwise)",
        )


@dataclass
class CriticConfig:
    """PPO's learned critic, used when the estimator takes values (``algorithm.estimator=ppo``).

    Defaults are verl-agent's (``critic.*``, ``algorithm.gamma/lam``, ``trainer.critic_warmup``);
    the critic's mini-batches, epochs, micro-batch budget, loss aggregation and autocast are the
    policy update's (``train.*``), as in verl (docs/algorithm.md#ppo-with-a-learned-critic).
    """

    lr: float = F(1e-5, "critic AdamW learning rate (verl-agent: critic.optim.lr; 10x the actor's there)")
    weight_decay: float = F(0.01, "critic AdamW weight decay")
    grad_clip: float = F(1.0, "max global gradient norm of the critic (0 = no clipping)")
    cliprange_value: float = F(
        0.5,
        "value clipping: a token's new value counts at most this far from the value the "
        "advantages were computed with (the loss takes the larger of clipped and unclipped error)",
    )
    warmup_iterations: int = F(
        0, "first iterations that update only the critic; the policy is left unchanged (verl: trainer.critic_warmup)"
    )
    gamma: float = F(
        1.0,
        "GAE discount per response token within a step's row (not algorithm.gamma, the step "
        "discount of the critic-free estimators); 1.0 as verl-agent",
    )
    lam: float = F(1.0, "GAE lambda within a step's row; 1.0 as verl-agent")
    shared_backbone: bool = F(
        False,
        "for small machines: the value head sits on the policy's own transformer (no second model, "
        "the update's one forward gives log-probs and values) and is trained by the policy's update, "
        "critic.vf_coef x value loss added to the policy loss, with train.lr / weight_decay / "
        "grad_clip (critic.lr, weight_decay, grad_clip unused); needs critic.warmup_iterations=0",
    )
    vf_coef: float = F(
        0.1,
        "with critic.shared_backbone: weight of the value loss in the shared loss (TRL's PPO "
        "default); unused with a separate critic",
    )

    def __post_init__(self):
        _check(self.lr > 0, "critic.lr", f"must be > 0, got {self.lr}")
        _check(self.vf_coef > 0, "critic.vf_coef", f"must be > 0, got {self.vf_coef}")
        for k in ("weight_decay", "grad_clip", "warmup_iterations"):
            _check(getattr(self, k) >= 0, f"critic.{k}", f"must be >= 0, got {getattr(self, k)}")
        _check(self.cliprange_value > 0, "critic.cliprange_value", f"must be > 0, got {self.cliprange_value}")
        for k in ("gamma", "lam"):
            _check(0.0 <= getattr(self, k) <= 1.0, f"critic.{k}", f"must be in [0, 1], got {getattr(self, k)}")


@dataclass
class SFTConfig:
    enabled: bool = F(False, "warm-start the model by SFT on expert demos before RL")
    episodes: int = F(200, "expert episodes (train split) to collect")
    epochs: int = F(2, "passes over the demonstrations")
    lr: float = F(1e-3, "AdamW learning rate for SFT")
    batch_rows: int = F(16, "demonstration rows per optimizer step")
    relabel: int = F(
        0,
        "ALFWorld: up to this many counterfactual rows per expert step that reads the task "
        "(the task naming another object / receptacle type in view, with the matching action; "
        "gigpo.agent.relabel); 0 = off",
    )
    explore_steps: int = F(
        0,
        "each demonstration episode first plays 0..this many random admissible actions (uniform), "
        "then the expert takes over; only the expert's moves are demonstrations, so the model "
        "also learns to act from states off the expert's own path; 0 = off",
    )
    warmup_steps: int = F(
        0,
        "optimizer steps of linear learning-rate warm-up before the linear decay (a model "
        "built from scratch needs it to learn to copy names from its prompt)",
    )
    prompt_loss_weight: float = F(
        0.0,
        "weight of next-token loss on prompt tokens (0 = response tokens only; "
        ">0 helps a from-scratch model learn to read observations)",
    )
    think: str = F(
        "reason",
        "<think> text of the expert responses: 'reason' (a one-line reason naming the "
        "action's target) or 'empty' (<think></think>: every decision is made in the action text, "
        "where rollout.constrain_actions applies)",
    )
    output_dir: str = F("", "where to save the SFT model ('' = cache keyed by the SFT config)")

    def __post_init__(self):
        from gigpo.agent.expert import THINK_STYLES

        _check(self.think in THINK_STYLES, "sft.think", f"must be one of {THINK_STYLES}, got {self.think!r}")
        for k in ("episodes", "epochs", "batch_rows"):
            _check(getattr(self, k) >= 1, f"sft.{k}", "must be >= 1")
        _check(self.lr > 0, "sft.lr", "must be > 0")
        _check(self.prompt_loss_weight >= 0, "sft.prompt_loss_weight", "must be >= 0")
        _check(self.warmup_steps >= 0, "sft.warmup_steps", "must be >= 0")
        _check(self.relabel >= 0, "sft.relabel", "must be >= 0")
        _check(self.explore_steps >= 0, "sft.explore_steps", "must be >= 0")


@dataclass
class AgentConfig:
    """How ``gigpo eval`` prompts the model (docs/algorithm.md#prompting-baselines); ``gigpo train``
    trains the policy agent only."""

    mode: str = F(
        "policy",
        "policy (the trained agent's prompt, as in training), react (ReAct, arXiv:2210.03629: "
        "agent.fewshot solved expert episodes before the task, each step a thought then an action) or "
        "reflexion (Reflexion, arXiv:2303.11366: react, and after a failed trial a written reflection "
        "carried into the next, up to agent.reflexion_trials trials); react and reflexion are eval-only",
    )
    fewshot: int = F(2, "react/reflexion: solved example episodes per prompt (those of the task's type first)")
    fewshot_pool: int = F(
        12,
        "react/reflexion: train-split tasks (env.task_seed) the env expert plays to make the examples; "
        "its won episodes are the pool",
    )
    reflexion_trials: int = F(3, "reflexion: trials per task (a task stops at its first success)")
    reflection_tokens: int = F(128, "reflexion: max tokens of one reflection")

    def __post_init__(self):
        from gigpo.agent.prompting import MODES

        _choice(self.mode, "agent.mode", MODES)
        _check(self.fewshot >= 0, "agent.fewshot", f"must be >= 0, got {self.fewshot}")
        _check(self.fewshot_pool >= 0, "agent.fewshot_pool", f"must be >= 0, got {self.fewshot_pool}")
        _check(self.reflexion_trials >= 1, "agent.reflexion_trials", f"must be >= 1, got {self.reflexion_trials}")
        _check(self.reflection_tokens >= 1, "agent.reflection_tokens", f"must be >= 1, got {self.reflection_tokens}")


@dataclass
class GuardConfig:
    val_every: int = F(
        0,
        "best-model selection: evaluate on guard.val_tasks validation tasks before training, "
        "every k iterations and after the last (0 = off); the run keeps model/ = the best by "
        "validation success (ties keep the earlier), model_last/ = the last",
    )
    val_tasks: int = F(32, "validation tasks: eval-split tasks disjoint from the env.eval_tasks held-out ones")
    select_margin_se: float = F(
        2.0,
        "model/ is the last model instead of the best by validation when the last's validation "
        "success is within this many standard errors of the best's (sqrt(p(1-p)/val_tasks); the "
        "start is a candidate too; 0 = always the best). 2: the best of several noisy validations "
        "is a lucky draw, and the difference of two has ~1.4 times one's standard error",
    )
    watchdog: bool = F(
        True,
        "roll back to the best checkpoint and scale the learning rate by guard.lr_factor when "
        "training collapses (see guard.train_drop, guard.val_drop, guard.entropy_floor)",
    )
    train_drop: float = F(
        0.3,
        "collapse: training success below the best running mean (EMA, weight 0.5) by more "
        "than this for guard.patience iterations in a row",
    )
    val_drop: float = F(0.25, "collapse: validation success below the best so far by more than this")
    entropy_floor: float = F(0.0, "collapse: rollout/entropy_est below this for guard.patience iterations (0 = off)")
    patience: int = F(2, "consecutive iterations a training-side collapse signal must hold")
    lr_factor: float = F(0.5, "learning-rate multiplier applied at each rollback")
    max_rollbacks: int = F(3, "rollbacks after which the run stops early (keeping the best model)")

    def __post_init__(self):
        for k in ("val_every", "patience", "max_rollbacks"):
            _check(
                getattr(self, k) >= (1 if k == "patience" else 0),
                f"guard.{k}",
                f"must be >= {1 if k == 'patience' else 0}, got {getattr(self, k)}",
            )
        _check(self.val_tasks >= 1, "guard.val_tasks", f"must be >= 1, got {self.val_tasks}")
        for k in ("train_drop", "val_drop"):
            _check(0 < getattr(self, k) <= 1, f"guard.{k}", f"must be in (0, 1], got {getattr(self, k)}")
        _check(self.entropy_floor >= 0, "guard.entropy_floor", "must be >= 0")
        _check(self.select_margin_se >= 0, "guard.select_margin_se", f"must be >= 0, got {self.select_margin_se}")
        _check(0 < self.lr_factor <= 1, "guard.lr_factor", f"must be in (0, 1], got {self.lr_factor}")


@dataclass
class LogConfig:
    eval_every: int = F(0, "evaluate every k iterations (0 = only before and after training)")
    save_every: int = F(1, "checkpoint every k iterations")
    trajectories_every: int = F(5, "write sampled episodes with advantages every k iterations (0 = never)")
    eval_before: bool = F(True, "evaluate before the first iteration")
    tensorboard: bool = F(True, "also log to TensorBoard when it is installed")
    wandb_project: str = F("", "Weights & Biases project ('' = off)")
    progress: bool = F(True, "show progress bars")


@dataclass
class Config:
    name: str = F("run", "run name: outputs go to <output_dir>/<name>/")
    output_dir: str = F("runs", "parent directory of run directories")
    seed: int = F(0, "seed for everything (task sampling, generation, init)")
    model: ModelConfig = field(default_factory=ModelConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    guard: GuardConfig = field(default_factory=GuardConfig)
    log: LogConfig = field(default_factory=LogConfig)

    def _check_observation_prompt(self) -> None:
        from gigpo.envs.spec import families, get_family

        spec = get_family(self.env.family)
        ok = [f for f in families() if get_family(f).observation_is_state]
        _check(
            spec.observation_is_state,
            "rollout.prompt",
            f"'observation' shows the observation alone, but the {self.env.family} family's observation "
            f"is not its whole state (families where it is: {', '.join(ok) or 'none'}); use rollout.prompt=full",
        )
        _check(
            self.env.history_length == 0 and not self.rollout.repeat_task,
            "rollout.prompt",
            f"'observation' shows no history and no task: set env.history_length=0 (got "
            f"{self.env.history_length}) and rollout.repeat_task=false",
        )
        _check(
            self.agent.mode == "policy",
            "rollout.prompt",
            f"'observation' leaves no room for agent.mode={self.agent.mode}'s examples and reflections; "
            "use rollout.prompt=full with prompting agents",
        )

    def __post_init__(self):
        _check(
            bool(self.name) and self.name not in (".", "..") and not any(c in self.name for c in "/\\"),
            "name",
            f"must be a plain directory name (not empty, '.', '..', no '/' or '\\'), got {self.name!r}",
        )
        for f in dataclasses.fields(self):
            section = getattr(self, f.name)
            for g in dataclasses.fields(section) if dataclasses.is_dataclass(section) else ():
                v = getattr(section, g.name)
                _check(
                    not isinstance(v, float) or math.isfinite(v),
                    f"{f.name}.{g.name}",
                    f"must be a finite number, got {v}",
                )
        if self.rollout.prompt == "observation":
            self._check_observation_prompt()
        kind, k = parse_anchor(self.algorithm.anchor)
        _check(
            kind != "context" or k <= self.env.history_length,
            "algorithm.anchor",
            f"{self.algorithm.anchor!r} looks back {k} step(s) but the prompt shows env.history_length="
            f"{self.env.history_length}; "
            + (
                f"use context-<k> with 1 <= k <= {self.env.history_length}"
                if self.env.history_length
                else "use observation or state"
            ),
        )
        if needs_values(self.algorithm.estimator):
            self._check_critic()
        # More threads than CPUs only oversubscribes (a shared config may ask for 2 on a 1-CPU box);
        # absurd counts crash torch's thread pool, so they are an error.
        cpus = os.cpu_count() or 1
        _check(
            self.train.torch_threads <= max(4 * cpus, 64),
            "train.torch_threads",
            f"{self.train.torch_threads} is far more than the {cpus} CPUs of this machine; set "
            f"train.torch_threads<={cpus}",
        )

    def _check_critic(self) -> None:
        """Settings that do not fit an estimator with a learned critic (``ppo``)."""
        est = self.algorithm.estimator
        for k in ("gamma", "lam"):
            _check(
                k not in self.algorithm.options,
                f"algorithm.options.{k}",
                f"estimator {est!r} reads its {k} from critic.{k}; set critic.{k} instead",
            )
        # A warm-up leaves the policy unchanged while the critic learns; with one shared backbone
        # every value step moves the policy too.
        c = self.critic
        _check(
            not (c.shared_backbone and c.warmup_iterations),
            "critic.warmup_iterations",
            f"{c.warmup_iterations} needs a separate critic: with critic.shared_backbone=true the value "
            "loss trains the policy's own weights; set critic.warmup_iterations=0 or critic.shared_backbone=false",
        )
        # Token advantages are whitened over the batch: a group of tied rollouts still has
        # non-zero advantages, so "groups without signal" and "rows with A = 0" do not exist.
        for k in ("dynamic_sampling", "skip_zero_advantage_rows"):
            _check(
                not getattr(self.train, k),
                f"train.{k}",
                f"does not apply to estimator {est!r} (its advantages are per token, never 0 for a whole "
                f"group); set train.{k}=false",
            )

    def check_trainable(self) -> None:
        """``ConfigError`` unless ``gigpo train`` can run this config: prompting agents and the
        text-only API backend are evaluation baselines (no token ids to train on)."""
        _check(
            self.agent.mode == "policy",
            "agent.mode",
            f"{self.agent.mode!r} is a prompting baseline for `gigpo eval` only; `gigpo train` trains "
            "the policy agent: set agent.mode=policy (or run gigpo eval)",
        )
        _check(
            self.rollout.backend != "api",
            "rollout.backend",
            "api returns text without token ids or log-probs, so it serves `gigpo eval` only; train with "
            "rollout.backend=hf or server",
        )

    def needs_critic(self) -> bool:
        """Whether this run trains a critic (the estimator takes values)."""
        return needs_values(self.algorithm.estimator)

    @property
    def run_dir(self) -> Path:
        return Path(self.output_dir) / self.name


# --------------------------------------------------------------------------- (de)serialisation


def _is_section(tp) -> bool:
    return dataclasses.is_dataclass(tp)


def type_name(tp) -> str:
    """``float``, or ``float or null`` for an optional field."""
    args = typing.get_args(tp)
    if type(None) in args:
        return " or ".join(a.__name__ for a in args if a is not type(None)) + " or null"
    return tp.__name__


def _coerce(value: Any, tp, key: str):
    """Check ``value`` against the field type ``tp``; ints are accepted for floats; ``X | None``
    fields take null."""
    args = typing.get_args(tp)
    if type(None) in args:
        if value is None or (isinstance(value, str) and value.lower() in ("null", "none", "~")):
            return None
        tp = next(a for a in args if a is not type(None))
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp is float and isinstance(value, str):  # YAML 1.1 reads "1e-6" as a string
        try:
            value = float(value)
        except ValueError:
            pass
    if tp is float and isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{key}: must be a finite number, got {value}")
    ok = isinstance(value, tp) and not (tp is int and isinstance(value, bool))
    if not ok:
        raise ConfigError(f"{key}: expected {tp.__name__}, got {type(value).__name__} {value!r}")
    return value


def from_dict(cls, data: dict, prefix: str = ""):
    """Build the dataclass ``cls`` from a nested dict, rejecting unknown keys and wrong types."""
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix or 'config'}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for k, v in data.items():
        key = f"{prefix}{k}"
        if k not in names:
            close = difflib.get_close_matches(k, names, n=1)
            hint = f" Did you mean {prefix}{close[0]!r}?" if close else f" Valid keys: {names}"
            raise ConfigError(f"unknown config key {key!r}.{hint}")
        tp = hints[k]
        if tp is AlgorithmConfig:
            v = AlgorithmConfig.upgrade(v)
        kwargs[k] = from_dict(tp, v or {}, key + ".") if _is_section(tp) else _coerce(v, tp, key)
    return cls(**kwargs)


def to_dict(cfg) -> dict:
    return dataclasses.asdict(cfg)


def all_keys(cls=Config, prefix: str = ""):
    """Yield ``(dotted_key, type, default, help)`` for every leaf field."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if _is_section(tp):
            yield from all_keys(tp, f"{prefix}{f.name}.")
        else:
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            yield f"{prefix}{f.name}", tp, default, f.metadata.get("help", "")


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Set dotted ``key=value`` pairs into the nested dict ``data`` (values parsed as YAML)."""
    valid = [k for k, *_ in all_keys()]
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like key=value, e.g. train.lr=1e-5")
        key, raw = item.split("=", 1)
        key = key.strip()
        if key not in valid and not key.startswith(("env.kwargs.", "env.task_kwargs.", "algorithm.options.")):
            close = difflib.get_close_matches(key, valid, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"unknown config key {key!r}.{hint}")
        value = yaml.safe_load(raw) if raw != "" else ""
        node = data
        parts = key.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{key}: {p!r} is not a section")
        node[parts[-1]] = value
    return data


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """YAML file (optional) + overrides -> validated ``Config``."""
    data: dict = {}
    if path is not None:
        p = Path(path)
        if not p.exists():
            raise ConfigError(f"config file {str(p)!r} does not exist (see configs/*.yaml)")
        data = yaml.safe_load(p.read_text()) or {}
    data = apply_overrides(data, list(overrides or []))
    return from_dict(Config, data)


def save_config(cfg: Config, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))


def help_text() -> str:
    """Every config key with type, default and description (the ``--help`` epilogue)."""
    lines = []
    for key, tp, default, desc in all_keys():
        lines.append(f"  {key} ({type_name(tp)}, default {default!r}): {desc}")
    return "\n".join(lines)

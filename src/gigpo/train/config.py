"""gigpo's configuration tree: the sections, whose field help text is the CLI/docs text.

Load with ``load_config(path, overrides)``: YAML file (optional) + ``key=value`` overrides with
dotted keys (``algorithm.estimator=grpo train.lr=1e-5``). Unknown keys and wrong types raise
``ConfigError`` naming the key and the closest valid one. Each field declares its bounds or
choices (``F(..., ge=1, le=1024)``), checked for every field by one validator
(``gigpo.train.configtree``); a section's ``check()`` holds its cross-key rules, so a loaded config
never fails late. Checks of the machine (model path, device, env) are ``gigpo.train.checks``.

Defaults follow the reference's GiGPO scripts (docs/algorithm.md#paper-settings) unless a field says otherwise.
"""

from __future__ import annotations

import dataclasses
import os
import textwrap
import typing
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from gigpo.train.configtree import F, ConfigError, Section, all_keys as _all_keys, apply_overrides as _apply
from gigpo.train.configtree import check as _check, choice as _choice, from_dict, read_yaml, render_help, to_dict

__all__ = ["Config", "ConfigError", "F", "all_keys", "from_dict", "help_text", "load_config", "save_config", "to_dict"]

# Upper bounds of counts: far above any real run, low enough that a typo (an extra 000) is refused
# at load instead of allocating until memory runs out.
MANY = 10**6  # tasks, episodes, rows
LONG = 10**7  # iterations, optimizer steps
TOKENS = 2**20  # tokens of one prompt or response
SEED_MAX = 2**32 - 1  # numpy's seed range
OPTION = "estimator_option"  # the tag of AlgorithmConfig's fields that are estimator options

# Names are read from the code that implements them, never copied here.
from gigpo.advantages import NORM_MODES, canonical_name, estimator_options, needs_values, parse_anchor  # noqa: E402
from gigpo.train.distributed import MODES as DIST_MODES  # noqa: E402
from gigpo.envs.executors import EXECUTORS  # noqa: E402
from gigpo.train.loss import AGG_MODES, GSPO_AGG_MODE, KL_TYPES, POLICY_LOSSES  # noqa: E402
from gigpo.agent.prompts import PROMPT_FORMS  # noqa: E402


@dataclass
class ModelConfig(Section):
    PREFIX = "model"
    TITLE = "the policy model"

    name_or_path: str = F("tiny", "model alias (tiny, smollm2-135m), HF hub id or local dir")
    dtype: str = F(
        "float32", "parameter dtype: float32, bfloat16 or float16", choices=("float32", "bfloat16", "float16")
    )
    device: str = F("cpu", "torch device: cpu, cuda, cuda:0, ...")
    lora: bool = F(False, "train LoRA adapters instead of all weights (needs peft)")
    cache_dir: str = F("", "where built/converted models are cached ('' = library default)")

    def check(self):
        _check(bool(self.name_or_path), "model.name_or_path", "must not be empty")


@dataclass
class EnvConfig(Section):
    PREFIX = "env"
    TITLE = "environments and tasks"

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
    group_size: int = F(
        8, "rollouts per task, all reset to the same initial state (verl-agent: env.rollout.n)", ge=1, le=1024
    )
    tasks_per_iter: int = F(
        16, "distinct tasks per training iteration (verl-agent: data.train_batch_size)", ge=1, le=10_000
    )
    max_steps: int = F(50, "max agent steps per episode", ge=1, le=10_000)
    history_length: int = F(2, "past (observation, action) pairs kept in the prompt", ge=0, le=1000)
    train_tasks: int = F(0, "size of the training task pool (0 = the family's whole train split)", ge=0, le=MANY)
    eval_tasks: int = F(32, "held-out eval-split tasks used by evaluation (0 = whole split)", ge=0, le=MANY)
    task_seed: int = F(0, "seed for generating/selecting the task pools", ge=0, le=SEED_MAX)
    kwargs: dict = F({}, "family-specific env options passed to make_env")
    task_kwargs: dict = F({}, "family-specific task options passed to make_tasks")
    executor: str = F(
        "inline",
        "how envs run: inline, thread, process (worker processes on this machine) or ray "
        "(one Ray actor per env on a running Ray cluster, else a local Ray; needs gigpo[ray])",
        choices=EXECUTORS,
    )
    step_timeout: float = F(
        -1.0,
        "seconds one env step may take before its episode is failed (a hung env "
        "worker or actor is killed and restarted); 0 = no limit; -1 = 60 with executor thread, "
        "process or ray, none inline (an inline env cannot be interrupted)",
        ge=0,
        also=(-1,),
    )
    reset_timeout: float = F(
        -1.0,
        "seconds one env reset may take (includes building the env on first use); "
        "0 = no limit; -1 = 300 with executor thread, process or ray, none inline",
        ge=0,
        also=(-1,),
    )
    ray_num_cpus: float = F(
        -1.0,
        "CPUs Ray reserves for each env actor (env.executor=ray): a node with C CPUs holds at "
        "most C / ray_num_cpus actors and Ray places the rest on other nodes; 0 = reserve none "
        "(any node, even one started with 0 CPUs); -1 = Ray's actor default (a node with a CPU, "
        "none reserved while it runs)",
        ge=0,
        also=(-1,),
    )

    def check(self):
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
        for k in ("step_timeout", "reset_timeout"):
            v = getattr(self, k)
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
        _check(
            self.ray_num_cpus == -1 or self.executor == "ray",
            "env.ray_num_cpus",
            f"applies only with env.executor=ray (it is {self.executor!r}); set env.executor=ray or drop it",
        )

    def timeouts(self) -> tuple[float | None, float | None]:
        """(step, reset) seconds for ``GroupedEnvs`` (None = no limit), defaults resolved."""
        inline = self.executor == "inline"
        return tuple(
            None if v == 0 or (v == -1 and inline) else (default if v == -1 else v)
            for v, default in ((self.step_timeout, 60.0), (self.reset_timeout, 300.0))
        )


@dataclass
class AlgorithmConfig(Section):
    PREFIX = "algorithm"
    TITLE = "advantage estimation"

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
    gamma: float = F(0.95, "discount for per-step returns (paper Eq. 5; > 1 diverges)", ge=0, le=1)
    invalid_action_penalty: float = F(0.1, "subtracted from the return of steps with invalid actions", ge=0)
    # Estimator options (tagged OPTION): named as the estimator functions' keyword options, which
    # declare which estimators take each one and its default (``estimator_options``); unset (null)
    # = the estimator's default, so the CLI and compute_advantages agree. Setting one that the
    # chosen estimator does not take is an error.
    mode: str | None = F(
        None,
        "normalisation: mean_std_norm ((x - mean) / (std + epsilon)) or mean_norm (x - mean)",
        choices=NORM_MODES,
        tags=(OPTION,),
    )
    step_weight: float | None = F(None, "weight of the step-level advantage (paper Eq. 8, omega)", tags=(OPTION,))
    episode_weight: float | None = F(
        None, "weight of the episode-level advantage (0 = the graph's step signal alone)", tags=(OPTION,)
    )
    distance_decay: float | None = F(
        None,
        "a step's return is 10 * distance_decay^d, d = shortest-path steps from the state it "
        "reached to the goal in its group's state graph (the GraphGPO recipe's algorithm.gamma)",
        gt=0,
        le=1,
        tags=(OPTION,),
    )
    normalize_distance: bool | None = F(
        None,
        "the return is 10 * distance_decay^(d(reached) - d(current) + 1), rewarding progress rather than nearness",
        tags=(OPTION,),
    )
    similarity_threshold: float | None = F(
        None,
        "group anchor states whose texts have a difflib ratio >= this (unset = exact equality; "
        "graphgpo: graph nodes only)",
        gt=0,
        le=1,
        tags=(OPTION,),
    )
    epsilon: float | None = F(None, "std floor in advantage normalisation", gt=0, tags=(OPTION,))
    options: dict = F(
        {},
        "other keyword options of the estimator, by its names (e.g. a registered estimator's "
        "own: algorithm.options.scale=0.5)",
    )

    OPTIONS: typing.ClassVar[tuple[str, ...]] = ()  # the fields tagged OPTION, set below the class

    def check(self):
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


AlgorithmConfig.OPTIONS = tuple(f.name for f in dataclasses.fields(AlgorithmConfig) if OPTION in f.metadata["tags"])


def _yaml_scalar(v) -> str:
    return yaml.safe_dump(v, default_flow_style=True).removesuffix("\n...\n").strip()


def estimator_help(width: int = 100) -> str:
    """Each registered estimator with the options it takes and their defaults (``--help``)."""
    from gigpo.advantages import ESTIMATORS

    lines = [
        "  estimators and the options each takes, as algorithm.<option>; an option left unset (null)",
        "  takes the estimator's default, shown here:",
    ]
    for name in sorted(ESTIMATORS):
        opts = estimator_options(name)
        text = ", ".join(
            f"{k if k in AlgorithmConfig.OPTIONS else 'options.' + k}={_yaml_scalar(d)}" for k, d in opts.items()
        )
        lines.append(
            textwrap.fill(
                text or "no options",
                width,
                initial_indent=f"    {name + ':':<18}",
                subsequent_indent=" " * 22,
                break_on_hyphens=False,
            )
        )
    if any(needs_values(n) for n in ESTIMATORS):
        lines.append("    (an estimator with a critic takes its gamma and lam from critic.gamma and critic.lam)")
    return "\n".join(lines)


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
class TrainConfig(Section):
    PREFIX = "train"
    TITLE = "the policy update"

    iterations: int = F(100, "training iterations (rollout + update)", ge=0, le=LONG)
    lr: float = F(1e-6, "AdamW learning rate", gt=0)
    weight_decay: float = F(0.01, "AdamW weight decay", ge=0)
    warmup_iterations: int = F(0, "iterations of linear learning-rate warm-up", ge=0, le=LONG)
    schedule: str = F(
        "constant", "learning-rate schedule after warm-up: constant or cosine", choices=("constant", "cosine")
    )
    grad_clip: float = F(1.0, "max global gradient norm (0 = no clipping)", ge=0)
    ppo_epochs: int = F(1, "passes over each iteration's rows", ge=1, le=100)
    mini_batch_rows: int = F(
        256,
        "step rows per optimizer step, at most (verl-agent: ppo_mini_batch_size); an iteration's "
        "rows are split into ceil(rows / mini_batch_rows) mini-batches of about equal size",
        ge=1,
        le=MANY,
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
        ge=0,
    )
    micro_token_budget: int = F(8192, "max padded tokens per micro-batch (gradient accumulation)", ge=1, le=64 * TOKENS)
    pad_multiple: int = F(
        64,
        "pad micro-batch rows to a multiple of this many tokens: a few repeated shapes "
        "let the CPU allocator reuse memory (with varied shapes a run's memory keeps "
        "growing from iteration to iteration); 1 = no extra padding",
        ge=1,
        le=4096,
    )
    policy_loss: str = F(
        "ppo",
        "policy-gradient loss: ppo (per-token ratio, clipped per token, dual clip) or gspo "
        "(GSPO, arXiv:2507.18071: one ratio per row, the geometric mean of its token ratios, "
        f"clipped with clip_low/clip_high, no dual clip; needs loss_agg_mode={GSPO_AGG_MODE}; "
        "the paper clips at 3e-4/4e-4)",
        choices=POLICY_LOSSES,
    )
    clip_low: float = F(0.2, "clip epsilon below 1 (of the token ratio; of the row's ratio under gspo)", ge=0, lt=1)
    clip_high: float = F(0.2, "clip epsilon above 1 (0.28 = clip-higher; of the row's ratio under gspo)", ge=0)
    dual_clip_c: float = F(3.0, "dual-clip bound for negative advantages (unused by policy_loss=gspo)", gt=1)
    use_kl: bool = F(True, "add a KL-to-reference loss term (off: no reference model is loaded)")
    kl_type: str = F("low_var_kl", "KL estimator: low_var_kl, kl, abs or mse", choices=KL_TYPES)
    kl_coef: float = F(0.01, "weight of the KL loss term", ge=0)
    entropy_coef: float = F(0.001, "weight of the entropy bonus", ge=0)
    loss_agg_mode: str = F(
        "token-mean", "loss aggregation: token-mean, seq-mean-token-sum, seq-mean-token-mean", choices=AGG_MODES
    )
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
    dynamic_sampling_rounds: int = F(
        2, "extra rollout rounds per iteration that dynamic sampling may use", ge=0, le=100
    )
    max_bad_updates: int = F(3, "consecutive non-finite losses that stop the run", ge=1, le=1000)
    torch_threads: int = F(
        1,
        "torch CPU threads (more than the CPU cores free for this run only oversubscribes them; "
        "on a machine shared with other jobs, 1 is often fastest); at most 4 per CPU",
        ge=1,
    )
    autocast: str = F(
        "none",
        "mixed precision of the update's and log-prob passes' forward: none (float32 "
        "matmuls), bf16 (torch.autocast; faster on CPUs with AVX512-BF16, many times slower on "
        "CPUs without AVX512; log-probs and the loss stay float32; sampling is unchanged) or "
        "auto (bf16 where the device has native bfloat16 matmuls, else none)",
        choices=("none", "bf16", "auto"),
    )
    distributed: str = F(
        "ddp",
        "how the processes of `torchrun --nproc-per-node N -m gigpo.cli train` share the update "
        "(one process ignores it): ddp (DistributedDataParallel: each rank holds the whole model) "
        "or fsdp (FSDP2 fully_shard: parameters, gradients and optimizer state sharded per decoder "
        "layer); rank 0 rolls out and evaluates (docs/architecture.md#where-each-rank-does-what)",
        choices=DIST_MODES,
    )
    dist_timeout_min: float = F(
        120.0,
        "minutes a rank waits for the others in a collective (they wait while rank 0 rolls out, "
        "validates and evaluates; raise it for long evaluations)",
        gt=0,
    )

    def check(self):
        _check(
            self.policy_loss != "gspo" or self.loss_agg_mode == GSPO_AGG_MODE,
            "train.loss_agg_mode",
            f"train.policy_loss=gspo averages per sequence: set train.loss_agg_mode={GSPO_AGG_MODE} "
            f"(got {self.loss_agg_mode})",
        )
        _check(
            not self.skip_zero_advantage_rows or (not self.use_kl and self.entropy_coef == 0),
            "train.skip_zero_advantage_rows",
            "needs train.use_kl=false and train.entropy_coef=0 (rows with "
            "advantage 0 still carry KL/entropy gradient otherwise)",
        )


@dataclass
class CriticConfig(Section):
    """PPO's learned critic, used when the estimator takes values (``algorithm.estimator=ppo``).

    Defaults are verl-agent's (``critic.*``, ``algorithm.gamma/lam``, ``trainer.critic_warmup``);
    the critic's mini-batches, epochs, micro-batch budget, loss aggregation and autocast are the
    policy update's (``train.*``), as in verl (docs/algorithm.md#ppo-with-a-learned-critic).
    """

    PREFIX = "critic"
    TITLE = "PPO's learned critic (algorithm.estimator=ppo)"

    lr: float = F(1e-5, "critic AdamW learning rate (verl-agent: critic.optim.lr; 10x the actor's there)", gt=0)
    weight_decay: float = F(0.01, "critic AdamW weight decay", ge=0)
    grad_clip: float = F(1.0, "max global gradient norm of the critic (0 = no clipping)", ge=0)
    cliprange_value: float = F(
        0.5,
        "value clipping: a token's new value counts at most this far from the value the "
        "advantages were computed with (the loss takes the larger of clipped and unclipped error)",
        gt=0,
    )
    warmup_iterations: int = F(
        0,
        "first iterations that update only the critic; the policy is left unchanged (verl: trainer.critic_warmup)",
        ge=0,
        le=LONG,
    )
    gamma: float = F(
        1.0,
        "GAE discount per response token within a step's row (not algorithm.gamma, the step "
        "discount of the critic-free estimators); 1.0 as verl-agent",
        ge=0,
        le=1,
    )
    lam: float = F(1.0, "GAE lambda within a step's row; 1.0 as verl-agent", ge=0, le=1)
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
        gt=0,
    )


@dataclass
class SFTConfig(Section):
    PREFIX = "sft"
    TITLE = "supervised warm start on expert demonstrations"

    enabled: bool = F(False, "warm-start the model by SFT on expert demos before RL")
    episodes: int = F(200, "expert episodes (train split) to collect", ge=1, le=MANY)
    epochs: int = F(2, "passes over the demonstrations", ge=1, le=1000)
    lr: float = F(1e-3, "AdamW learning rate for SFT", gt=0)
    batch_rows: int = F(16, "demonstration rows per optimizer step", ge=1, le=MANY)
    relabel: int = F(
        0,
        "ALFWorld: up to this many counterfactual rows per expert step that reads the task "
        "(the task naming another object / receptacle type in view, with the matching action; "
        "gigpo.agent.relabel); 0 = off",
        ge=0,
        le=1000,
    )
    explore_steps: int = F(
        0,
        "each demonstration episode first plays 0..this many random admissible actions (uniform), "
        "then the expert takes over; only the expert's moves are demonstrations, so the model "
        "also learns to act from states off the expert's own path; 0 = off",
        ge=0,
        le=10_000,
    )
    warmup_steps: int = F(
        0,
        "optimizer steps of linear learning-rate warm-up before the linear decay (a model "
        "built from scratch needs it to learn to copy names from its prompt)",
        ge=0,
        le=LONG,
    )
    prompt_loss_weight: float = F(
        0.0,
        "weight of next-token loss on prompt tokens (0 = response tokens only; "
        ">0 helps a from-scratch model learn to read observations)",
        ge=0,
    )
    think: str = F(
        "reason",
        "<think> text of the expert responses: 'reason' (a one-line reason naming the "
        "action's target) or 'empty' (<think></think>: every decision is made in the action text, "
        "where rollout.constrain_actions applies)",
    )
    output_dir: str = F("", "where to save the SFT model ('' = cache keyed by the SFT config)")

    def check(self):
        from gigpo.agent.expert import THINK_STYLES

        _check(self.think in THINK_STYLES, "sft.think", f"must be one of {THINK_STYLES}, got {self.think!r}")


@dataclass
class AgentConfig(Section):
    """How ``gigpo eval`` prompts the model (docs/algorithm.md#prompting-baselines); ``gigpo train``
    trains the policy agent only."""

    PREFIX = "agent"
    TITLE = "how gigpo eval prompts the model (gigpo train: policy only)"

    mode: str = F(
        "policy",
        "policy (the trained agent's prompt, as in training), react (ReAct, arXiv:2210.03629: "
        "agent.fewshot solved expert episodes before the task, each step a thought then an action) or "
        "reflexion (Reflexion, arXiv:2303.11366: react, and after a failed trial a written reflection "
        "carried into the next, up to agent.reflexion_trials trials); react and reflexion are eval-only",
    )
    fewshot: int = F(
        2, "react/reflexion: solved example episodes per prompt (those of the task's type first)", ge=0, le=64
    )
    fewshot_pool: int = F(
        12,
        "react/reflexion: train-split tasks (env.task_seed) the env expert plays to make the examples; "
        "its won episodes are the pool",
        ge=0,
        le=MANY,
    )
    reflexion_trials: int = F(3, "reflexion: trials per task (a task stops at its first success)", ge=1, le=100)
    reflection_tokens: int = F(128, "reflexion: max tokens of one reflection", ge=1, le=TOKENS)

    def check(self):
        from gigpo.agent.prompting import MODES

        _choice(self.mode, "agent.mode", MODES)


@dataclass
class GuardConfig(Section):
    PREFIX = "guard"
    TITLE = "best-model selection and the collapse watchdog"

    val_every: int = F(
        0,
        "best-model selection: evaluate on guard.val_tasks validation tasks before training, "
        "every k iterations and after the last (0 = off); the run keeps model/ = the best by "
        "validation success (ties keep the earlier), model_last/ = the last",
        ge=0,
        le=LONG,
    )
    val_tasks: int = F(
        32, "validation tasks: eval-split tasks disjoint from the env.eval_tasks held-out ones", ge=1, le=MANY
    )
    select_margin_se: float = F(
        2.0,
        "model/ is the last model instead of the best by validation when the last's validation "
        "success is within this many standard errors of the best's (sqrt(p(1-p)/val_tasks); the "
        "start is a candidate too; 0 = always the best). 2: the best of several noisy validations "
        "is a lucky draw, and the difference of two has ~1.4 times one's standard error",
        ge=0,
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
        gt=0,
        le=1,
    )
    val_drop: float = F(0.25, "collapse: validation success below the best so far by more than this", gt=0, le=1)
    entropy_floor: float = F(
        0.0, "collapse: rollout/entropy_est below this for guard.patience iterations (0 = off)", ge=0
    )
    patience: int = F(2, "consecutive iterations a training-side collapse signal must hold", ge=1, le=1000)
    lr_factor: float = F(0.5, "learning-rate multiplier applied at each rollback", gt=0, le=1)
    max_rollbacks: int = F(3, "rollbacks after which the run stops early (keeping the best model)", ge=0, le=1000)


@dataclass
class LogConfig(Section):
    PREFIX = "log"
    TITLE = "evaluation, checkpoints and logs"

    eval_every: int = F(0, "evaluate every k iterations (0 = only before and after training)", ge=0, le=LONG)
    save_every: int = F(1, "checkpoint every k iterations (the last iteration is always saved)", ge=1, le=LONG)
    trajectories_every: int = F(
        5, "write sampled episodes with advantages every k iterations (0 = never)", ge=0, le=LONG
    )
    eval_before: bool = F(True, "evaluate before the first iteration")
    tensorboard: bool = F(True, "also log to TensorBoard when it is installed")
    wandb_project: str = F("", "Weights & Biases project ('' = off)")
    progress: bool = F(True, "show progress bars")


@dataclass
class Config(Section):
    TITLE = "the run"

    name: str = F("run", "run name: outputs go to <output_dir>/<name>/")
    output_dir: str = F("runs", "parent directory of run directories")
    seed: int = F(0, "seed for everything (task sampling, generation, init)", ge=0, le=SEED_MAX)
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

    def check(self):
        _check(
            bool(self.name) and self.name not in (".", "..") and not any(c in self.name for c in "/\\"),
            "name",
            f"must be a plain directory name (not empty, '.', '..', no '/' or '\\'), got {self.name!r}",
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


def grouped_envs(e: EnvConfig, group_size: int):
    """The ``GroupedEnvs`` of ``env`` settings with ``group_size`` rollouts per task (training uses
    ``env.group_size``, evaluation 1)."""
    from gigpo.envs.manager import GroupedEnvs

    step_timeout, reset_timeout = e.timeouts()
    return GroupedEnvs(
        e.family,
        group_size=group_size,
        max_steps=e.max_steps,
        env_kwargs=e.kwargs,
        executor=e.executor,
        step_timeout=step_timeout,
        reset_timeout=reset_timeout,
        ray_num_cpus=None if e.ray_num_cpus == -1 else e.ray_num_cpus,
    )


def build_agent(cfg: Config, tokenizer):
    """The ``Agent`` that ``cfg`` describes (prompt format, history, action constraint)."""
    from gigpo.agent import Agent

    return Agent(
        cfg.env.family,
        tokenizer,
        history_length=cfg.env.history_length,
        max_prompt_tokens=cfg.rollout.max_prompt_tokens,
        constrain_actions=cfg.rollout.constrain_actions,
        repeat_task=cfg.rollout.repeat_task,
        prompt_form=cfg.rollout.prompt,
    )


def load_kwargs(cfg: Config, device: str | None = None) -> dict:
    """The keyword arguments of ``gigpo.policy.load_policy`` that ``cfg.model`` and the seed set
    (``device`` overrides ``cfg.model.device``: the trainer's rank decides it)."""
    m = cfg.model
    return dict(device=device or m.device, dtype=m.dtype, cache_dir=m.cache_dir or None, seed=cfg.seed)


# --------------------------------------------------------------------------- (de)serialisation


def all_keys(cls=Config, prefix: str = ""):
    """Yield ``(dotted_key, type, default, help)`` for every leaf field."""
    return _all_keys(cls, prefix)


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """YAML file (optional) + overrides -> validated ``Config``."""
    data = read_yaml(path) if path is not None else {}
    data = _apply(Config, data, list(overrides or []))
    return from_dict(Config, data)


def save_config(cfg: Config, path: str | Path) -> None:
    Path(path).write_text(config_yaml(cfg))


def config_yaml(cfg: Config) -> str:
    """``cfg`` as the YAML ``load_config`` reads back to an equal config."""
    return yaml.safe_dump(to_dict(cfg), sort_keys=False)


def help_text(section: str | None = None) -> str:
    """Every config key (or those of ``section``: ``env``, ``rollout.server``, ``top`` for the
    top-level keys) with type, default, range and description, grouped by section (``--help``)."""
    return render_help(Config, section, root_name="top", after={"algorithm": estimator_help()})

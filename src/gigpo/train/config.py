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

from gigpo.train.configtree import MANY, TOKENS, F, ConfigError, Section
from gigpo.train.configtree import all_keys as _all_keys, apply_overrides as _apply
from gigpo.train.configtree import check as _check, choice as _choice, from_dict, read_yaml, render_help, to_dict

__all__ = [
    "APIConfig",
    "AgentConfig",
    "AlgorithmConfig",
    "Config",
    "ConfigError",
    "CriticConfig",
    "EnvConfig",
    "F",
    "GuardConfig",
    "LogConfig",
    "ModelConfig",
    "RolloutConfig",
    "SFTConfig",
    "ServerConfig",
    "TrainConfig",
    "all_keys",
    "from_dict",
    "help_text",
    "load_config",
    "save_config",
    "to_dict",
]

SEED_MAX = 2**32 - 1  # numpy's seed range
OPTION = "estimator_option"  # the tag of AlgorithmConfig's fields that are estimator options

# Names are read from the code that implements them, never copied here.
from gigpo.advantages import NORM_MODES, canonical_name, estimator_options, needs_values, parse_anchor  # noqa: E402
from gigpo.envs.executors import EXECUTORS  # noqa: E402
from gigpo.train.config_rollout import APIConfig, RolloutConfig, ServerConfig  # noqa: E402
from gigpo.train.config_train import CriticConfig, GuardConfig, LogConfig, SFTConfig, TrainConfig  # noqa: E402


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
        "env family: a built-in (alfworld, webshop, search, sokoban) or one registered by a plugin "
        "(entry point group gigpo.families, or env.family_module); gigpo list families shows them all",
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
        "returns from a state graph of each group's rollouts, docs/algorithm.md#graphgpo), "
        "gigpo_eb (step baselines shrunk toward the task's mean by each group's count and spread, "
        "docs/algorithm.md#empirical-bayes-anchor-baselines), or your own (register)",
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


NAME_MAX = 200  # bytes of a run name: 255 per path component, less the set-aside suffix


@dataclass
class Config(Section):
    TITLE = "the run"

    name: str = F("run", f"run name: outputs go to <output_dir>/<name>/ (at most {NAME_MAX} bytes)")
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
        _check(
            len(self.name.encode()) <= NAME_MAX,
            "name",
            f"must be at most {NAME_MAX} bytes (a file name has 255 at most, and a run set aside takes a "
            f"'-<date>-<time>' suffix), got {len(self.name.encode())}: {self.name[:40]!r}...",
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
        if self.train.off_policy_steps:
            self._check_off_policy()
        # More threads than CPUs only oversubscribes (a shared config may ask for 2 on a 1-CPU box);
        # absurd counts crash torch's thread pool, so they are an error.
        cpus = os.cpu_count() or 1
        _check(
            self.train.torch_threads <= max(4 * cpus, 64),
            "train.torch_threads",
            f"{self.train.torch_threads} is far more than the {cpus} CPUs of this machine; set "
            f"train.torch_threads<={cpus}",
        )

    def _check_off_policy(self) -> None:
        """Settings that do not fit rollouts sampled while the learner updates."""
        k = self.train.off_policy_steps
        _check(
            not needs_values(self.algorithm.estimator),
            "train.off_policy_steps",
            f"{k} needs an estimator without a critic (the critic's values of a rollout would lag it); "
            f"use train.off_policy_steps=0 with estimator {self.algorithm.estimator!r}",
        )
        _check(
            self.rollout.top_p == 1.0,
            "train.off_policy_steps",
            f"{k} weighs each token by the sampler's log-prob, exact only with rollout.top_p=1 (got "
            f"{self.rollout.top_p}); set rollout.top_p=1",
        )
        _check(
            self.rollout.backend != "server" or k == 1,
            "train.off_policy_steps",
            f"{k} with rollout.backend=server: the server holds one policy version at a time, so "
            "it samples at most one step off; set train.off_policy_steps=1",
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

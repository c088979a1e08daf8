"""Config tree: YAML + overrides, validation errors naming the key, every shipped config loads."""

import sys
from pathlib import Path

import pytest

from gigpo.train.config import Config, ConfigError, all_keys, help_text, load_config, save_config

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))


def test_defaults_follow_spec_section_7():
    c = Config()
    assert (c.algorithm.gamma, c.algorithm.invalid_action_penalty, c.train.kl_coef) == (0.95, 0.1, 0.01)
    assert (c.train.clip_low, c.train.clip_high, c.train.dual_clip_c) == (0.2, 0.2, 3.0)
    assert c.train.kl_type == "low_var_kl" and c.train.loss_agg_mode == "token-mean"
    assert c.rollout.eval_temperature == 0.4 and c.env.group_size == 8


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_shipped_config_loads_and_validates(path):
    cfg = load_config(path)
    assert cfg.name == path.stem


def test_required_configs_exist():
    names = {p.name for p in CONFIGS}
    for n in (
        "alfworld_tiny",
        "webshop_tiny",
        "search_tiny",
        "alfworld_smollm2",
        "alfworld_qwen2.5_1.5b",
        "webshop_qwen2.5_1.5b",
        "search_qwen2.5_7b",
    ):
        assert f"{n}.yaml" in names


def test_paper_configs_carry_paper_values():
    s = load_config(CONFIGS[0].parent / "search_qwen2.5_7b.yaml")
    assert (s.env.group_size, s.env.history_length, s.env.max_steps) == (5, 4, 4)
    assert s.algorithm.similarity_threshold == 0.9
    assert (s.train.kl_coef, s.algorithm.invalid_action_penalty, s.train.entropy_coef) == (0.001, 0.01, 0.0)
    w = load_config(CONFIGS[0].parent / "webshop_qwen2.5_1.5b.yaml")
    assert w.algorithm.mode == "mean_norm" and w.train.mini_batch_rows == 64 and w.env.max_steps == 15


def test_overrides_set_dotted_keys_with_types():
    cfg = load_config(
        None,
        ["algorithm.estimator=grpo", "train.lr=1e-5", "env.group_size=3", "train.use_kl=false", "env.kwargs.foo=7"],
    )
    assert cfg.algorithm.estimator == "grpo" and cfg.train.lr == 1e-5
    assert cfg.env.group_size == 3 and cfg.train.use_kl is False and cfg.env.kwargs == {"foo": 7}


def test_override_beats_yaml(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("train: {lr: 0.1}\nseed: 5\n")
    cfg = load_config(p, ["train.lr=0.2"])
    assert cfg.train.lr == 0.2 and cfg.seed == 5


def test_unknown_key_suggests_closest():
    with pytest.raises(ConfigError, match=r"train\.lr"):
        load_config(None, ["train.lrr=1"])
    with pytest.raises(ConfigError, match="estimator"):
        load_config(None, ["algorithm.estimater=grpo"])


def test_unknown_yaml_key_suggests_closest(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("train: {entropy_coeff: 0.1}\n")
    with pytest.raises(ConfigError, match="entropy_coef"):
        load_config(p)


def test_wrong_type_names_key():
    with pytest.raises(ConfigError, match=r"env\.group_size.*expected int"):
        load_config(None, ["env.group_size=abc"])
    with pytest.raises(ConfigError, match=r"train\.use_kl.*expected bool"):
        load_config(None, ["train.use_kl=3"])


@pytest.mark.parametrize(
    "override,key",
    [
        ("algorithm.estimator=gipo", "gigpo"),
        ("algorithm.gamma=1.5", "algorithm.gamma"),
        ("train.kl_type=lowvar_kl", "low_var_kl"),
        ("train.dual_clip_c=0.5", "dual_clip_c"),
        ("env.family=alfwrld", "alfworld"),
        ("train.loss_agg_mode=token_mean", "token-mean"),
        ("env.group_size=0", "env.group_size"),
        ("sft.think=none", "sft.think"),
    ],
)
def test_invalid_values_rejected_up_front(override, key):
    with pytest.raises(ConfigError, match=key):
        load_config(None, [override])


def test_roundtrip_through_yaml(tmp_path):
    cfg = load_config(None, ["train.lr=3e-4", "name=abc"])
    save_config(cfg, tmp_path / "c.yaml")
    assert load_config(tmp_path / "c.yaml") == cfg


def test_every_field_has_help():
    for key, _tp, _d, desc in all_keys():
        assert desc, f"{key} has no description"
    assert "train.kl_coef" in help_text()


def test_reuse_sampling_logprobs_needs_top_p_one():
    with pytest.raises(ConfigError, match="rollout.reuse_sampling_logprobs"):
        load_config(None, ["rollout.reuse_sampling_logprobs=true", "rollout.top_p=0.9"])
    assert load_config(None, ["rollout.reuse_sampling_logprobs=true"]).rollout.reuse_sampling_logprobs


def test_skip_zero_advantage_rows_needs_no_kl_and_no_entropy():
    with pytest.raises(ConfigError, match="train.skip_zero_advantage_rows"):
        load_config(None, ["train.skip_zero_advantage_rows=true"])
    with pytest.raises(ConfigError, match="train.skip_zero_advantage_rows"):
        load_config(None, ["train.skip_zero_advantage_rows=true", "train.use_kl=false"])
    cfg = load_config(None, ["train.skip_zero_advantage_rows=true", "train.use_kl=false", "train.entropy_coef=0"])
    assert cfg.train.skip_zero_advantage_rows


def test_prompt_loss_combines_with_constrained_actions():
    cfg = load_config(None, ["rollout.constrain_actions=true", "sft.enabled=true", "sft.prompt_loss_weight=0.5"])
    assert cfg.sft.prompt_loss_weight == 0.5
    with pytest.raises(ConfigError, match="sft.prompt_loss_weight"):
        load_config(None, ["sft.prompt_loss_weight=-1"])


def test_sft_cache_key_changes_with_think_style_only_when_not_default():
    from gigpo.train.sft import sft_key

    base = load_config(None, [])
    assert sft_key(base) == sft_key(load_config(None, ["sft.think=reason"]))
    assert sft_key(base) != sft_key(load_config(None, ["sft.think=empty"]))
    assert sft_key(base) == sft_key(load_config(None, ["sft.warmup_steps=0"]))
    assert sft_key(base) != sft_key(load_config(None, ["sft.warmup_steps=30"]))
    assert sft_key(base) == sft_key(load_config(None, ["sft.relabel=0"]))
    assert sft_key(base) != sft_key(load_config(None, ["sft.relabel=4"]))
    # which held-out games are evaluated does not change the SFT (it reads the train split)
    seen = load_config("configs/alfworld_tiny.yaml", [])
    before = sft_key(seen)
    seen.env.task_kwargs["eval_split"] = "valid_seen"
    assert sft_key(seen) == before
    seen.env.task_kwargs["max_distractors"] = 3
    assert sft_key(seen) != before


def test_sft_cache_key_follows_the_tiny_build(monkeypatch):
    import gigpo.policy.tiny as tiny
    from gigpo.train.sft import sft_key

    cfg = load_config(None, [])
    before = sft_key(cfg)
    monkeypatch.setattr(tiny, "tiny_hash", lambda c: "another-build")
    assert sft_key(cfg) != before  # a changed tiny architecture must not reuse an old SFT model


@pytest.mark.parametrize(
    "override", ["train.lr=.inf", "train.lr=nan", "algorithm.gamma=.nan", "sft.lr=-.inf", "env.step_timeout=.inf"]
)
def test_non_finite_floats_are_config_errors(override):
    with pytest.raises(ConfigError, match=rf"{override.split('=')[0]}: must be a finite number"):
        load_config(None, [override, "env.executor=thread"])


@pytest.mark.parametrize("name", [".", "..", "", "a/b", "a\\b"])
def test_run_name_must_be_a_plain_directory_name(name):
    with pytest.raises(ConfigError, match="name: must be a plain directory name"):
        load_config(None, [f"name={name}"])


def test_torch_threads_far_beyond_the_cpus_is_an_error():
    import os

    cpus = os.cpu_count() or 1
    assert load_config(None, [f"train.torch_threads={cpus + 1}"]).train.torch_threads == cpus + 1
    with pytest.raises(ConfigError, match=r"train\.torch_threads.*CPUs"):
        load_config(None, ["train.torch_threads=100000"])


def test_env_timeouts_default_by_executor_and_need_an_interruptible_one():
    assert load_config(None, []).env.timeouts() == (None, None)
    assert load_config(None, ["env.executor=process"]).env.timeouts() == (60.0, 300.0)
    assert load_config(None, ["env.executor=thread", "env.step_timeout=0", "env.reset_timeout=5"]).env.timeouts() == (
        None,
        5.0,
    )
    with pytest.raises(ConfigError, match=r"env\.step_timeout: needs env\.executor=thread, process or ray"):
        load_config(None, ["env.step_timeout=5"])
    with pytest.raises(ConfigError, match=r"env\.reset_timeout: must be >= 0"):
        load_config(None, ["env.executor=thread", "env.reset_timeout=-3"])
    assert load_config(None, ["env.executor=ray"]).env.timeouts() == (60.0, 300.0)


def test_ray_executor_without_ray_installed_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # find_spec("ray") is None: as if it were not installed
    with pytest.raises(ConfigError, match=r'env\.executor: ray needs Ray installed: pip install "gigpo\[ray\]"'):
        load_config(None, ["env.executor=ray"])


def test_ray_num_cpus_is_checked_and_only_taken_with_the_ray_executor():
    pytest.importorskip("ray", reason="ray is not installed (pip install 'gigpo[ray]')")
    assert load_config(None, ["env.executor=ray", "env.ray_num_cpus=0.25"]).env.ray_num_cpus == 0.25
    from gigpo.train.factories import grouped_envs

    # The settings reach GroupedEnvs (no Ray starts before the first reset).
    with grouped_envs(load_config(None, ["env.executor=ray", "env.ray_num_cpus=0.5"]).env, group_size=2) as envs:
        assert (envs.executor_name, envs.ray_num_cpus, envs.step_timeout, envs.reset_timeout) == ("ray", 0.5, 60, 300)
    with grouped_envs(load_config(None, ["env.executor=ray"]).env, group_size=2) as envs:
        assert envs.ray_num_cpus is None  # -1: Ray's actor default
    with pytest.raises(ConfigError, match=r"env\.ray_num_cpus: must be >= 0 or -1, got -0\.5"):
        load_config(None, ["env.executor=ray", "env.ray_num_cpus=-0.5"])
    with pytest.raises(ConfigError, match=r"env\.ray_num_cpus: applies only with env\.executor=ray"):
        load_config(None, ["env.executor=process", "env.ray_num_cpus=1"])


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_config_has_room_for_its_validation_tasks_and_takes_the_guards(path):
    from gigpo.envs import make_tasks

    cfg = load_config(path, ["train.dynamic_sampling=true", "guard.watchdog=true"])
    if cfg.guard.val_every:
        e = cfg.env
        tasks = make_tasks(e.family, "eval", n=e.eval_tasks + cfg.guard.val_tasks, seed=e.task_seed, **e.task_kwargs)
        assert len({t.task_id for t in tasks}) == e.eval_tasks + cfg.guard.val_tasks


def test_estimator_options_take_the_estimators_names_and_defaults():
    from gigpo.advantages import ESTIMATORS, compute_advantages, estimator_options, register

    cfg = load_config(
        None, ["algorithm.estimator=gigpo", "algorithm.step_weight=0.5", "algorithm.similarity_threshold=0.9"]
    )
    assert cfg.algorithm.estimator_options() == {"step_weight": 0.5, "similarity_threshold": 0.9}
    # unset = the estimator's own default: the CLI and compute_advantages agree
    assert load_config(None, []).algorithm.estimator_options() == {}
    assert estimator_options("gigpo")["mode"] == "mean_norm" and estimator_options("grpo")["mode"] == "mean_std_norm"
    # an option the chosen estimator does not take is an error naming it, never silently dropped
    with pytest.raises(ConfigError, match=r"algorithm.mode.*'rloo' has no option 'mode'.*algorithm.mode=null"):
        load_config(None, ["algorithm.estimator=rloo", "algorithm.mode=mean_std_norm"])
    with pytest.raises(ConfigError, match="algorithm.step_weight"):
        load_config(None, ["algorithm.estimator=grpo", "algorithm.step_weight=2"])
    assert load_config(None, ["algorithm.estimator=rloo", "algorithm.mode=null"]).algorithm.mode is None

    # estimator names come from the registry: one registered in Python is valid in the config
    @register("test_scaled_grpo")
    def _scaled(*, scores, step_returns, episode_ids, traj_ids, anchors, epsilon=1e-6):
        return compute_advantages("grpo", scores=scores, episode_ids=episode_ids, epsilon=epsilon)

    try:
        cfg = load_config(None, ["algorithm.estimator=test_scaled_grpo", "algorithm.epsilon=0.001"])
        assert cfg.algorithm.estimator_options() == {"epsilon": 0.001}
        with pytest.raises(ConfigError, match="'test_scaled_grpo' has no option 'mode'"):
            load_config(None, ["algorithm.estimator=test_scaled_grpo", "algorithm.mode=mean_norm"])
    finally:
        ESTIMATORS.pop("test_scaled_grpo")
    with pytest.raises(ConfigError, match="Did you mean 'grpo'"):
        load_config(None, ["algorithm.estimator=grp"])


@pytest.mark.parametrize("old", ["step_advantage_w: 0.5", "enable_similarity: true", "similarity_thresh: 0.8"])
def test_old_option_names_are_unknown_keys(tmp_path, old):
    """The names before the options took the estimators' own (step_weight, similarity_threshold)
    are not read any more: they are refused like any unknown key, with the valid ones."""
    p = tmp_path / "old.yaml"
    p.write_text(f"algorithm: {{estimator: gigpo, {old}}}\n")
    key = old.split(":")[0]
    with pytest.raises(ConfigError, match=rf"unknown config key 'algorithm\.{key}'\. (Did you mean|Valid keys)"):
        load_config(p)


def test_names_are_read_from_the_implementing_code():
    from gigpo.envs.executors import EXECUTORS
    from gigpo.learner.loss import AGG_MODES, KL_TYPES

    for key, names in (("train.loss_agg_mode", AGG_MODES), ("train.kl_type", KL_TYPES), ("env.executor", EXECUTORS)):
        for n in names:
            load_config(None, [f"{key}={n}"] + (["env.step_timeout=0", "env.reset_timeout=0"] if n == "inline" else []))
        with pytest.raises(ConfigError, match=key):
            load_config(None, [f"{key}=nope"])


def test_policy_loss_names_from_the_loss_module_and_gspo_needs_per_sequence_aggregation():
    from gigpo.learner.loss import GSPO_AGG_MODE, POLICY_LOSSES

    for n in POLICY_LOSSES:
        c = load_config(None, [f"train.policy_loss={n}", f"train.loss_agg_mode={GSPO_AGG_MODE}"])
        assert c.train.policy_loss == n
    assert load_config(None, []).train.policy_loss == "ppo"
    with pytest.raises(ConfigError, match=r"train\.policy_loss: 'gpso' is not one of .*Did you mean 'gspo'"):
        load_config(None, ["train.policy_loss=gpso"])
    with pytest.raises(ConfigError, match=r"train\.loss_agg_mode: .*gspo.*seq-mean-token-mean \(got token-mean\)"):
        load_config(None, ["train.policy_loss=gspo"])
    assert "train.policy_loss (str, default 'ppo')" in help_text()


def test_anchor_option_names_the_bad_value_and_the_allowed_ones():
    assert load_config(None, []).algorithm.anchor == "observation"  # the paper's anchor by default
    for value in ("observation", "state", "context-1", "context-2"):
        assert load_config(None, [f"algorithm.anchor={value}"]).algorithm.anchor == value
    for bad in ("obs", "context", "context-0", "history-2"):
        with pytest.raises(
            ConfigError, match=rf"algorithm\.anchor: '{bad}' is not an anchor definition; allowed: observation, state, "
        ):
            load_config(None, [f"algorithm.anchor={bad}"])
    # context-k looks back at most as far as the prompt does
    with pytest.raises(ConfigError, match=r"algorithm\.anchor: 'context-3' .* env\.history_length=2; use context-<k>"):
        load_config(None, ["algorithm.anchor=context-3"])
    with pytest.raises(ConfigError, match="env.history_length=0; use observation or state"):
        load_config(None, ["algorithm.anchor=context-1", "env.history_length=0"])
    assert "algorithm.anchor (str, default 'observation')" in help_text()


def test_observation_prompt_needs_a_state_observation_family_and_no_history():
    from gigpo.train.sft import sft_key

    sok = load_config("configs/sokoban_tiny.yaml", ["rollout.prompt=full"])
    bare = load_config("configs/sokoban_tiny.yaml", [])
    assert bare.rollout.prompt == "observation" and sft_key(bare) != sft_key(sok)  # other prompts, other SFT
    with pytest.raises(ConfigError, match="rollout.prompt: .*alfworld family's observation is not its whole state"):
        load_config("configs/alfworld_tiny.yaml", ["rollout.prompt=observation", "env.history_length=0"])
    with pytest.raises(ConfigError, match=r"rollout.prompt: .*env.history_length=0 \(got 2\)"):
        load_config("configs/sokoban_tiny.yaml", ["rollout.prompt=observation", "env.history_length=2"])
    with pytest.raises(ConfigError, match="rollout.prompt: 'observation' leaves no room for agent.mode=react"):
        load_config(
            "configs/sokoban_tiny.yaml", ["rollout.prompt=observation", "env.history_length=0", "agent.mode=react"]
        )
    with pytest.raises(ConfigError, match="rollout.prompt: 'grid' is not one of"):
        load_config("configs/sokoban_tiny.yaml", ["rollout.prompt=grid"])


def test_graphgpo_options_are_checked_where_they_are_set():
    cfg = load_config(
        None, ["algorithm.estimator=graphgpo", "algorithm.distance_decay=0.5", "algorithm.episode_weight=0"]
    )
    assert cfg.algorithm.estimator_options() == {"distance_decay": 0.5, "episode_weight": 0.0}
    with pytest.raises(ConfigError, match=r"algorithm\.distance_decay: must be in \(0, 1\]"):
        load_config(None, ["algorithm.estimator=graphgpo", "algorithm.distance_decay=1.5"])
    # a GraphGPO option on another estimator names the estimator and how to clear it
    with pytest.raises(ConfigError, match=r"algorithm\.normalize_distance: True is set but estimator 'gigpo'"):
        load_config(None, ["algorithm.estimator=gigpo", "algorithm.normalize_distance=true"])


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["agent.mode=reflection"], "agent.mode: 'reflection' is not one of .* Did you mean 'reflexion'"),
        (["agent.reflexion_trials=0"], "agent.reflexion_trials: must be >= 1, got 0"),
        (["agent.fewshot=-1"], "agent.fewshot: must be >= 0"),
        (["rollout.backend=api"], "rollout.api.model: rollout.backend=api needs the model name .*=gpt-4o"),
        (
            ["rollout.api.endpoint=responses"],
            "rollout.api.endpoint: 'responses' is not one of \\['chat', 'completions'\\]",
        ),
        (["rollout.api.base_url=api.openai.com"], "rollout.api.base_url: must be an http"),
        (
            ["rollout.backend=api", "rollout.api.model=m", "rollout.constrain_actions=true"],
            "rollout.constrain_actions: is not available with rollout.backend=api",
        ),
        (["rollout.jump_forward=true"], "rollout.jump_forward: skips the tokens forced by the action constraint"),
    ],
)
def test_prompting_agent_and_api_settings_are_checked(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


def test_prompting_agents_and_the_api_backend_are_eval_only():
    load_config(None, ["agent.mode=reflexion", "rollout.backend=api", "rollout.api.model=m"])  # fine for eval
    for overrides, key in (
        (["agent.mode=react"], "agent.mode: 'react' is a prompting baseline for `gigpo eval` only"),
        (["rollout.backend=api", "rollout.api.model=m"], "rollout.backend: api returns text without token ids"),
    ):
        with pytest.raises(ConfigError, match=key):
            load_config(None, overrides).check_trainable()
    load_config(None, []).check_trainable()


# --------------------------------------------------------------------------- bounds, reading, help


@pytest.mark.parametrize(
    "override,message",
    [
        ("env.group_size=1000000000", r"env\.group_size: must be <= 1024, got 1000000000"),
        ("env.tasks_per_iter=1000000000", r"env\.tasks_per_iter: must be <= 10000, got 1000000000"),
        ("env.tasks_per_iter=1e9", r"env\.tasks_per_iter: expected int, got str '1e9'"),
        ("rollout.max_response_tokens=1000000000", r"rollout\.max_response_tokens: must be <= 1048576"),
        ("rollout.max_response_tokens=1e9", r"rollout\.max_response_tokens: expected int"),
        ("log.save_every=0", r"log\.save_every: must be >= 1, got 0"),
        ("train.ppo_epochs=0", r"train\.ppo_epochs: must be >= 1, got 0"),
        ("seed=-1", r"seed: must be >= 0, got -1"),
        ("rollout.server.port=70000", r"rollout\.server\.port: must be <= 65535, got 70000"),
        ("algorithm.gamma=1.5", r"algorithm\.gamma: must be in \[0, 1\], got 1\.5"),
        ("train.clip_low=1", r"train\.clip_low: must be in \[0, 1\), got 1\.0"),
        ("train.kl_type=kll", r"train\.kl_type: 'kll' is not one of .* Did you mean 'kl'"),
    ],
)
def test_declared_bounds_refuse_a_value_with_the_key_named(override, message):
    with pytest.raises(ConfigError, match=message) as e:
        load_config(None, [override])
    assert "\n" not in str(e.value)


def test_every_int_option_has_a_lower_and_an_upper_bound():
    from gigpo.train.configtree import _leaves

    for key, tp, f in _leaves(Config):
        if tp is not int:
            continue
        b = f.metadata.get("bounds", {})
        assert {"ge", "gt"} & set(b), f"{key} has no lower bound"
        # train.torch_threads is bounded by the machine's CPUs (Config.check), not by a constant
        assert {"le", "lt"} & set(b) or key == "train.torch_threads", f"{key} has no upper bound"


def test_bounds_apply_to_sections_built_in_python_too():
    from gigpo.train.config import LogConfig, TrainConfig

    with pytest.raises(ConfigError, match=r"log\.save_every: must be >= 1, got 0"):
        LogConfig(save_every=0)
    with pytest.raises(ConfigError, match=r"train\.lr: must be a finite number"):
        TrainConfig(lr=float("nan"))


def test_a_key_written_twice_in_a_yaml_file_is_refused_with_its_lines(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("train: {lr: 0.1}\nseed: 1\ntrain: {iterations: 3}\n")
    with pytest.raises(ConfigError, match=r"train: written twice in .*c\.yaml \(lines 1 and 3\)"):
        load_config(p)
    p.write_text("train:\n  lr: 0.1\n  lr: 0.2\n")  # a nested key is named by its dotted path
    with pytest.raises(ConfigError, match=r"train\.lr: written twice in .*\(lines 2 and 3\)"):
        load_config(p)
    # a YAML merge key is not a duplicate
    p.write_text("train:\n  <<: {lr: 0.1, iterations: 2}\n  lr: 0.2\n")
    assert load_config(p).train.lr == 0.2 and load_config(p).train.iterations == 2


def test_unknown_yaml_key_hint_names_the_dotted_key(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("train: {lrr: 0.1}\nenv: {tasks_per_itr: 4}\n")
    with pytest.raises(ConfigError, match=r"Did you mean 'train\.lr'\?") as e:
        load_config(p)
    assert "'lr'" not in str(e.value)
    p.write_text("env: {tasks_per_itr: 4}\n")
    with pytest.raises(ConfigError, match=r"Did you mean 'env\.tasks_per_iter'\?"):
        load_config(p)


def test_a_config_path_that_is_not_a_yaml_text_file_is_one_line(tmp_path):
    from gigpo.train import configtree

    (tmp_path / "utf16.yaml").write_bytes("seed: 1\n".encode("utf-16"))
    (tmp_path / "bin.yaml").write_bytes(bytes(range(256)))
    cases = [
        (tmp_path, "is a directory"),
        (tmp_path / "utf16.yaml", "is not UTF-8 text"),
        (tmp_path / "bin.yaml", "is not UTF-8 text"),
        (tmp_path / "missing.yaml", "does not exist"),
    ]
    if Path("/dev/zero").exists():
        cases.append((Path("/dev/zero"), f"is larger than {configtree.MAX_CONFIG_BYTES // 2**20} MB"))
    for path, message in cases:
        with pytest.raises(ConfigError, match=message) as e:
            load_config(path)
        assert "\n" not in str(e.value)


def test_help_is_in_sections_wrapped_to_100_columns():
    from gigpo.train.configtree import section_names

    text = help_text()
    assert max(len(line) for line in text.splitlines()) <= 100
    names = section_names(Config)
    assert names[0] == "top" and {"env", "algorithm", "rollout", "rollout.server", "train", "log"} <= set(names)
    for name in names:
        assert any(line.startswith(f"{name}:") for line in text.splitlines()), name
    env = help_text("env")
    assert "env.group_size (int, default 8, [1, 1024])" in env and "train.lr" not in env
    rollout = help_text("rollout")  # a section shows the sections under it
    assert "rollout.top_p" in rollout and "rollout.server.urls" in rollout and "env.family" not in rollout
    assert "seed (int, default 0" in help_text("top") and "env.family" not in help_text("top")
    with pytest.raises(ConfigError, match=r"no config section 'rollot'.*Did you mean 'rollout'"):
        help_text("rollot")


def test_help_holds_no_machine_measurements():
    text = " ".join(help_text().split())
    for phrase in ("2-core", "GB per iteration", "~2x", "~40x", "1.6-1.9x", "fastest on a shared"):
        assert phrase not in text


def test_estimator_options_are_declared_once_and_listed_under_each_estimator():
    import dataclasses

    from gigpo.advantages import ESTIMATORS, estimator_options
    from gigpo.train.config import OPTION, AlgorithmConfig

    tagged = tuple(f.name for f in dataclasses.fields(AlgorithmConfig) if OPTION in f.metadata["tags"])
    assert AlgorithmConfig.OPTIONS == tagged and "step_weight" in tagged and "estimator" not in tagged
    # every option a registered estimator takes is one of the tagged fields or algorithm.options.<name>
    text = help_text("algorithm")
    lines = {line.split(":")[0].strip(): line for line in text.splitlines() if line.startswith("    ")}
    for name in ESTIMATORS:
        block = lines[name]
        i = text.splitlines().index(block)
        rest = text.splitlines()[i + 1 :]
        while rest and rest[0].startswith(" " * 22):  # the estimator's wrapped lines
            block += rest.pop(0)
        for opt in estimator_options(name):
            shown = opt if opt in AlgorithmConfig.OPTIONS else f"options.{opt}"
            assert f"{shown}=" in block, (name, opt)
        for opt in set(AlgorithmConfig.OPTIONS) - set(estimator_options(name)):
            assert f" {opt}=" not in block, (name, opt)


# --------------------------------------------------------------------------- checks of the machine and the launch


def test_check_run_refuses_one_process_features_under_torchrun():
    from gigpo.train.checks import check_launch, check_run

    server = load_config("configs/sokoban_tiny.yaml", ["rollout.backend=server"])
    with pytest.raises(ConfigError, match=r"rollout\.backend: server runs in one trainer process only, but 2 were"):
        check_run(server, world_size=2)
    ppo = load_config(None, ["algorithm.estimator=ppo"])
    with pytest.raises(ConfigError, match=r"algorithm\.estimator: 'ppo' trains a critic.*without torchrun"):
        check_run(ppo, world_size=2)
    for cfg in (server, ppo):
        check_launch(cfg, 1)  # one process: fine
    check_run(load_config("configs/sokoban_tiny.yaml", []), world_size=2)  # builds and resets one env


def test_check_run_checks_the_model_device_env_and_trainability():
    from gigpo.train.checks import check_run

    base = "configs/sokoban_tiny.yaml"
    for extra, message in (
        (["model.name_or_path=/nonexistent/model"], r"model\.name_or_path: model directory .* does not exist"),
        (["model.device=gpu0"], r"model\.device: 'gpu0' is not a torch device"),
        (["env.kwargs.nonsense=1"], r"env\.kwargs: a sokoban env cannot be built"),
        (["agent.mode=react", "rollout.prompt=full", "env.history_length=2"], r"agent\.mode: 'react' is a prompting"),
    ):
        with pytest.raises(ConfigError, match=message):
            check_run(load_config(base, extra))
    # eval: prompting agents are fine
    check_run(load_config(base, ["agent.mode=react", "rollout.prompt=full", "env.history_length=2"]), train=False)


# --------------------------------------------------------------------------- task counts, devices, names


@pytest.fixture
def echo_family(monkeypatch):
    """The test plug-in family echo (100 tasks a split; more are silently not made), registered
    for the test only."""
    from gigpo.envs import spec as spec_mod

    saved = spec_mod._state()
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent / "data" / "plugin_family"))
    yield [
        "env.family=echo",
        f"env.family_module={Path(__file__).resolve().parent / 'data/plugin_family/gigpo_echo_family'}",
    ]
    spec_mod._restore(saved)
    sys.modules.pop("gigpo_echo_family", None)


def test_check_run_counts_the_run_tasks_against_the_split(echo_family):
    """Each count the run draws is checked against what the family makes, naming the keys and the
    count there is: more eval tasks than the eval split has (refused by webshop, silently cut by a
    plug-in), eval plus validation tasks, too many train tasks, validation taking the whole split."""
    from gigpo.train.checks import check_run

    shop, quiet = "configs/webshop_tiny.yaml", ["guard.val_every=0"]
    for extra, message in (
        (["env.eval_tasks=600", *quiet], r"env\.eval_tasks: 600 eval tasks asked for, but webshop has 500 in its eval"),
        (
            ["env.eval_tasks=480", "guard.val_every=1", "guard.val_tasks=32"],
            r"env\.eval_tasks \+ guard\.val_tasks: .* 512 eval-split tasks, but webshop has 500; lower",
        ),
        (
            ["env.eval_tasks=0", "guard.val_every=1", "guard.val_tasks=500"],
            r"guard\.val_tasks: env\.eval_tasks=0 .* webshop has 500 eval-split task\(s\), which leaves none",
        ),
        (["env.train_tasks=5000", *quiet], r"env\.train_tasks: 5000 train tasks asked for, but webshop has 4500"),
    ):
        with pytest.raises(ConfigError, match=message):
            check_run(load_config(shop, extra))
    # gigpo eval draws no validation tasks: the same eval count is fine there, too many is not
    check_run(load_config(shop, ["env.eval_tasks=480", "guard.val_every=1", "guard.val_tasks=32"]), train=False)
    with pytest.raises(ConfigError, match=r"env\.eval_tasks: 600 eval tasks asked for"):
        check_run(load_config(shop, ["env.eval_tasks=600"]), train=False)
    # a family that makes fewer than asked without a word: 150 asked, 100 made
    echo = [*echo_family, "sft.enabled=false", "env.history_length=1", "guard.val_every=0"]
    with pytest.raises(ConfigError, match=r"env\.eval_tasks: 150 eval tasks asked for, but echo has 100 in its eval"):
        check_run(load_config(None, [*echo, "env.eval_tasks=150"]))
    check_run(load_config(None, [*echo, "env.eval_tasks=100"]))


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ("{dim: 2}", r"sokoban dim must be at least 3x3"),
        ("{dim: [6]}", r"sokoban dim must be an int or \[height, width\]"),
        ("{num_boxes: 99}", r"sokoban num_boxes must be an int from 1 to 15 in a 6x6 room"),
        ("{num_boxes: 12}", r"sokoban task options dim=6, num_boxes=12: no 6x6 room with 12 boxes"),
        ("{search_depth: 0}", r"sokoban search_depth must be an int >= 1"),
    ],
)
def test_sokoban_task_options_it_cannot_generate_are_config_errors(kwargs, message):
    from gigpo.envs import make_tasks
    from gigpo.train.checks import check_run

    cfg = load_config("configs/sokoban_tiny.yaml", [f"env.task_kwargs={kwargs}"])
    with pytest.raises(ValueError, match=message):  # the family's own call: a ValueError
        make_tasks("sokoban", "train", n=2, **cfg.env.task_kwargs)
    with pytest.raises(ConfigError, match=r"env\.task_kwargs: sokoban train tasks cannot be made with .*" + message):
        check_run(cfg)


@pytest.mark.parametrize(
    "extra,message",
    [
        ("env.task_kwargs.num_products=3", r"num_products must be >= 10, got 3"),
        ("env.task_kwargs.num_products=many", r"webshop num_products must be an int, got 'many'"),
        ("env.task_kwargs.data_dir=/nonexistent/webshop", r"WebShop data not found in /nonexistent/webshop"),
    ],
)
def test_webshop_task_options_it_rejects_are_config_errors(extra, message):
    from gigpo.train.checks import check_run

    with pytest.raises(ConfigError, match=r"env\.task_kwargs: webshop train tasks cannot be made with .*" + message):
        check_run(load_config("configs/webshop_tiny.yaml", [extra]))


@pytest.mark.parametrize("device", ["xpu", "meta", "xla:0"])
def test_model_device_is_one_gigpo_runs_on(device):
    from gigpo.train.checks import check_run

    cfg = load_config("configs/sokoban_tiny.yaml", [f"model.device={device}"])
    with pytest.raises(ConfigError, match=rf"model\.device: '{device}' is not a .*use model\.device=auto, cpu, cuda"):
        check_run(cfg)
    with pytest.raises(ConfigError, match=r"model\.device"):
        check_run(cfg, train=False)
    check_run(load_config("configs/sokoban_tiny.yaml", ["model.device=cpu"]))


def test_a_run_name_is_bounded_so_the_set_aside_suffix_fits():
    cfg = load_config(None, ["name=" + "n" * 200])
    assert len(cfg.name) == 200
    with pytest.raises(ConfigError, match=r"name: must be at most 200 bytes .* got 300"):
        load_config(None, ["name=" + "n" * 300])
    with pytest.raises(ConfigError, match=r"name: must be at most 200 bytes .* got 202"):
        load_config(None, ["name=" + "é" * 101])  # bytes, not characters

"""The factories of a run's pieces that only read its config: model-loading options, the env
groups, the agent, the task pools. Leaf of the training side: the SFT, ``gigpo eval`` and the
trainer's wiring (``gigpo.train.build``) all use them.
"""

from __future__ import annotations

from gigpo.train.config import Config, EnvConfig


def load_kwargs(cfg: Config, device: str | None = None) -> dict:
    """The keyword arguments of ``gigpo.policy.load_policy`` that ``cfg.model`` and the seed set
    (``device`` overrides ``cfg.model.device``: the trainer's rank decides it)."""
    from gigpo.policy.tiny import tiny_config

    m, e = cfg.model, cfg.env
    tiny = tiny_config(e.family, e.task_kwargs, e.kwargs)  # the `tiny` build of this run's family
    return dict(device=device or m.device, dtype=m.dtype, cache_dir=m.cache_dir or None, seed=cfg.seed, tiny=tiny)


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
        jump_forward=cfg.rollout.jump_forward,
        repeat_task=cfg.rollout.repeat_task,
        prompt_form=cfg.rollout.prompt,
    )


def task_pools(cfg: Config) -> tuple[list, list, list]:
    """(train, held-out eval, validation) tasks.

    Validation tasks (best-model selection) come after the held-out ones in the eval split's fixed
    order, so the two sets are disjoint and the held-out eval stays unbiased.
    """
    from gigpo.envs import make_tasks

    e, g = cfg.env, cfg.guard
    train = make_tasks(e.family, "train", n=e.train_tasks or None, seed=e.task_seed, **e.task_kwargs)
    n_val = g.val_tasks if g.val_every else 0
    if e.eval_tasks:
        pool = make_tasks(e.family, "eval", n=e.eval_tasks + n_val, seed=e.task_seed, **e.task_kwargs)
        return train, pool[: e.eval_tasks], pool[e.eval_tasks :]
    pool = make_tasks(e.family, "eval", n=None, seed=e.task_seed, **e.task_kwargs)
    return (train, pool[:-n_val], pool[-n_val:]) if n_val else (train, pool, [])

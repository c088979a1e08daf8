"""``gigpo eval``: one rollout per held-out task for a model, wired from a config as the trainer
does; with ``agent.mode=react|reflexion`` the prompting baselines (``gigpo.rollout.prompting``),
on any backend, ``rollout.backend=api`` (text-only, ``gigpo.policy.api``) included."""

from __future__ import annotations


def _load_tokenizer(cfg):
    """``model.name_or_path``'s tokenizer alone (``rollout.backend=api``: it measures prompts)."""
    from transformers import AutoTokenizer

    from gigpo.policy.load import resolve_path
    from gigpo.train.factories import load_kwargs

    path = resolve_path(cfg.model.name_or_path, cfg.model.cache_dir or None, tiny=load_kwargs(cfg)["tiny"])
    return AutoTokenizer.from_pretrained(path, local_files_only=True)


def api_generator(cfg):
    """The ``APIGenerator`` of ``rollout.api``."""
    from gigpo.policy.api import APIGenerator

    a = cfg.rollout.api
    return APIGenerator(
        a.base_url,
        a.model,
        endpoint=a.endpoint,
        key_env=a.key_env,
        timeout_s=a.timeout_s,
        concurrency=a.concurrency,
        max_retries=a.max_retries,
    )


def fewshot_examples(cfg, agent) -> list:
    """The ReAct examples of ``cfg``: the expert's won episodes on the first ``agent.fewshot_pool``
    train-split tasks (``env.task_seed``); none when ``agent.fewshot`` is 0."""
    from gigpo.envs import make_tasks
    from gigpo.rollout.prompting import collect_fewshot

    a, e = cfg.agent, cfg.env
    if a.fewshot == 0 or a.fewshot_pool == 0:
        return []
    pool = make_tasks(e.family, "train", n=a.fewshot_pool, seed=e.task_seed, **e.task_kwargs)
    return collect_fewshot(e.family, pool, agent, max_steps=e.max_steps, env_kwargs=e.kwargs, seed=cfg.seed)


def evaluate_model(cfg, make_generator=None, *, checked: bool = False) -> dict:
    """Rollout metrics of ``cfg.model`` on ``cfg.env.eval_tasks`` eval-split tasks at the eval temperature.

    ``make_generator``: ``(model, tokenizer) -> Generator`` (default ``HFGenerator``, or with
    ``rollout.backend=server`` a ``ServerGenerator``), as ``Trainer``'s. With
    ``rollout.backend=api`` no model is loaded: only its tokenizer, which measures the prompts.
    ``agent.mode=react|reflexion``: ``prompting_eval``'s metrics (docs/metrics.md).
    """
    from gigpo.envs import make_tasks
    from gigpo.policy.generate import HFGenerator
    from gigpo.policy.load import load_policy
    from gigpo.rollout import eval_rollout, prompting_eval
    from gigpo.train.factories import build_agent, grouped_envs, load_kwargs
    from gigpo.train import seeds
    from gigpo.train.checks import check_run
    from gigpo.train.collect import sampling_params
    from gigpo.train.evaluator import won_per_task

    if not checked:
        check_run(cfg, train=False)  # model path, device, env: before anything loads
    api = cfg.rollout.backend == "api" and make_generator is None
    if api:
        model, tok = None, _load_tokenizer(cfg)
    else:
        model, tok = load_policy(cfg.model.name_or_path, **load_kwargs(cfg))
    e = cfg.env
    tasks = make_tasks(e.family, "eval", n=e.eval_tasks or None, seed=e.task_seed, **e.task_kwargs)
    agent = build_agent(cfg, tok)
    # The sampling seed of the trainer's held-out eval: a run's model scores here as it did at the
    # end of its run (the same tasks and the same random numbers).
    params = sampling_params(cfg, cfg.rollout.eval_temperature, seeds.iteration_seed(cfg.seed, 0, seeds.EVAL))
    mode = cfg.agent.mode
    examples = fewshot_examples(cfg, agent) if mode != "policy" else []
    server = None
    if api:
        gen = api_generator(cfg)
    elif make_generator is None and cfg.rollout.backend == "server":
        import tempfile
        from pathlib import Path

        from gigpo.train.serving import ServerBackend

        # The servers must already hold the model's weights (the probe compares log-probs);
        # without URLs a local vLLM server is started on them.
        work = Path(tempfile.mkdtemp(prefix="gigpo-eval-serving-"))
        server = ServerBackend(cfg, model, tok, work, sync=False)
        gen = server.generator
    else:
        gen = (make_generator or HFGenerator)(model, tok)
    try:
        with grouped_envs(e, 1) as envs:
            if mode == "policy" and not api:
                batch, m = eval_rollout(envs, tasks, gen, tok, agent, params)
                m["won_per_task"] = won_per_task(batch, tasks)  # as a run's held-out eval logs it
            else:
                m = prompting_eval(
                    envs,
                    tasks,
                    gen,
                    tok,
                    agent,
                    params,
                    mode=mode,
                    examples=examples,
                    fewshot=cfg.agent.fewshot,
                    trials=cfg.agent.reflexion_trials if mode == "reflexion" else 1,
                    reflection_tokens=cfg.agent.reflection_tokens,
                ).metrics
    finally:
        if api:
            gen.close()
        if server is not None:
            server.close()
            import shutil

            shutil.rmtree(server.work_dir, ignore_errors=True)
    return m

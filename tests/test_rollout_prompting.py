"""``gigpo.rollout.prompting`` and ``gigpo eval agent.mode=react|reflexion``: few-shot examples
from the env expert, ReAct prompts, Reflexion's trials and reflections, per-trial metrics, on
every backend (``tiny`` in process, the fake OpenAI-compatible server as ``server`` and as
``api``). Small: two search tasks of three steps."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gigpo.agent.prompting import parse_react, reflection_part
from gigpo.envs import make_tasks
from gigpo.policy import HFGenerator, SamplingParams
from gigpo.rollout.prompting import collect_fewshot, prompting_eval
from gigpo.train.factories import build_agent, grouped_envs
from gigpo.train.config import load_config
from gigpo.train.evaluate import evaluate_model, fewshot_examples
from small_runs import SEARCH_TINY, SMALL

EVAL = [*SMALL, "env.eval_tasks=2", "agent.fewshot_pool=4"]


def _cfg(*extra):
    return load_config(SEARCH_TINY, [*EVAL, *extra])


@pytest.mark.parametrize("family", ["search", "sokoban"])
def test_fewshot_examples_are_the_experts_won_episodes_and_repeat(family, tiny):
    agent = build_agent(load_config(None, [f"env.family={family}"]), tiny[1])
    tasks = make_tasks(family, "train", n=3, seed=0)
    ex = collect_fewshot(family, tasks, agent, max_steps=30, seed=0)
    assert ex and ex == collect_fewshot(family, tasks, agent, max_steps=30, seed=0)
    assert {e.task_type for e in ex} <= {t.task_type for t in tasks}
    for e in ex:
        for _obs, response in e.steps:
            step = parse_react(agent.spec, response)
            assert step.thought and step.action.valid, response
    # Replaying the actions wins the task: the examples are whole solved episodes.
    from gigpo.envs import make_env

    env = make_env(family)
    try:
        task = next(t for t in tasks if (env.reset(t)[1].get("instruction") or env.reset(t)[0]) == ex[0].task)
        env.reset(task)
        for _obs, response in ex[0].steps:
            _, _, done, info = env.step(parse_react(agent.spec, response).action.action)
        assert done and info["won"]
    finally:
        env.close()


def _run(tiny, cfg, mode, trials=1):
    model, tok, _ = tiny
    agent = build_agent(cfg, tok)
    tasks = make_tasks("search", "eval", n=2, seed=cfg.env.task_seed)
    params = SamplingParams(temperature=0.4, max_new_tokens=cfg.rollout.max_response_tokens, seed=0)
    examples = fewshot_examples(cfg, agent)
    with grouped_envs(cfg.env, 1) as envs:
        return (
            agent,
            examples,
            prompting_eval(
                envs,
                tasks,
                HFGenerator(model, tok),
                tok,
                agent,
                params,
                mode=mode,
                examples=examples,
                fewshot=cfg.agent.fewshot,
                trials=trials,
                reflection_tokens=cfg.agent.reflection_tokens,
            ),
        )


def test_react_prompts_carry_expert_examples_and_responses_parse(tiny):
    cfg = _cfg("agent.mode=react")
    agent, examples, res = _run(tiny, cfg, "react")
    tok = tiny[1]
    b = res.batch
    assert b.num_trajectories == 2 and len(res.trials) == 1
    for r in range(b.num_rows):
        prompt = tok.decode(b.prompt_ids[r])
        shown = [e for e in examples if e.task in prompt]
        assert len(shown) == cfg.agent.fewshot  # two whole examples, with their thought-then-action steps
        assert shown[0].steps[0][1] in prompt
        assert prompt.index(shown[0].task) < prompt.index(f"Question: {b.meta['traj_task_text'][b.traj_id[r]]}")
        # The response's action is the thought/action parse of its text.
        assert parse_react(agent.spec, b.response_text[r]).action.action == b.action[r]
    assert res.metrics["prompt_preamble_dropped"] == 0.0
    assert "reflexion/success@1" not in res.metrics


def test_reflexion_retries_failed_tasks_with_their_reflections(tiny):
    cfg = _cfg("agent.mode=reflexion", "agent.reflection_tokens=16")
    _, _, res = _run(tiny, cfg, "reflexion", trials=3)
    tok = tiny[1]
    first = res.trials[0]
    failed = {str(first.traj_task_id[t]) for t in range(first.num_trajectories) if not first.traj_won[t]}
    assert failed, "tiny without training should fail a search task"
    ids = [str(x) for x in first.traj_task_id]
    for later, trial in ((res.trials[1], 2), *(((res.trials[2], 3),) if len(res.trials) > 2 else ())):
        for t in range(later.num_trajectories):
            i = ids.index(str(later.traj_task_id[t]))
            prompt = tok.decode(later.prompt_ids[np.flatnonzero(later.traj_id == t)[0]])
            for k in range(trial - 1):  # every earlier reflection of this task, in order
                assert reflection_part(k + 1, res.reflections[i][k]) in prompt
    # The first trial's prompts carry no reflection.
    assert "Your reflection" not in tok.decode(first.prompt_ids[0])
    m = res.metrics
    won = [s for s in (m["reflexion/success@1"], m["reflexion/success@2"], m["reflexion/success@3"])]
    assert won == sorted(won) and m["success"] == won[-1]
    assert m["reflexion/trials"] == sum(b.num_trajectories for b in res.trials) / 2
    assert m["num_trajectories"] == 2  # one counted trajectory per task


def test_gigpo_eval_prints_per_trial_success(capsys):
    from gigpo.cli import main

    args = ["eval", "--config", str(SEARCH_TINY), *EVAL, "agent.mode=reflexion", "agent.reflexion_trials=2"]
    assert main(args) == 0
    m = json.loads(capsys.readouterr().out)
    assert {"reflexion/success@1", "reflexion/success@2", "reflexion/trials", "success"} <= set(m)
    assert 1.0 <= m["reflexion/trials"] <= 2.0


def test_reflexion_against_an_inference_server(server):
    cfg = _cfg(
        "agent.mode=reflexion",
        "agent.reflexion_trials=2",
        "rollout.backend=server",
        f"rollout.server.urls=[{server.url}]",
    )
    n0 = server.state.completions
    m = evaluate_model(cfg)
    assert m["num_trajectories"] == 2 and "reflexion/success@2" in m
    assert server.state.completions - n0 >= 1 + 2  # the probe, then at least a step per task


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_react_against_an_openai_compatible_api(server, monkeypatch, endpoint):
    """``rollout.backend=api``: text in, text out, the key from $OPENAI_API_KEY; no model loaded."""
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    server.state.key = "test-key"
    cfg = _cfg(
        "agent.mode=react",
        "rollout.backend=api",
        f"rollout.api.base_url={server.url}/v1",
        "rollout.api.model=policy",
        f"rollout.api.endpoint={endpoint}",
    )
    m = evaluate_model(cfg)
    assert m["num_trajectories"] == 2 and 0 <= m["success"] <= 1
    assert server.state.auth == "Bearer test-key"
    sent = server.state.prompts
    assert sent and all("A solved example" in p for p in sent)
    # chat: the user message (the server applies the template); completions: the templated text.
    assert all(p.startswith("You are an expert agent") == (endpoint == "chat") for p in sent)

"""Rollout loop with the real ``tiny`` model on each env family: StepBatch contract, anchors,
log-probs, only running envs generated for, truncation counters, JSONL, expert demos, eval."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from gigpo.advantages import exact_step_groups, state_mixing, step_anchors
from gigpo.agent import Agent
from gigpo.envs import family_module, make_env, make_tasks
from gigpo.envs.manager import GroupedEnvs
from gigpo.policy import HFGenerator, SamplingParams, load_policy, token_logprobs
from gigpo.policy.base import Generation
from gigpo.rollout import collect_expert_demos, eval_rollout, rollout, rollout_metrics, write_trajectories_jsonl

torch.set_num_threads(1)
FAMILIES = ["alfworld", "webshop", "search"]
MAX_STEPS = {"alfworld": 3, "webshop": 3, "search": 3}


def _need(family):
    mod = family_module(family)
    if not (hasattr(mod, "make_env") and hasattr(mod, "make_tasks")):
        pytest.skip(f"env family {family!r} has not landed yet (no make_env/make_tasks)")


@pytest.fixture(scope="module")
def tiny():
    return load_policy("tiny", device="cpu")


class CountingGenerator:
    """Delegates to the real generator and records each call's batch size."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []

    def generate(self, prompts, params):
        self.calls.append(len(prompts))
        return self.inner.generate(prompts, params)


def _run(family, tiny, *, B=2, n=2, max_prompt_tokens=2048, max_new_tokens=12, seed=0):
    _need(family)
    model, tok = tiny
    tasks = make_tasks(family, "train", n=B, seed=seed)
    gen = CountingGenerator(HFGenerator(model, tok))
    agent = Agent(family, tok, max_prompt_tokens=max_prompt_tokens)
    with GroupedEnvs(family, group_size=n, max_steps=MAX_STEPS[family]) as envs:
        batch = rollout(
            envs, tasks, gen, tok, agent, SamplingParams(temperature=1.0, max_new_tokens=max_new_tokens, seed=seed)
        )
        results = envs.results()
    return batch, tasks, gen, agent, results


@pytest.fixture(scope="module", params=FAMILIES)
def family_run(request, tiny):
    return (request.param, *_run(request.param, tiny))


def _check_contract(batch, tasks, results, n):
    T = len(tasks) * n
    assert batch.num_trajectories == T and batch.num_rows > 0
    assert set(batch.traj_id.tolist()) == set(range(T))  # every slot has rows; traj id = slot
    np.testing.assert_array_equal(batch.episode_id, batch.traj_id // n)  # a group shares its episode id
    np.testing.assert_array_equal(batch.traj_episode_id, np.arange(T) // n)
    # contiguous trajectories, steps 0..len-1 in time order
    for t in range(T):
        idx = np.flatnonzero(batch.traj_id == t)
        assert np.all(np.diff(idx) == 1)
        np.testing.assert_array_equal(batch.step[idx], np.arange(len(idx)))
        assert batch.traj_length[t] == len(idx) == results[t].steps
        assert batch.done[idx[-1]] or batch.traj_truncated[t]
        assert not batch.done[idx[:-1]].any()
    assert list(batch.traj_task_id) == [tasks[s // n].task_id for s in range(T)]
    for r, p in zip(batch.response_ids, batch.logprobs):
        assert len(r) == len(p) > 0 and r.dtype == np.int32 and p.dtype == np.float32
    assert np.all(np.isfinite(np.concatenate(batch.logprobs)))


def _check_logprobs(batch, model, tok):
    with torch.no_grad():
        lp, _, _ = token_logprobs(model, batch.prompt_ids, batch.response_ids, pad_token_id=tok.pad_token_id)
    for i, ref in enumerate(batch.logprobs):
        np.testing.assert_allclose(lp[i, : len(ref)].numpy(), ref, atol=1e-4)


def test_rows_ids_and_order_follow_the_stepbatch_contract(family_run):
    family, batch, tasks, gen, agent, results = family_run
    _check_contract(batch, tasks, results, n=2)


def test_finished_envs_are_not_sent_to_the_model(family_run):
    _, batch, _, gen, _, _ = family_run
    assert sum(gen.calls) == batch.num_rows  # one generated response per recorded step, no more
    per_step = np.bincount(batch.step)
    assert gen.calls == per_step.tolist()  # step t generated only for the envs still running at t
    assert batch.meta["prompts"] == batch.num_rows


def test_anchors_and_observations_replay_on_a_fresh_env(family_run):
    """Re-running each trajectory's actions on a fresh env gives the same anchors/observations."""
    family, batch, tasks, _, _, _ = family_run
    env = make_env(family)
    try:
        for t in range(batch.num_trajectories):
            idx = np.flatnonzero(batch.traj_id == t)
            obs, info = env.reset(tasks[t // 2])
            for i in idx:
                assert batch.anchor[i] == info.get("anchor", obs)
                assert batch.state_anchor[i] == info["state_anchor"]  # every built-in family gives one
                obs, reward, done, info = env.step(batch.action[i])
                assert batch.observation[i] == obs and batch.reward[i] == pytest.approx(reward)
                # the manager also ends a slot at its max_steps (done + truncated)
                assert batch.done[i] == (done or (i == idx[-1] and batch.traj_truncated[t]))
    finally:
        env.close()
    # the n rollouts of a group start from the same state -> the same step-0 anchor
    first = batch.anchor[batch.step == 0]
    assert all(first[2 * g] == first[2 * g + 1] for g in range(len(first) // 2))


class ScriptedGenerator:
    """Answers every prompt of step t with the t-th scripted action, as exact token ids (a stand-in
    for a policy that acts like the env's expert; the envs are real)."""

    def __init__(self, tok, actions):
        self.tok, self.actions, self.t = tok, actions, 0

    def generate(self, prompts, params):
        text = f"<think>scripted</think><action>{self.actions[self.t]}</action>"
        self.t += 1
        ids = np.asarray(self.tok.encode(text, add_special_tokens=False), dtype=np.int32)
        return [Generation(ids, np.zeros(len(ids), np.float32), True) for _ in prompts]


def test_alfworld_rollout_state_anchors_differ_where_the_observation_is_the_same(tiny):
    """docs/algorithm.md#anchor-definitions: the expert's walk to the target receptacle, then back
    to it holding the object, through the rollout loop: the observation anchors of the two arrivals
    are equal, their state anchors are not; ``state`` splits the observation's step group."""
    _, tok = tiny
    task = make_tasks("alfworld", "train", n=1, seed=0)[0]
    env = make_env("alfworld")
    obs, info = env.reset(task)
    seen, actions = {obs: info["state_anchor"]}, []
    while True:  # the expert's actions up to its first return to a text seen in another state
        actions.append(env.expert_action())
        obs, _, done, info = env.step(actions[-1])
        assert not done and len(actions) < 30
        if seen.get(obs, info["state_anchor"]) != info["state_anchor"]:
            break
        seen.setdefault(obs, info["state_anchor"])
    env.close()
    actions.append("look")  # one more step, so the return is a row of the batch
    agent = Agent("alfworld", tok)
    with GroupedEnvs("alfworld", group_size=2, max_steps=len(actions)) as envs:
        batch = rollout(envs, [task], ScriptedGenerator(tok, actions), tok, agent, SamplingParams())
    assert list(batch.action[batch.traj_id == 0]) == actions and batch.state_anchor is not None
    same = [
        (i, j)
        for i in range(batch.num_rows)
        for j in range(i)
        if batch.anchor[i] == batch.anchor[j] and batch.state_anchor[i] != batch.state_anchor[j]
    ]
    assert same and any("holds(" in batch.state_anchor[i] for i, j in same)
    kw = dict(episode_ids=batch.episode_id, traj_ids=batch.traj_id, anchors=batch.anchor, actions=batch.action)
    by_obs = exact_step_groups(batch.episode_id, batch.anchor)
    by_state = exact_step_groups(batch.episode_id, step_anchors("state", state_anchors=batch.state_anchor, **kw))
    i, j = same[0]
    assert by_obs[i] == by_obs[j] and by_state[i] != by_state[j]
    assert state_mixing(batch.episode_id, batch.anchor, batch.state_anchor)["mixed_groups"] >= 1
    # the two rollouts of the group act alike, so every row has a same-state peer in the other one
    # ("look" changes no physical fact: the first two rows of a rollout share their state)
    assert (np.bincount(by_state)[by_state] >= 2).all() and by_state[0] == by_state[1]
    # context-2 also separates the arrivals: their histories differ
    by_ctx = exact_step_groups(batch.episode_id, step_anchors("context-2", **kw))
    assert by_ctx[i] != by_ctx[j]


def test_actions_and_validity_are_the_agent_parse_of_the_decoded_response(family_run):
    _, batch, _, _, agent, _ = family_run
    for text, ids, action, valid in zip(batch.response_text, batch.response_ids, batch.action, batch.valid):
        assert text == agent.tokenizer.decode(ids.tolist(), skip_special_tokens=True)
        p = agent.parse(text)
        assert (p.action, p.valid) == (action, valid)


def test_logprobs_match_a_recomputation_at_temperature_one(family_run, tiny):
    _check_logprobs(family_run[1], *tiny)


def test_prompts_are_the_agent_prompts_of_the_recorded_history(family_run):
    family, batch, tasks, _, agent, _ = family_run
    env = make_env(family)
    try:
        idx = np.flatnonzero(batch.traj_id == 1)
        obs, info = env.reset(tasks[0])
        hist = []
        for i in idx:
            p = agent.build_prompt(
                info.get("instruction") or obs,
                obs,
                hist,
                step=len(hist),
                admissible_actions=info.get("admissible_actions"),
            )
            assert batch.prompt_ids[i].tolist() == p.ids
            hist.append((obs, batch.action[i]))
            obs, _, _, info = env.step(batch.action[i])
    finally:
        env.close()


def test_prompt_overflow_is_counted_and_bounded(tiny):
    batch, *_ = _run("search", tiny, B=1, n=2, max_prompt_tokens=120)
    assert max(len(p) for p in batch.prompt_ids) <= 120
    m = batch.meta
    assert m["observation_truncated"] + m["prompt_hard_truncated"] > 0
    assert rollout_metrics(batch)["prompt_observation_truncated"] > 0


def test_rollout_max_steps_cuts_and_marks_truncated(tiny):
    _need("search")
    model, tok = tiny
    tasks = make_tasks("search", "train", n=1)
    with GroupedEnvs("search", group_size=2, max_steps=4) as envs:
        batch = rollout(
            envs,
            tasks,
            HFGenerator(model, tok),
            tok,
            Agent("search", tok),
            SamplingParams(max_new_tokens=4, seed=1),
            max_steps=1,
        )
    assert batch.step.max() == 0
    assert np.array_equal(batch.traj_truncated, ~batch.done)


def test_same_seed_gives_the_same_batch(tiny):
    a, *_ = _run("search", tiny, B=1, n=2, seed=3)
    b, *_ = _run("search", tiny, B=1, n=2, seed=3)
    assert [x.tolist() for x in a.response_ids] == [x.tolist() for x in b.response_ids]


def test_jsonl_has_one_line_per_step_with_advantages(family_run, tmp_path, tiny):
    _, batch, _, _, _, _ = family_run
    N = batch.num_rows
    adv = {"A_E": np.arange(N, dtype=np.float32), "A_S": -np.arange(N), "A": np.ones(N), "step_group": np.arange(N) % 3}
    path = tmp_path / "sub" / "traj.jsonl"
    assert write_trajectories_jsonl(batch, path, tokenizer=tiny[1], advantages=adv) == N
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert len(lines) == N
    for i, rec in enumerate(lines):
        assert (rec["traj_id"], rec["step"], rec["action"]) == (
            int(batch.traj_id[i]),
            int(batch.step[i]),
            batch.action[i],
        )
        assert rec["anchor"] == batch.anchor[i] and rec["A_E"] == float(i) and rec["step_group"] == i % 3
        assert rec["prompt"] == tiny[1].decode(batch.prompt_ids[i].tolist())
        # every built-in family gives a state key; the line carries it for the trajectory viewer
        assert rec["state_anchor"] == batch.state_anchor[i] and rec["state_anchor"]
    with pytest.raises(ValueError, match="one value per row"):
        write_trajectories_jsonl(batch, path, advantages={"A": np.zeros(N + 1)})


def test_eval_rollout_returns_metrics_one_rollout_per_task(tiny):
    _need("search")
    model, tok = tiny
    tasks = make_tasks("search", "eval", n=3)
    with GroupedEnvs("search", group_size=1, max_steps=3) as envs:
        batch, m = eval_rollout(envs, tasks, HFGenerator(model, tok), tok, Agent("search", tok), max_new_tokens=8)
    assert batch.num_trajectories == 3
    assert m["invalid_action_rate"] == pytest.approx(1 - batch.valid.mean())
    assert m["episode_length"] == pytest.approx(batch.traj_length.mean())
    assert m["tool_calls_per_question"] == pytest.approx(np.mean(batch.meta["traj_tool_calls"]))
    for tt in set(batch.traj_task_type):
        assert f"success/{tt}" in m
    with GroupedEnvs("search", group_size=2, max_steps=3) as envs:
        with pytest.raises(ValueError, match="group_size=1"):
            eval_rollout(envs, tasks, HFGenerator(model, tok), tok, Agent("search", tok))


@pytest.mark.parametrize("family", FAMILIES)
def test_expert_demos_use_the_rollout_prompt_format(family, tiny):
    _need(family)
    _, tok = tiny
    agent = Agent(family, tok)
    tasks = make_tasks(family, "train", n=2)
    demos = collect_expert_demos(family, tasks, tok, agent, max_steps=MAX_STEPS[family] * 10)
    assert demos, "the expert should win its tasks"
    env = make_env(family)
    obs, info = env.reset(tasks[0])
    env.close()
    first = agent.build_prompt(
        info.get("instruction") or obs, obs, [], step=0, admissible_actions=info.get("admissible_actions")
    )
    assert demos[0][0].tolist() == first.ids
    for p, r in demos:
        assert p.dtype == np.int32 and r.dtype == np.int32 and r[-1] == tok.eos_token_id
        assert agent.parse(tok.decode(r.tolist(), skip_special_tokens=True)).valid


def test_expert_demos_do_not_depend_on_the_global_random_state(tiny):
    """ALFWorld's handcoded expert draws from ``random``; demos are seeded per task, and the
    caller's ``random`` state is left as it was."""
    import random

    _, tok = tiny
    agent = Agent("alfworld", tok, constrain_actions=True)
    kw = dict(task_types=["pick_and_place_simple"], max_receptacles=6, max_distractors=4)
    tasks = make_tasks("alfworld", "train", n=30, seed=7919, **kw)
    runs = []
    for outer in (1, 2):
        random.seed(outer)
        demos = collect_expert_demos("alfworld", tasks, tok, agent, max_steps=20)
        assert random.random() == random.Random(outer).random()  # state restored
        runs.append([(p.tobytes(), r.tobytes()) for p, r in demos])
    assert runs[0] == runs[1]
    other = collect_expert_demos("alfworld", tasks[:1], tok, agent, max_steps=20, seed=1)
    assert other  # another seed still plays (and wins) the task


def test_expert_demos_after_exploration_moves_teach_from_off_path_states(tiny):
    """sft.explore_steps: random moves first (history only), then the expert from where they
    left it; rows are exactly the expert's steps of won episodes, and the episodes are a
    function of the tasks and the seed."""
    from gigpo.rollout.demos import expert_episodes

    _, tok = tiny
    agent = Agent("sokoban", tok)
    tasks = make_tasks("sokoban", "train", n=12, seed=3)
    plain = list(expert_episodes("sokoban", tasks, agent, max_steps=15))
    explored = list(expert_episodes("sokoban", tasks, agent, max_steps=15, explore_steps=5))
    assert explored == list(expert_episodes("sokoban", tasks, agent, max_steps=15, explore_steps=5))
    assert all(ep.won and all(st.expert for st in ep.steps) for ep in plain)
    n_explore = [sum(not st.expert for st in ep.steps) for ep in explored]
    assert max(n_explore) > 0 and all(n <= 5 for n in n_explore)
    for ep in explored:  # exploration comes first, and only first
        assert [st.expert for st in ep.steps] == sorted(st.expert for st in ep.steps)
    # an expert step from a state the plain expert never visited
    on_path = {st.observation for ep in plain for st in ep.steps}
    assert any(st.expert and st.observation not in on_path for ep in explored for st in ep.steps)
    demos = collect_expert_demos("sokoban", tasks, tok, agent, max_steps=15, explore_steps=5)
    assert len(demos) == sum(sum(st.expert for st in ep.steps) for ep in explored if ep.won)
    expert_steps = [st for ep in explored if ep.won for st in ep.steps if st.expert]
    for (prompt, response), st in zip(demos, expert_steps):  # each row is its step's grid and move
        assert st.observation.strip() in tok.decode(prompt.tolist())
        assert agent.parse(tok.decode(response.tolist(), skip_special_tokens=True)).action == st.action


def test_expert_demos_relabel_task_reading_steps(tiny):
    """relabel adds, right after a take / carry step, rows whose prompt differs only in the task's
    words and whose action is admissible in that step's own list."""
    from gigpo.agent.relabel import task_words

    _, tok = tiny
    agent = Agent("alfworld", tok, constrain_actions=True)
    kw = dict(task_types=["pick_and_place_simple"], max_receptacles=6, max_distractors=4)
    tasks = make_tasks("alfworld", "train", n=3, seed=0, **kw)
    plain = collect_expert_demos("alfworld", tasks, tok, agent, max_steps=20, with_allowed=True, think="empty")
    more = collect_expert_demos(
        "alfworld", tasks, tok, agent, max_steps=20, with_allowed=True, think="empty", relabel=4
    )
    assert len(more) > len(plain)
    keys = {(p.tobytes(), r.tobytes()) for p, r, _ in plain}
    extra = [(i, d) for i, d in enumerate(more) if (d[0].tobytes(), d[1].tobytes()) not in keys]
    assert len(extra) == len(more) - len(plain)
    for i, (p, r, allowed) in extra:
        text = tok.decode(p.tolist())
        j = i - 1
        while (more[j][0].tobytes(), more[j][1].tobytes()) not in keys:  # its step's own row
            j -= 1
        src = tok.decode(more[j][0].tolist())
        m, m0 = task_words(text), task_words(src)
        assert (m.group("obj"), m.group("rec")) != (m0.group("obj"), m0.group("rec"))
        assert text.replace(m.group(0), m0.group(0)) == src  # only the task's words differ
        action = agent.parse(tok.decode(r.tolist(), skip_special_tokens=True)).action
        assert f"'{action}'" in text and allowed  # admissible, and decodable under the mask
        assert m.group("obj") in action or m.group("rec") in action


@pytest.fixture(scope="module")
def smollm2():
    return load_policy("smollm2-135m", device="cpu")


@pytest.mark.slow
@pytest.mark.parametrize("family", ["alfworld", "webshop", "search"])
def test_smollm2_rollout_keeps_the_contract(family, smollm2):
    _need(family)
    model, tok = smollm2
    tasks = make_tasks(family, "train", n=1)
    with GroupedEnvs(family, group_size=2, max_steps=2) as envs:
        batch = rollout(
            envs,
            tasks,
            HFGenerator(model, tok),
            tok,
            Agent(family, tok),
            SamplingParams(temperature=1.0, max_new_tokens=24, seed=0),
        )
        results = envs.results()
    _check_contract(batch, tasks, results, n=2)
    _check_logprobs(batch, model, tok)
    assert all(p[-3:].tolist() == batch.prompt_ids[0][-3:].tolist() for p in batch.prompt_ids)  # generation prompt

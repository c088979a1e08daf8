"""docs/extending.md's model-backend example (tests/data/plugin_generator) against the built-in
``HFGenerator`` on the real ``tiny`` model: same greedy ids, exact log-probs, same rollout, and the
``Trainer``/``evaluate_model`` seam ``make_generator``."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

from gigpo.agent import Agent
from gigpo.envs import make_tasks
from gigpo.envs.manager import GroupedEnvs
from gigpo.policy import HFGenerator, SamplingParams, load_policy, token_logprobs
from gigpo.rollout import rollout

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[1]
TEXTS = ["go to", "Question: who wrote hamlet? <search> hamlet author </search>"]


def _example():
    spec = importlib.util.spec_from_file_location("my_generator", ROOT / "tests/data/plugin_generator/my_generator.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.PlainGenerator


PlainGenerator = _example()


@pytest.fixture(scope="module")
def tiny():
    return load_policy("tiny", device="cpu")


@pytest.fixture(scope="module")
def prompts(tiny):
    _, tok = tiny
    chat = [[{"role": "user", "content": t}] for t in TEXTS]
    return [tok.apply_chat_template(c, add_generation_prompt=True)["input_ids"] for c in chat]


def test_greedy_matches_the_builtin_generator(tiny, prompts):
    params = SamplingParams(temperature=0, max_new_tokens=16)
    ours = PlainGenerator(*tiny).generate(prompts, params)
    ref = HFGenerator(*tiny).generate(prompts, params)
    for a, b in zip(ours, ref):
        np.testing.assert_array_equal(a.token_ids, b.token_ids)
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-4)
        assert a.finished == b.finished and a.token_ids.dtype == np.int32


def test_sampled_logprobs_are_the_ones_a_forward_pass_gives(tiny, prompts):
    model, tok = tiny
    gens = PlainGenerator(model, tok).generate(prompts, SamplingParams(temperature=0.7, max_new_tokens=16, seed=1))
    with torch.no_grad():
        lp, _, _ = token_logprobs(
            model,
            [np.asarray(p) for p in prompts],
            [g.token_ids for g in gens],
            pad_token_id=tok.pad_token_id,
            temperature=0.7,
        )
    for i, g in enumerate(gens):
        assert len(g.token_ids) == len(g.logprobs) > 0
        np.testing.assert_allclose(g.logprobs, lp[i, : len(g.token_ids)].numpy(), atol=1e-4)


def test_rollout_with_the_example_gives_the_builtin_batch(tiny):
    model, tok = tiny
    tasks = make_tasks("search", "train", n=1, seed=0)
    params = SamplingParams(temperature=0, max_new_tokens=8)
    batches = []
    for gen in (PlainGenerator(model, tok), HFGenerator(model, tok)):
        with GroupedEnvs("search", group_size=2, max_steps=2) as envs:
            batches.append(rollout(envs, tasks, gen, tok, Agent("search", tok), params))
    ours, ref = batches
    assert ours.num_rows == ref.num_rows > 0
    np.testing.assert_array_equal(ours.traj_id, ref.traj_id)
    for a, b in zip(ours.response_ids, ref.response_ids):
        np.testing.assert_array_equal(a, b)
    assert list(ours.action) == list(ref.action)


def test_trainer_and_eval_sample_with_make_generator(tmp_path):
    from gigpo.train.config import load_config
    from gigpo.train.evaluate import evaluate_model
    from gigpo.train.trainer import Trainer

    calls = []

    def make(model, tok):
        gen = PlainGenerator(model, tok)
        inner = gen.generate
        gen.generate = lambda prompts, params: calls.append(len(prompts)) or inner(prompts, params)
        return gen

    cfg = load_config(
        ROOT / "configs" / "search_tiny.yaml",
        [
            f"output_dir={tmp_path}",
            "name=r",
            "sft.enabled=false",
            "env.train_tasks=4",
            "env.eval_tasks=1",
            "env.tasks_per_iter=1",
            "env.group_size=2",
            "env.max_steps=2",
            "rollout.max_response_tokens=6",
            "train.use_kl=false",
        ],
    )
    tr = Trainer(cfg, make_generator=make)
    try:
        assert isinstance(tr.generator, PlainGenerator)
        m = tr.train_iteration()
    finally:
        tr.close()
    assert calls and sum(calls) == m["rollout/num_steps"]
    assert np.isfinite(m["actor/loss"]) and m["train/rows_updated"] > 0
    n = len(calls)
    assert set(evaluate_model(cfg, make_generator=make)) >= {"success", "episode_length"}
    assert len(calls) > n

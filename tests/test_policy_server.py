"""``gigpo.policy.server`` (ServerGenerator, weight sync), ``gigpo.policy.launch`` and the
``rollout.backend=server`` wiring.

(a) Contract tests against ``tests/fake_openai_server.py``, a real HTTP server on 127.0.0.1 that
samples with gigpo's own generator: always run. (b) Real-engine tests against vLLM from
``.venv-vllm`` (``make setup-vllm``), marked slow; skipped with that reason when it is missing.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from fake_openai_server import FakeServer
from gigpo.policy import SamplingParams, load_policy, token_logprobs
from gigpo.policy.constrain import ActionVocab
from gigpo.policy.launch import find_vllm
from gigpo.policy.server import ServerError, ServerGenerator, row_seed
from small_runs import SEARCH_TINY, SMALL

TESTS = Path(__file__).resolve().parent


def _prompts(tok, n=3):
    texts = ["go to the sink", "take mug 1 from table 2", "You are in the middle of a room."]
    return [tok(texts[i % len(texts)], add_special_tokens=False)["input_ids"] for i in range(n)]


def _recomputed(model, prompts, gens, temperature, allowed=None):
    with torch.no_grad():
        lp, _, _ = token_logprobs(
            model,
            [np.asarray(p) for p in prompts],
            [g.token_ids for g in gens],
            pad_token_id=0,
            temperature=temperature,
            allowed=allowed,
        )
    return [lp[i, : len(g.token_ids)].numpy() for i, g in enumerate(gens)]


# ----------------------------------------------------------------------------- (a) contract tests


def test_probe_and_exact_tokens(tiny, server):
    model, tok, _ = tiny
    gen = ServerGenerator(tok, [server.url], policy=model)
    try:
        assert gen.model == "policy" and gen.ids_field == "token_ids"
        prompts = _prompts(tok, 4)
        params = SamplingParams(temperature=0.8, max_new_tokens=12, seed=11)
        out = gen.generate(prompts, params)
        assert [len(g.token_ids) for g in out] == [len(g.logprobs) for g in out]
        # The log-probs the server returns are the trainer's recomputation (same model, same temperature).
        for g, ref in zip(out, _recomputed(model, prompts, out, 0.8)):
            np.testing.assert_allclose(g.logprobs, ref, atol=1e-4)
        # Same seed, same samples; every row has its own seed (equal prompts sample differently).
        again = gen.generate(prompts, params)
        assert all(np.array_equal(a.token_ids, b.token_ids) for a, b in zip(out, again))
        same = gen.generate([prompts[0]] * 4, params)
        assert len({tuple(g.token_ids) for g in same}) > 1
        assert row_seed(11, 0) != row_seed(11, 1) and row_seed(None, 3) is None
    finally:
        gen.close()


def test_tokens_as_token_ids_fallback(tiny, server):
    model, tok, _ = tiny
    server.state.token_ids = False  # an older server: only "token_id:N" tokens
    gen = ServerGenerator(tok, [server.url], policy=model)
    try:
        assert gen.ids_field == "tokens"
        prompts = _prompts(tok, 2)
        out = gen.generate(prompts, SamplingParams(temperature=1.0, max_new_tokens=8, seed=1))
        for g, ref in zip(out, _recomputed(model, prompts, out, 1.0)):
            np.testing.assert_allclose(g.logprobs, ref, atol=1e-4)
    finally:
        gen.close()


def test_server_without_token_ids_is_refused(tiny, server):
    model, tok, _ = tiny
    server.state.token_ids = server.state.id_tokens = False
    with pytest.raises(ServerError, match="returns no token ids.*never\\s+re-tokenizes"):
        ServerGenerator(tok, [server.url], policy=model)


def test_probe_catches_raw_logprobs(tiny, server):
    model, tok, _ = tiny
    server.state.raw_logprobs = True
    with pytest.raises(ServerError, match="processed_logprobs"):
        ServerGenerator(tok, [server.url], policy=model)


MISBEHAVIOURS = [
    ("too_many_tokens", "token count", "tokens for a request of max_tokens 6"),
    ("positive_logprobs", "log-prob", "> 0"),
    ("nan_logprobs", "log-prob", "not finite"),
    ("out_of_vocab", "vocabulary", "outside the vocabulary [0, "),
]


@pytest.mark.parametrize("mode, check, detail", MISBEHAVIOURS)
@pytest.mark.parametrize("ids_field", ["token_ids", "tokens"])
def test_a_misbehaving_servers_completions_never_reach_a_rollout(tiny, server, mode, check, detail, ids_field):
    """50x the tokens asked, positive or NaN log-probs, an id past the vocabulary: ``ServerError``,
    one line naming the check and the server (was: taken into training as it came)."""
    model, tok, _ = tiny
    server.state.token_ids = ids_field == "token_ids"  # else "token_id:N" tokens, checked the same
    gen = ServerGenerator(tok, [server.url], policy=model, max_retries=0)
    try:
        server.state.misbehave = mode
        with pytest.raises(ServerError) as e:
            gen.generate(_prompts(tok, 2), SamplingParams(temperature=0.8, max_new_tokens=6, seed=1))
        msg = str(e.value)
        assert msg.startswith(f"inference server {server.url}: completion refused ({check} check): ")
        assert detail in msg and "\n" not in msg
    finally:
        gen.close()


@pytest.mark.parametrize("mode", ["non_json", "not_an_object"])
def test_a_server_answering_non_json_or_a_non_object_is_one_clear_error(tiny, server, mode):
    model, tok, _ = tiny
    gen = ServerGenerator(tok, [server.url], policy=model, max_retries=0)
    try:
        server.state.misbehave = mode
        with pytest.raises(ServerError, match=f"inference server {server.url}") as e:
            gen.generate(_prompts(tok, 1), SamplingParams(max_new_tokens=4))
        assert ("answered non-JSON" if mode == "non_json" else "without choices") in str(e.value)
    finally:
        gen.close()


def test_the_probe_refuses_a_misbehaving_server(tiny, server):
    model, tok, _ = tiny
    server.state.misbehave = "too_many_tokens"
    with pytest.raises(ServerError, match=r"\(token count check\): 400 tokens for a request of max_tokens 8"):
        ServerGenerator(tok, [server.url], policy=model)


def test_gigpo_eval_against_a_misbehaving_server_is_one_line(server, capsys):
    from gigpo.cli import main

    server.state.misbehave = "positive_logprobs"
    args = [*SMALL, "env.eval_tasks=1", "rollout.backend=server", f"rollout.server.urls=[{server.url}]"]
    assert main(["eval", "--config", str(SEARCH_TINY), *args]) == 1
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("gigpo: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert f"inference server {server.url}: completion refused (log-prob check)" in lines[0]


def test_no_server_is_a_clear_error(tiny):
    from gigpo.policy.launch import free_port

    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ServerError, match=f"no inference server answers at {url}"):
        ServerGenerator(tiny[1], [url], policy=tiny[0], timeout_s=5)


def test_requests_spread_over_servers(tiny):
    model, tok, path = tiny
    a, b = FakeServer(path).start(), FakeServer(path).start()
    try:
        gen = ServerGenerator(tok, [a.url, b.url], policy=model, concurrency=1)
        n0 = a.state.completions, b.state.completions
        gen.generate(_prompts(tok, 8), SamplingParams(temperature=1.0, max_new_tokens=4, seed=0))
        got = a.state.completions - n0[0], b.state.completions - n0[1]
        assert sum(got) == 8 and min(got) >= 2, got
        gen.close()
    finally:
        a.stop()
        b.stop()


def test_transient_errors_are_retried(tiny, server):
    model, tok, _ = tiny
    gen = ServerGenerator(tok, [server.url], policy=model, max_retries=3, backoff_s=0.01)
    try:
        server.state.fail_next = 2
        out = gen.generate(_prompts(tok, 1), SamplingParams(max_new_tokens=4, seed=0))
        assert len(out) == 1 and server.state.fail_next == 0
    finally:
        gen.close()


def test_a_server_that_dies_mid_run_is_a_clear_error(tiny, server):
    model, tok, _ = tiny
    gen = ServerGenerator(tok, [server.url], policy=model, max_retries=1, backoff_s=0.01)
    try:
        server.state.dead = True  # as a crashed vLLM engine: 500, then /health 503
        with pytest.raises(ServerError, match=f"{server.url} failed /v1/completions.*health: GET /health answered 503"):
            gen.generate(_prompts(tok, 3), SamplingParams(max_new_tokens=4, seed=0))
        server.stop()  # gone altogether: connection refused
        with pytest.raises(ServerError, match=f"{server.url}.*(ConnectError|connection)"):
            gen.generate(_prompts(tok, 1), SamplingParams(max_new_tokens=4, seed=0))
    finally:
        gen.close()


def test_a_revival_redoes_the_interrupted_call_whole_with_the_same_seeds_once(tiny, server):
    """``revive`` (what ServerBackend sets for a server it started): the call that met the dead
    server is redone whole after one revival, sampling what an uninterrupted call samples; two
    callers meeting the same death wait for that one revival."""
    model, tok, _ = tiny
    prompts = _prompts(tok, 6)
    params = SamplingParams(temperature=1.0, max_new_tokens=8, seed=5)
    gen = ServerGenerator(tok, [server.url], policy=model, concurrency=2, max_retries=1, backoff_s=0.01)
    calls = []

    def revive(url, error):
        calls.append((url, error))
        time.sleep(0.3)  # a restart takes a while; other callers must wait for it, not start another
        server.state.dead, server.state.dead_after = False, None
        return True

    try:
        ref = gen.generate(prompts, params)
        gen.revive = revive
        server.state.dead_after = server.state.completions + 3  # two rows answered, then the engine dies
        out = gen.generate(prompts, params)
        assert len(calls) == 1 and calls[0][0] == server.url
        assert "health: GET /health answered 503" in calls[0][1]
        for a, b in zip(ref, out):  # the rows answered before the death were sampled again, the same
            assert np.array_equal(a.token_ids, b.token_ids) and np.allclose(a.logprobs, b.logprobs)

        calls.clear()
        server.state.dead = True
        results, errors = [None, None], []

        def call(i):
            try:
                results[i] = gen.generate(prompts, params)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=call, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors and len(calls) == 1
        for res in results:
            assert all(np.array_equal(a.token_ids, b.token_ids) for a, b in zip(ref, res))
    finally:
        gen.close()


def test_a_server_that_dies_during_weight_sync_is_revived_and_loaded(tiny, server, tmp_path):
    model, tok, path = tiny
    gen = ServerGenerator(tok, [server.url], policy=model, sync_dir=tmp_path / "w", max_retries=1, backoff_s=0.01)
    calls = []

    def revive(url, error):
        calls.append(url)
        server.state.dead = False
        return True

    try:
        gen.revive = revive
        gen._masks_checked = True  # as after a constrained call
        new, _ = load_policy(path)
        with torch.no_grad():
            for p in new.parameters():
                p.add_(torch.randn_like(p) * 0.05)
        server.state.dead = True  # the reload succeeds, the check's completion after it fails
        gen.sync_weights(new, 1)
        target = str(tmp_path / "w" / "v000001")
        assert calls == [server.url] and gen.policy_version == 1 and server.state.reloads == [target, target]
        assert not gen._masks_checked  # the restarted server's masking is checked again
        gen.revive = lambda url, error: False  # declined: the error stands
        server.state.dead = True
        with pytest.raises(ServerError, match=f"{server.url} failed /v1/completions"):
            gen.generate(_prompts(tok, 2), SamplingParams(max_new_tokens=4, seed=0))
    finally:
        gen.close()


def test_weight_sync_reloads_and_checks(tiny, server, tmp_path):
    model, tok, path = tiny
    gen = ServerGenerator(tok, [server.url], policy=model, sync_dir=tmp_path / "w")
    try:
        prompts = _prompts(tok, 3)
        params = SamplingParams(temperature=1.0, max_new_tokens=10, seed=4)
        before = gen.generate(prompts, params)
        new, _ = load_policy(path)
        with torch.no_grad():
            for p in new.parameters():
                p.add_(torch.randn_like(p) * 0.05)
        gen.sync_weights(new, 1)
        assert gen.policy_version == 1 and server.state.reloads == [str(tmp_path / "w" / "v000001")]
        after = gen.generate(prompts, params)
        assert any(not np.array_equal(a.token_ids, b.token_ids) for a, b in zip(before, after))
        for g, ref in zip(after, _recomputed(new, prompts, after, 1.0)):
            np.testing.assert_allclose(g.logprobs, ref, atol=1e-4)
        gen.sync_weights(model, 2)
        assert sorted(p.name for p in (tmp_path / "w").iterdir()) == ["v000002"]  # older copies removed
    finally:
        gen.close()


def test_lora_sync_loads_the_adapter_by_name_and_unloads_the_previous(tiny, tmp_path):
    """model.lora with the server backend: the server keeps the base weights; each sync saves the
    adapter, loads it under a new name (plain-text answers, as vLLM's), checks the server's
    log-probs against the LoRA model, and unloads the version before; requests name the adapter."""
    from gigpo.policy.load import apply_lora
    from gigpo.policy.server import save_for_serving

    model, tok, path = tiny
    pm = apply_lora(load_policy(path)[0], {"r": 4})
    base = save_for_serving(pm, tok, tmp_path / "base")  # the base weights, adapter left out
    assert {k for k in _safetensor_keys(base) if "lora" in k or "base_layer" in k} == set()
    server = FakeServer(str(base)).start()
    gen = ServerGenerator(tok, [server.url], policy=pm, sync_dir=tmp_path / "w", lora=True)
    try:
        prompts, params = _prompts(tok, 4), SamplingParams(temperature=1.0, max_new_tokens=12, seed=4)
        before = gen.generate(prompts, params)
        names = []
        for version in (1, 2):
            torch.manual_seed(version)
            with torch.no_grad():
                for n, p in pm.named_parameters():
                    if "lora_B" in n:
                        p.normal_(0, 0.1)
            gen.sync_weights(pm, version)  # raises when the server's log-probs are not pm's
            names.append(gen.adapter)
            assert list(server.state.adapters) == [gen.adapter]  # the previous one unloaded
            assert [d.name for d in (tmp_path / "w").iterdir()] == [f"lora-v{version:06d}"]
        after = gen.generate(prompts, params)
        assert names[0] != names[1] and gen.policy_version == 2
        assert any(not np.array_equal(a.token_ids, b.token_ids) for a, b in zip(before, after))
        for g, ref in zip(after, _recomputed(pm, prompts, after, 1.0)):
            assert np.abs(g.logprobs - ref).max() < 1e-4
    finally:
        gen.close()
        server.stop()


def _safetensor_keys(model_dir) -> set[str]:
    from safetensors import safe_open

    with safe_open(str(Path(model_dir) / "model.safetensors"), "pt") as f:
        return set(f.keys())


ACTIONS = ["go to drawer 1", "go to drawer 10", "go to desk 1", "take mug 2 from desk 1", "look"]


def _check_constrained(gen, model, tok, open_tag, temperature) -> float:
    """Constrained sampling through ``gen``: only listed actions after the open tag, the restricted
    positions the HF sampler records for the same response (``ActionConstraint.positions``, which
    tests/test_policy_constrain.py checks against ``HFGenerator``), the same tokens again with the
    same seed. Returns the largest difference between the sampling log-probs and the trainer's
    masked recomputation. The open tag "h" (the random `tiny` writes no "<action>") ends about
    half the rows' first "h" token (the trie follows) and lies inside the others' (free to the end)."""
    vocab = ActionVocab(tok, open_tag=open_tag)
    lists = [ACTIONS, ["look", "inventory"], None, ["open drawer 3", "go to shelf 12", "examine shelf 12"]] * 6
    cons = [vocab.constraint(a) if a else None for a in lists]
    prompts = _prompts(tok, len(lists))
    params = SamplingParams(temperature=temperature, max_new_tokens=40, seed=7)
    out = gen.generate(prompts, params, constraints=cons)
    again = gen.generate(prompts, params, constraints=cons)
    eos, entered, free = gen.eos_ids, 0, 0
    for g, a, c in zip(out, lists, cons):
        if c is None:
            assert not g.allowed
            continue
        want = c.positions(list(g.token_ids), eos)
        assert [k for k, _ in g.allowed] == [k for k, _ in want]
        assert all(np.array_equal(x, y) for (_, x), (_, y) in zip(g.allowed, want))
        if g.allowed:  # an action and the close tag, then EOS; or a prefix of them at max_new_tokens
            entered += 1
            text = tok.decode(g.token_ids[g.allowed[0][0] : len(g.token_ids) - g.finished])
            assert g.finished == (g.token_ids[-1] in eos) and (g.finished or len(g.token_ids) == 40)
            assert any((x + "</action>").startswith(text) for x in a) and (text.endswith("</action>") or not g.finished)
        else:
            free += 1
    assert entered and (free or open_tag is None)
    assert all(np.array_equal(x.token_ids, y.token_ids) for x, y in zip(out, again))
    ref = _recomputed(model, prompts, out, temperature, allowed=[g.allowed for g in out])
    return max(float(np.abs(g.logprobs - r).max()) for g, r in zip(out, ref))


@pytest.mark.parametrize(
    "open_tag, temperature, stop_strings", [("h", 1.0, True), (None, 0.7, True), ("h", 1.0, False)]
)
def test_constrained_sampling_matches_the_masks_and_the_trainers_log_probs(
    tiny, server, open_tag, temperature, stop_strings
):
    """rollout.constrain_actions through the server (``_check_constrained``). Without stop strings
    the server samples past the open tag and the client drops what follows it."""
    model, tok, _ = tiny
    server.state.stop_strings = stop_strings
    gen = ServerGenerator(tok, [server.url], policy=model)
    try:
        assert _check_constrained(gen, model, tok, open_tag, temperature) < 1e-5
    finally:
        gen.close()


def _sft_sokoban(tmp_path):
    """configs/sokoban_tiny.yaml (rollout.constrain_actions) and its SFT model, on 64 episodes."""
    from gigpo.train.config import load_config
    from gigpo.train.sft import ensure_sft_model

    cfg = load_config(
        TESTS.parent / "configs" / "sokoban_tiny.yaml", ["sft.episodes=64", f"sft.output_dir={tmp_path / 'sft'}"]
    )
    path = ensure_sft_model(cfg, progress=False)
    return (cfg, *load_policy(path), path)


def _constrained_sokoban_rollout(cfg, gen, model, tok) -> float:
    """A Sokoban rollout sampled through ``gen`` with the config's agent: every response that
    reached the open tag acts from the admissible moves, the batch carries the masks; returns the
    first update's approx_kl (0 when the sampling log-probs are the masked ones the trainer
    recomputes; clipfrac then 0)."""
    from gigpo.envs import make_tasks
    from gigpo.envs.manager import GroupedEnvs
    from gigpo.rollout import rollout
    from gigpo.train.factories import build_agent
    from gigpo.train.config import TrainConfig
    from gigpo.learner.update import PolicyUpdater

    tasks = make_tasks("sokoban", "train", n=2, seed=5, **cfg.env.task_kwargs)
    with GroupedEnvs("sokoban", group_size=4, max_steps=3) as envs:
        params = SamplingParams(temperature=1.0, max_new_tokens=cfg.rollout.max_response_tokens, seed=0)
        batch = rollout(envs, tasks, gen, tok, build_agent(cfg, tok), params)
    tagged = [i for i in range(batch.num_rows) if "<action>" in batch.response_text[i]]
    assert batch.allowed is not None and len(tagged) >= batch.num_rows // 2, list(batch.response_text)
    assert all(batch.allowed[i] and batch.action[i] in ("up", "down", "left", "right") for i in tagged)
    up = PolicyUpdater(
        model, TrainConfig(lr=1e-4, mini_batch_rows=batch.num_rows, ppo_epochs=1), pad_token_id=0, temperature=1.0
    )
    ones = np.ones(batch.num_rows, np.float32)
    m = up.update(batch.prompt_ids, batch.response_ids, ones, list(batch.logprobs), allowed=batch.allowed)
    print(f"\nconstrained sokoban: {batch.num_rows} rows, {len(tagged)} tagged, approx_kl {m['approx_kl']:.2e}")
    assert m["clipfrac"] == 0.0
    return float(m["approx_kl"])


@pytest.mark.slow
def test_constrained_sokoban_rollout(tmp_path):
    """The rollout loop, the agent's constraints and the update through a server: the SFT model
    served by the stand-in (``_constrained_sokoban_rollout``)."""
    cfg, model, tok, path = _sft_sokoban(tmp_path)
    srv = FakeServer(path).start()
    gen = ServerGenerator(tok, [srv.url], policy=model)
    try:
        assert abs(_constrained_sokoban_rollout(cfg, gen, model, tok)) < 1e-6
    finally:
        gen.close()
        srv.stop()


def test_constraints_need_a_server_that_applies_allowed_token_ids(tiny, server):
    model, tok, _ = tiny
    server.state.allowed_ids = False
    gen = ServerGenerator(tok, [server.url], policy=model)
    try:
        gen.generate(_prompts(tok, 1), SamplingParams(max_new_tokens=4, seed=0))  # unconstrained: fine
        with pytest.raises(ServerError, match="does not apply allowed_token_ids"):
            cons = [ActionVocab(tok, open_tag=None).constraint(ACTIONS)]
            gen.generate(_prompts(tok, 1), SamplingParams(max_new_tokens=4, seed=0), constraints=cons)
    finally:
        gen.close()
    with pytest.raises(ValueError, match="at least one allowed action"):
        ActionVocab(tok).constraint([])


def test_config_validation():
    from gigpo.train.config import ConfigError, load_config

    cfg = load_config(None, ["rollout.backend=server", "rollout.server.urls=[http://127.0.0.1:9]"])
    assert cfg.rollout.server.urls == ["http://127.0.0.1:9"]
    assert load_config(None, ["rollout.backend=server", "rollout.constrain_actions=true"]).rollout.constrain_actions
    bad = {
        "rollout.backend": ["rollout.backend=vllm"],
        "rollout.server.urls": ["rollout.server.urls=[127.0.0.1:8000]"],
        "rollout.server.concurrency": ["rollout.server.concurrency=0"],
        "rollout.server.max_restarts": ["rollout.server.max_restarts=-1"],
    }
    for key, ov in bad.items():
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            load_config(None, ov)


def _fake_vllm(tmp_path, *extra: str) -> str:
    """An executable standing in for ``vllm`` (``vllm serve MODEL --port N ...``); ``extra``:
    more arguments for ``fake_openai_server.main`` (``--die-after-reload N``)."""
    exe = tmp_path / "bin" / "vllm"
    exe.parent.mkdir()
    exe.write_text(
        f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(TESTS)!r})\n"
        f"import fake_openai_server\nfake_openai_server.main(sys.argv[1:] + {list(extra)!r})\n"
    )
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return str(exe)


def test_find_vllm(tmp_path):
    exe = _fake_vllm(tmp_path)
    assert find_vllm(exe) == [exe, "serve"]
    (tmp_path / "bin" / "python").symlink_to(sys.executable)  # a venv: python -m the api server
    assert find_vllm(exe)[1:] == ["-m", "vllm.entrypoints.openai.api_server"]
    from gigpo.policy.launch import LaunchError

    with pytest.raises(LaunchError, match="make setup-vllm"):
        find_vllm(str(tmp_path / "nowhere" / "vllm"))


def test_on_a_2_cpu_machine_vllm_computes_on_both_cores_unless_told_otherwise(tmp_path, monkeypatch):
    """vLLM-CPU keeps one core for its scheduler; with two cores that halves its compute."""
    from gigpo.policy.launch import VLLMServer

    srv = VLLMServer(tmp_path, vllm_bin=_fake_vllm(tmp_path))
    for key in ("VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_NUM_OF_RESERVED_CPU"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3, 1})
    assert srv.env()["VLLM_CPU_OMP_THREADS_BIND"] == "1,3"
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    assert "VLLM_CPU_OMP_THREADS_BIND" not in srv.env()  # vLLM's own default on larger machines
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setenv("VLLM_CPU_NUM_OF_RESERVED_CPU", "1")
    assert "VLLM_CPU_OMP_THREADS_BIND" not in srv.env()
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0")
    assert srv.env()["VLLM_CPU_OMP_THREADS_BIND"] == "0"


def _record_batch_versions(tr) -> list:
    """The policy versions of each iteration's trained rows, recorded as ``tr`` trains."""
    seen, real_collect = [], tr.collect

    def spy(it):
        every, batch, counters = real_collect(it)
        seen.append({v for vs in batch.meta["traj_policy_version"] for v in vs})
        return every, batch, counters

    tr.collect = spy
    return seen


@pytest.mark.slow
def test_training_starts_syncs_and_stops_its_server(tmp_path):
    """``gigpo train`` with rollout.backend=server and no URL: gigpo starts the server (here the
    stand-in), syncs the weights after each update, records versions, stops it at the end."""
    from gigpo.train.config import load_config
    from gigpo.train.learn import check_sampled_version
    from gigpo.train.trainer import Trainer

    cfg = load_config(
        SEARCH_TINY,
        [
            *SMALL,
            "train.iterations=2",
            "rollout.backend=server",
            f"rollout.server.vllm_bin={_fake_vllm(tmp_path)}",
            "rollout.server.start_timeout_s=600",  # the stand-in takes minutes to start on a loaded machine
            f"output_dir={tmp_path}",
            "name=run",
        ],
    )
    tr = Trainer(cfg)
    try:
        launched = tr.server.launched
        assert launched.alive() and tr.generator.policy_version == 0
        batch_versions = _record_batch_versions(tr)
        tr.run()
        assert batch_versions == [{0}, {1}]  # each iteration's rows come from the weights before its update
        lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
        train = [x for x in lines if x.get("tag") == "train"]
        assert len(train) == 2 and all(x["time/weight_sync"] >= 0 for x in train)
        assert train[1]["time/weight_sync"] > 0  # iteration 2 rolled out after the sync of update 1
        # the stale-row check: rows sampled before the weights changed are refused
        _, batch, _ = tr.collect(3)
        tr.models.changed()
        with pytest.raises(RuntimeError, match="weight sync did not reach the sampler"):
            check_sampled_version(batch, tr.models.version, 3)
    finally:
        tr.close()
    assert not launched.alive()
    assert not (tmp_path / "run" / "serving" / "weights").exists()


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _kill_and_wait(srv) -> int:
    pid = srv.proc.pid
    os.kill(pid, signal.SIGKILL)
    srv.proc.wait(30)
    return pid


def _backend(tmp_path, *overrides):
    """A ServerBackend that starts the stand-in vllm on a fresh ``tiny`` (the trainer's model, updated in place)."""
    from gigpo.train.config import load_config
    from gigpo.train.serving import ServerBackend

    cfg = load_config(
        SEARCH_TINY,
        [
            *SMALL,
            "rollout.backend=server",
            f"rollout.server.vllm_bin={_fake_vllm(tmp_path)}",
            "rollout.server.start_timeout_s=600",  # the stand-in takes minutes to start on a loaded machine
            "rollout.server.max_retries=1",
            *overrides,
        ],
    )
    model, tok = load_policy("tiny")
    return ServerBackend(cfg, model, tok, tmp_path / "serving"), model, tok


@pytest.mark.slow
def test_a_started_server_that_dies_is_restarted_on_the_current_weights(tmp_path, capsys):
    """The server gigpo started is SIGKILLed between weight sync and rollout: the call restarts it
    on the synced weights (log kept, one printed line), re-probes it (log-probs against the
    trainer's model) and samples what that version samples; past max_restarts, a clear error."""
    backend, model, tok = _backend(tmp_path, "rollout.server.max_restarts=1")
    gen, launched = backend.generator, backend.launched
    ref_srv = None
    try:
        with torch.no_grad():  # an update of the trainer's model, then the sync to version 1
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.05)
        gen.sync_weights(model, 1)
        v1 = tmp_path / "serving" / "weights" / "v000001"
        prompts, params = _prompts(tok, 4), SamplingParams(temperature=1.0, max_new_tokens=8, seed=7)
        ref_srv = FakeServer(str(v1)).start()  # what a server holding version 1 samples
        ref_gen = ServerGenerator(tok, [ref_srv.url], policy=model)
        ref = ref_gen.generate(prompts, params)
        ref_gen.close()

        first = _kill_and_wait(launched)
        out = gen.generate(prompts, params)
        assert backend.restarts == 1 and gen.policy_version == 1 and launched.model_dir == v1
        assert all(np.array_equal(a.token_ids, b.token_ids) for a, b in zip(ref, out))
        printed = capsys.readouterr().out
        assert f"vLLM server {launched.url} died (its process exited with code -9" in printed
        assert f"its log: {tmp_path / 'serving' / 'vllm.log'}" in printed and "vllm.restart1.log" in printed
        for log in ("vllm.log", "vllm.restart1.log"):  # the dead server's log is kept
            assert "fake server on" in (tmp_path / "serving" / log).read_text()
        assert _gone(first) and launched.alive()

        second = _kill_and_wait(launched)
        with pytest.raises(ServerError, match=r"(?s)failed /v1/completions.*max_restarts=1"):
            gen.generate(prompts, params)
        assert backend.restarts == 1 and _gone(second)
    finally:
        if ref_srv is not None:
            ref_srv.stop()
        backend.close()
    assert not launched.alive()


@pytest.mark.slow
def test_max_restarts_0_keeps_the_clear_error(tmp_path):
    backend, _, tok = _backend(tmp_path, "rollout.server.max_restarts=0")
    launched = backend.launched
    try:
        _kill_and_wait(launched)
        url = launched.url
        with pytest.raises(
            ServerError,
            match=rf"(?s){url} failed /v1/completions.*health: GET /health failed.*vllm\.log.*--resume",
        ):
            backend.generator.generate(_prompts(tok, 2), SamplingParams(max_new_tokens=4, seed=0))
        assert backend.restarts == 0 and not launched.alive()
    finally:
        backend.close()


def test_servers_given_by_url_are_not_restarted(tiny, server, tmp_path):
    from gigpo.train.config import load_config
    from gigpo.train.serving import ServerBackend

    cfg = load_config(
        SEARCH_TINY,
        [*SMALL, "rollout.backend=server", f"rollout.server.urls=[{server.url}]", "rollout.server.max_retries=1"],
    )
    backend = ServerBackend(cfg, tiny[0], tiny[1], tmp_path / "serving", sync=False)
    try:
        assert backend.generator.revive is None
        server.state.dead = True
        with pytest.raises(ServerError, match=rf"{server.url} failed .*health: GET /health answered 503.*--resume"):
            backend.generator.generate(_prompts(tiny[1], 2), SamplingParams(max_new_tokens=4, seed=0))
    finally:
        backend.close()


@pytest.mark.slow
def test_training_goes_on_after_its_server_is_killed_mid_rollout(tmp_path):
    """Two iterations where the started server SIGKILLs itself mid-rollout in iteration 2 (at the
    third completion after the first weight reload; the first is the sync's probe): one restart
    on version 1's weights, the run finishes, every row of iteration 2 carries version 1."""
    from gigpo.train.config import load_config
    from gigpo.train.trainer import Trainer

    marker = tmp_path / "died"
    cfg = load_config(
        SEARCH_TINY,
        [
            *SMALL,
            "train.iterations=2",
            "guard.val_every=0",
            "rollout.backend=server",
            f"rollout.server.vllm_bin={_fake_vllm(tmp_path, '--die-after-reload', '3', '--die-marker', str(marker))}",
            "rollout.server.start_timeout_s=600",  # the stand-in takes minutes to start on a loaded machine
            "rollout.server.max_retries=1",
            f"output_dir={tmp_path}",
            "name=run",
        ],
    )
    tr = Trainer(cfg)
    try:
        launched = tr.server.launched
        first = launched.proc.pid
        batch_versions = _record_batch_versions(tr)
        tr.run()
        second = launched.proc.pid
        assert marker.exists() and second != first and _gone(first)
        assert launched.model_dir.name == "v000001"
    finally:
        tr.close()
    assert batch_versions == [{0}, {1}]
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train = [x for x in lines if x.get("tag") == "train"]
    assert [x["rollout/server_restarts"] for x in train] == [0, 1]
    assert (tmp_path / "run" / "serving" / "vllm.log").is_file()
    assert (tmp_path / "run" / "serving" / "vllm.restart1.log").is_file()
    assert not launched.alive() and _gone(second)


# ----------------------------------------------------------------------------- (b) real vLLM

VLLM_VENV = Path(__file__).resolve().parents[1] / ".venv-vllm"


@pytest.fixture(scope="module")
def vllm(tiny, tmp_path_factory):
    """A real vLLM server on ``tiny`` (CPU, float32), started once for this module's tests."""
    if not (VLLM_VENV / "bin" / "python").is_file():
        pytest.skip(f"vLLM is not installed in {VLLM_VENV}: run `make setup-vllm`")
    from gigpo.policy.launch import VLLMServer
    from gigpo.policy.server import save_for_serving

    model, tok, _ = tiny
    d = save_for_serving(model, tok, tmp_path_factory.mktemp("vllm") / "tiny")
    srv = VLLMServer(d, vllm_bin=str(VLLM_VENV / "bin" / "vllm"), max_model_len=1024, extra_args=["--enforce-eager"])
    t0 = time.perf_counter()
    srv.start()
    print(f"\nvLLM answered after {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    yield srv
    srv.stop()


@pytest.mark.slow
def test_vllm_exact_token_contract(tiny, vllm):
    """vLLM's sampled ids and log-probs against the trainer's recomputation: within 1e-4
    (measured ~1e-6 on CPU in float32), at temperature 1 and 0.7, top-p 1."""
    model, tok, _ = tiny
    gen = ServerGenerator(tok, [vllm.url], policy=model, logprob_tolerance=1e-4)
    try:
        prompts = _prompts(tok, 6)
        for temp in (1.0, 0.7):
            out = gen.generate(prompts, SamplingParams(temperature=temp, max_new_tokens=24, seed=3))
            for g, ref in zip(out, _recomputed(model, prompts, out, temp)):
                assert len(g.token_ids) and np.abs(g.logprobs - ref).max() < 1e-4
        again = gen.generate(prompts, SamplingParams(temperature=1.0, max_new_tokens=24, seed=3))
        first = gen.generate(prompts, SamplingParams(temperature=1.0, max_new_tokens=24, seed=3))
        assert all(np.array_equal(a.token_ids, b.token_ids) for a, b in zip(again, first))
    finally:
        gen.close()


@pytest.mark.slow
@pytest.mark.parametrize("open_tag, temperature", [("h", 1.0), (None, 0.7)])
def test_vllm_constrained_decoding_matches_the_trainers_masked_log_probs(tiny, vllm, open_tag, temperature):
    """rollout.constrain_actions on the real engine (``_check_constrained``): vLLM applies
    allowed_token_ids before its processed log-probs, within 1e-5 of the trainer's masked ones."""
    model, tok, _ = tiny
    gen = ServerGenerator(tok, [vllm.url], policy=model, logprob_tolerance=1e-4)
    try:
        diff = _check_constrained(gen, model, tok, open_tag, temperature)
        print(f"\nconstrained, open tag {open_tag!r}, temperature {temperature}: max |vLLM - trainer| {diff:.2e}")
        assert diff < 1e-5
    finally:
        gen.close()


@pytest.mark.slow
def test_vllm_weight_sync_changes_samples(tiny, vllm, tmp_path):
    model, tok, path = tiny
    gen = ServerGenerator(tok, [vllm.url], policy=model, sync_dir=tmp_path / "w", logprob_tolerance=1e-3)
    try:
        prompts = _prompts(tok, 4)
        params = SamplingParams(temperature=1.0, max_new_tokens=16, seed=9)
        before = gen.generate(prompts, params)
        new, _ = load_policy(path)
        with torch.no_grad():
            for p in new.parameters():
                p.add_(torch.randn_like(p) * 0.05)
        gen.sync_weights(new, 1)  # checks the server's log-probs against `new` itself
        after = gen.generate(prompts, params)
        assert any(not np.array_equal(a.token_ids, b.token_ids) for a, b in zip(before, after))
        for g, ref in zip(after, _recomputed(new, prompts, after, 1.0)):
            assert np.abs(g.logprobs - ref).max() < 1e-3
        gen.sync_weights(model, 2)  # back to the fixture's weights for the other tests
    finally:
        gen.close()


@pytest.mark.slow
@pytest.mark.parametrize("off_policy_steps", [0, 1])
def test_vllm_training_run(vllm, tmp_path, off_policy_steps):
    """Two iterations of the small search run sampled by vLLM: finite metrics, weights synced; one
    step off, the second iteration was sampled while the first updated."""
    from gigpo.train.config import load_config
    from gigpo.train.trainer import Trainer

    cfg = load_config(
        SEARCH_TINY,
        [
            *SMALL,
            "train.iterations=2",
            f"train.off_policy_steps={off_policy_steps}",
            "rollout.backend=server",
            f"rollout.server.urls=[{vllm.url}]",
            f"output_dir={tmp_path}",
            "name=run",
        ],
    )
    tr = Trainer(cfg)
    try:
        tr.run()
    finally:
        tr.close()
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train = [x for x in lines if x.get("tag") == "train"]
    assert len(train) == 2
    for x in train:
        assert all(np.isfinite(v) for v in x.values() if isinstance(v, float))
        assert x["train/rows_updated"] > 0 and 0 <= x["rollout/success"] <= 1
        assert x["tokens/response"] > 0
    if off_policy_steps:  # iteration 2 was sampled on the start's weights, with iteration 1
        assert [x["train/staleness"] for x in train] == [0, 1]
    else:
        assert train[1]["time/weight_sync"] > 0
    assert os.path.isdir(tmp_path / "run" / "model")


@pytest.mark.slow
def test_vllm_constrained_sokoban_rollout(tiny, vllm, tmp_path):
    """``_constrained_sokoban_rollout`` on vLLM, the SFT model synced to it."""
    cfg, model, tok, _ = _sft_sokoban(tmp_path)
    gen = ServerGenerator(tok, [vllm.url], policy=model, sync_dir=tmp_path / "w", logprob_tolerance=1e-4, probe=False)
    try:
        gen.probe(compare=False)  # the server holds the fixture's weights until the sync (which compares)
        gen.sync_weights(model, 1)
        kl = _constrained_sokoban_rollout(cfg, gen, model, tok)
        gen.sync_weights(tiny[0], 2)  # the fixture's weights back for the other tests
    finally:
        gen.close()
    assert abs(kl) < 1e-6


@pytest.mark.slow
def test_vllm_serves_lora_adapters_loaded_at_run_time_also_after_a_restart(tmp_path):
    """model.lora against the real engine: vLLM started on the base weights with runtime LoRA
    loading; a synced adapter changes the samples and matches the trainer's LoRA model (the sync's
    probe). Then the restart path on the real engine: the server gigpo started is SIGKILLed (its
    whole process group: the API server and its engine core); the next call starts it again on the
    base weights, re-probes it, loads the adapter back and samples exactly the tokens, and the
    log-probs, of the first server with the same seeds. (The restart on fully synced weights is the
    stand-in's test above: the launcher's path is the same.)"""
    if not (VLLM_VENV / "bin" / "python").is_file():
        pytest.skip(f"vLLM is not installed in {VLLM_VENV}: run `make setup-vllm`")
    from gigpo.policy.load import apply_lora
    from gigpo.train.config import load_config
    from gigpo.train.serving import ServerBackend

    cfg = load_config(
        SEARCH_TINY,
        [
            *SMALL,
            "rollout.backend=server",
            "model.lora=true",
            f"rollout.server.vllm_bin={VLLM_VENV / 'bin' / 'vllm'}",
            "rollout.server.extra_args=[--enforce-eager]",
            "rollout.server.start_timeout_s=900",
            "rollout.server.max_retries=1",
            "rollout.server.logprob_tolerance=0.001",
        ],
    )
    model, tok = load_policy("tiny")
    pm = apply_lora(model, {})
    backend = ServerBackend(cfg, pm, tok, tmp_path / "serving")
    gen, launched = backend.generator, backend.launched
    try:
        assert "--enable-lora" in launched.args and gen.lora and gen.adapter is None
        prompts, params = _prompts(tok, 4), SamplingParams(temperature=1.0, max_new_tokens=12, seed=6)
        base = gen.generate(prompts, params)
        torch.manual_seed(0)
        with torch.no_grad():
            for n, p in pm.named_parameters():
                if "lora_B" in n:
                    p.normal_(0, 0.1)
        gen.sync_weights(pm, 1)  # its probe: the server's log-probs are pm's within 1e-3
        tuned = gen.generate(prompts, params)
        assert any(not np.array_equal(a.token_ids, b.token_ids) for a, b in zip(base, tuned))
        for g, ref in zip(tuned, _recomputed(pm, prompts, tuned, 1.0)):
            assert np.abs(g.logprobs - ref).max() < 1e-3
        os.killpg(os.getpgid(launched.proc.pid), signal.SIGKILL)
        launched.proc.wait(30)
        again = gen.generate(prompts, params)
        assert backend.restarts == 1 and launched.alive()
        assert all(np.array_equal(a.token_ids, b.token_ids) for a, b in zip(tuned, again))
        assert all(np.allclose(a.logprobs, b.logprobs, atol=1e-5) for a, b in zip(tuned, again))
    finally:
        backend.close()
    assert not launched.alive()


@pytest.mark.slow
def test_gigpo_serve_runs_until_interrupted(tmp_path):
    """``gigpo serve``: the config's model behind the (stand-in) vllm on the given port, Ctrl-C stops it."""
    import signal
    import subprocess

    import httpx

    from gigpo.policy.launch import free_port

    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "gigpo.cli",
        "serve",
        "--config",
        str(SEARCH_TINY),
        "sft.enabled=false",
        f"rollout.server.vllm_bin={_fake_vllm(tmp_path)}",
        "--port",
        str(port),
    ]
    env = dict(os.environ, PYTHONPATH=str(TESTS.parent / "src"))
    # a shell's background job ignores SIGINT, and children inherit that: give gigpo serve the default
    sigint = lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)  # noqa: E731
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, preexec_fn=sigint)
    try:
        lines = []
        for line in p.stdout:
            lines.append(line)
            if line.startswith("Ctrl-C stops it"):
                break
        assert any(f"rollout.server.urls=[http://127.0.0.1:{port}]" in x for x in lines), lines
        assert httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200
        p.send_signal(signal.SIGINT)
        assert p.wait(60) == 0
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=5)
    finally:
        if p.poll() is None:
            p.kill()


def test_evaluate_model_with_server_urls(tiny, server):
    """``gigpo eval`` with rollout.backend=server: the rollouts come from the server."""
    from gigpo.train.config import load_config
    from gigpo.train.evaluate import evaluate_model

    cfg = load_config(
        SEARCH_TINY, [*SMALL, "env.eval_tasks=2", "rollout.backend=server", f"rollout.server.urls=[{server.url}]"]
    )
    n0 = server.state.completions
    m = evaluate_model(cfg)
    assert m["num_trajectories"] == 2 and 0 <= m["success"] <= 1
    assert server.state.completions - n0 >= 2 + 1  # the probe's completion, then >= 1 per episode


@pytest.mark.slow
def test_one_step_off_training_samples_while_it_updates_one_version_per_group(tmp_path):
    """``train.off_policy_steps=1`` with rollout.backend=server: the server rolls out iteration
    i + 1 (on the weights before update i) while the learner updates; every trajectory of an
    iteration carries one version, at most one update old."""
    from gigpo.train.config import load_config
    from gigpo.train.trainer import Trainer

    cfg = load_config(
        SEARCH_TINY,
        [
            *SMALL,
            "train.iterations=3",
            "train.off_policy_steps=1",
            "rollout.backend=server",
            f"rollout.server.vllm_bin={_fake_vllm(tmp_path)}",
            "rollout.server.start_timeout_s=600",
            f"output_dir={tmp_path}",
            "name=run",
        ],
    )
    tr = Trainer(cfg)
    try:
        batch_versions = _record_batch_versions(tr)
        tr.run()
    finally:
        tr.close()
    assert batch_versions == [{0}, {0}, {1}]  # iteration i sampled by update max(0, i - 2)'s weights
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train = [x for x in lines if x.get("tag") == "train"]
    assert [x["train/staleness"] for x in train] == [0, 1, 1]
    assert all(x["train/rows_updated"] > 0 and x["actor/behav_kl_k3"] >= 0 for x in train)
    assert train[1]["time/weight_sync"] > 0  # iteration 2 submitted iteration 3 on update 1's weights
    assert any(x["tag"] == "eval_final" for x in lines)  # evaluation got the server back after the pipeline

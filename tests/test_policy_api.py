"""``gigpo.policy.api.APIGenerator`` against ``tests/fake_openai_server.py`` (a real HTTP server on
127.0.0.1 that samples with ``tiny``): both endpoints, the key, retries and clear errors."""

from __future__ import annotations

import pytest

from gigpo.policy import SamplingParams
from gigpo.policy.api import APIError, APIGenerator

PARAMS = SamplingParams(temperature=0.7, max_new_tokens=8, seed=3)


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_text_back_for_each_prompt(server, endpoint):
    gen = APIGenerator(f"{server.url}/v1", "policy", endpoint=endpoint, key_env="")
    try:
        out = gen.complete(["go to the sink", "take mug 1 from table 2"], PARAMS)
        assert len(out) == 2 and all(isinstance(t, str) for t in out)
        assert out == gen.complete(["go to the sink", "take mug 1 from table 2"], PARAMS)  # seeded per row
        assert sorted(server.state.prompts[:2]) == ["go to the sink", "take mug 1 from table 2"]  # concurrent
        assert server.state.auth is None  # no key variable: no header
        assert gen.prompt_field == ("message" if endpoint == "chat" else "text")
    finally:
        gen.close()


def test_key_from_the_environment_and_a_refused_key_names_the_variable(server, monkeypatch):
    server.state.key = "right"
    monkeypatch.setenv("MY_KEY", "wrong")
    gen = APIGenerator(f"{server.url}/v1", "policy", key_env="MY_KEY", max_retries=0)
    with pytest.raises(APIError, match=r"answered 401 \(not authorised\): put the API key in \$MY_KEY"):
        gen.complete(["hi"], PARAMS)
    gen.close()
    monkeypatch.setenv("MY_KEY", "right")
    gen = APIGenerator(f"{server.url}/v1", "policy", key_env="MY_KEY")
    assert len(gen.complete(["hi"], PARAMS)) == 1 and server.state.auth == "Bearer right"
    gen.close()


def test_server_errors_are_retried_then_reported(server):
    gen = APIGenerator(f"{server.url}/v1", "policy", endpoint="completions", max_retries=2, backoff_s=0.01)
    try:
        server.state.fail_next = 2
        assert len(gen.complete(["hi"], PARAMS)) == 1
        server.state.dead = True
        with pytest.raises(APIError, match=r"failed 3 time\(s\) \(last: HTTP 500.*rollout.api.base_url"):
            gen.complete(["hi"], PARAMS)
    finally:
        gen.close()


def test_bad_arguments():
    with pytest.raises(ValueError, match="endpoint must be one of"):
        APIGenerator("http://127.0.0.1:9/v1", "m", endpoint="responses")
    with pytest.raises(ValueError, match="model name"):
        APIGenerator("http://127.0.0.1:9/v1", "")

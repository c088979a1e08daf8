"""Fixtures shared by test modules: ``tiny`` (the model, its tokenizer and directory) and
``server`` (``tests/fake_openai_server.py`` serving it on 127.0.0.1)."""

from __future__ import annotations

import pytest

from fake_openai_server import FakeServer
from gigpo.policy import load_policy
from gigpo.policy.load import resolve_path


@pytest.fixture(scope="module")
def tiny():
    model, tok = load_policy("tiny")
    return model, tok, resolve_path("tiny")


@pytest.fixture
def server(tiny):
    srv = FakeServer(tiny[2]).start()
    yield srv
    srv.stop()

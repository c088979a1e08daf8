"""Fixtures shared by test modules: ``tiny`` (the model, its tokenizer and directory) and
``server`` (``tests/fake_openai_server.py`` serving it on 127.0.0.1)."""

from __future__ import annotations

from collections import Counter

import pytest

from fake_openai_server import FakeServer
from gigpo.policy import load_policy
from gigpo.policy.load import resolve_path


def pytest_collection_modifyitems(config, items):
    """Files with the most slow tests first, each file's own order kept. `make test` hands whole files
    to its workers in this order: starting the long end-to-end files first keeps one of them from
    running alone at the end while the other workers idle."""
    slow = Counter(item.path for item in items if item.get_closest_marker("slow"))
    items.sort(key=lambda item: -slow[item.path])


@pytest.fixture(scope="module")
def tiny():
    model, tok = load_policy("tiny")
    return model, tok, resolve_path("tiny")


@pytest.fixture
def server(tiny):
    srv = FakeServer(tiny[2]).start()
    yield srv
    srv.stop()

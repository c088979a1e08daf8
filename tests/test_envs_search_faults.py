"""A failing retrieval server is an env fault: the episode ends failed, with the URL and the error,
and is not trained on as the policy's failure; episodes that did not search are unaffected."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gigpo.envs import Task
from gigpo.envs.manager import GroupedEnvs
from gigpo.envs.search import BM25Retriever
from gigpo.envs.search.server import serve_in_thread

DOCS = [
    {"id": "0", "contents": '"Quorvath Pellin"\nQuorvath Pellin is a glassmaker born in the town of Brisk Hollow.'},
    {"id": "1", "contents": '"Brisk Hollow"\nBrisk Hollow is a town in the republic of Tamsor.'},
]
TASK = Task(
    "search",
    "t0",
    "train",
    "single_hop",
    {"question": "Where was Quorvath Pellin born?", "golden_answers": ["Brisk Hollow"]},
)
SEARCH, ANSWER = "<search>Quorvath Pellin</search>", "<answer>Brisk Hollow</answer>"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("executor", ["inline", "thread"])
def test_server_stopped_mid_run_fails_only_the_searching_episode_naming_url_and_error(executor):
    server, url = serve_in_thread(BM25Retriever(DOCS))
    kw = {"step_timeout": 30.0, "reset_timeout": 30.0} if executor != "inline" else {}
    try:
        with GroupedEnvs(
            "search",
            group_size=2,
            max_steps=4,
            executor=executor,
            env_kwargs={"url": url, "timeout": 2, "retries": 1, "backoff": 0.05},
            **kw,
        ) as envs:
            envs.reset([TASK])
            first = envs.step({0: SEARCH, 1: SEARCH})  # the server is up: real results
            assert all(t.observation.startswith("<information>") and not t.failed for t in first.values())
            server.shutdown()
            server.server_close()
            t0 = time.perf_counter()
            out = envs.step({0: SEARCH, 1: ANSWER})
            assert time.perf_counter() - t0 < 10
            assert out[0].failed and out[0].done and out[0].reward == 0.0
            error = out[0].info["error"]
            assert url in error and "RetrieverError" in error and "2 attempt" in error and "Connection" in error
            assert not out[1].failed and out[1].reward == 1.0  # the answer needed no retrieval
            res = envs.results()
            assert (res[0].failed, res[0].error) == (True, error)
            assert (res[1].failed, res[1].total_reward) == (False, 1.0)
    finally:
        server.server_close()


class _Failing(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        body = json.dumps({"error": "index not loaded"}).encode()
        self.send_response(503)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_http_error_from_the_server_is_an_env_fault_with_its_message():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Failing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/retrieve"
    try:
        with GroupedEnvs(
            "search", group_size=1, max_steps=4, env_kwargs={"url": url, "timeout": 2, "retries": 1, "backoff": 0.05}
        ) as envs:
            envs.reset([TASK])
            t = envs.step({0: SEARCH})[0]
            assert t.failed and url in t.info["error"] and "HTTP 503" in t.info["error"]
            assert "index not loaded" in t.info["error"]
    finally:
        server.shutdown()
        server.server_close()


def test_port_with_nothing_listening_is_an_env_fault():
    url = f"http://127.0.0.1:{_free_port()}/retrieve"
    with GroupedEnvs("search", group_size=1, max_steps=4, env_kwargs={"url": url, "timeout": 2, "retries": 0}) as envs:
        envs.reset([TASK])
        t = envs.step({0: SEARCH})[0]
        assert t.failed and t.done and url in t.info["error"] and "Connection refused" in t.info["error"]

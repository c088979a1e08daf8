"""The retrieval server under abuse: malformed requests are a 400 with a JSON error, oversized ones
are capped, a stalled client is dropped, and the server keeps answering correctly throughout."""

from __future__ import annotations

import json
import select
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from gigpo.envs.search import BM25Retriever, HTTPRetriever
from gigpo.envs.search import server as srv
from gigpo.envs.search.server import serve_in_thread

DOCS = [
    {"id": "0", "contents": '"Quorvath Pellin"\nQuorvath Pellin is a glassmaker born in the town of Brisk Hollow.'},
    {"id": "1", "contents": '"Brisk Hollow"\nBrisk Hollow is a town in the republic of Tamsor.'},
    {"id": "2", "contents": '"Tamsor"\nTamsor is a republic whose capital is Vell.'},
    {"id": "3", "contents": '"Ondrel Station"\nOndrel Station is a railway station opened in 1887.'},
]
QUERIES = ["Brisk Hollow town", "railway station 1887", "capital of Tamsor"]


@pytest.fixture(scope="module")
def retriever():
    return BM25Retriever(DOCS)


@pytest.fixture()
def served(retriever):
    server, url = serve_in_thread(retriever, timeout=1.0)
    try:
        yield server, url
    finally:
        server.shutdown()
        server.server_close()


def _raw(server, request: bytes, timeout: float = 10.0) -> tuple[int, dict]:
    """Send raw bytes on a fresh loopback connection; (status, JSON body) of the answer."""
    with socket.create_connection(server.server_address[:2], timeout=timeout) as s:
        s.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
        )
        while len(body) < length:
            body += s.recv(65536)
    return int(head.split()[1]), json.loads(body)


def _post(server, body: bytes, headers: str | None = None) -> tuple[int, dict]:
    if headers is None:
        headers = f"Content-Length: {len(body)}\r\n"
    return _raw(
        server,
        b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + headers.encode() + b"\r\n" + body,
    )


def _still_serves(url, retriever) -> None:
    remote = HTTPRetriever(url, timeout=10, retries=0).search(QUERIES, 2)
    assert [[h["id"] for h in r] for r in remote] == [[h["id"] for h in r] for r in retriever.search(QUERIES, 2)]


@pytest.mark.parametrize(
    "body, message",
    [
        (b'{"queries": ["Tamsor"], "topk": 1e400}', '"topk" must be an integer in 1..100, got inf'),
        (b'{"queries": ["Tamsor"], "topk": 0}', '"topk" must be an integer in 1..100, got 0'),
        (b'{"queries": ["Tamsor"], "topk": -3}', '"topk" must be an integer'),
        (b'{"queries": ["Tamsor"], "topk": 101}', '"topk" must be an integer'),
        (b'{"queries": ["Tamsor"], "topk": 2.5}', '"topk" must be an integer in 1..100, got 2.5'),
        (b'{"queries": ["Tamsor"], "topk": true}', '"topk" must be an integer in 1..100, got True'),
        (b'{"queries": ["Tamsor"], "topk": "3"}', '"topk" must be an integer in 1..100, got 3'),
        (b'{"queries": ["Tamsor"], "topk": 1' + b"0" * 5000 + b"}", "not valid JSON"),
        (b'{"queries": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested too deeply"),
        (json.dumps({"queries": ["q"] * 50_000}).encode(), "50000 queries in one request; at most 1024"),
        (b'{"queries": "not a list"}', '"queries" must be a list of strings'),
        (b'{"queries": [1, 2]}', '"queries" must be a list of strings'),
        (b'{"topk": 3}', 'needs "queries"'),
        (b'["Tamsor"]', "must be a JSON object"),
        (b"{not json", "not valid JSON"),
        (b"\xff\xfe\x00", "not valid JSON"),
        (b'{"queries": ["Tamsor"], "return_scores": "yes"}', '"return_scores" must be true or false'),
    ],
)
def test_malformed_body_is_a_400_with_a_json_error_and_the_server_goes_on(served, retriever, body, message):
    server, url = served
    t0 = time.perf_counter()
    code, payload = _post(server, body)
    assert code == 400 and message in payload["error"] and payload["error"].startswith("bad request: ")
    assert time.perf_counter() - t0 < 5
    _still_serves(url, retriever)


@pytest.mark.parametrize(
    "headers, message",
    [
        ("", "missing Content-Length"),
        ("Content-Length: abc\r\n", "Content-Length 'abc' is not an integer"),
        ("Content-Length: -5\r\n", "Content-Length -5 is out of range"),
        ("Content-Length: 0\r\n", "Content-Length 0 is out of range"),
        (f"Content-Length: {10**15}\r\n", f"Content-Length {10**15} is out of range"),
        (f"Content-Length: {srv.MAX_BODY_BYTES + 1}\r\n", "out of range"),
    ],
)
def test_bad_content_length_is_a_400_without_reading_the_body(served, retriever, headers, message):
    server, url = served
    code, payload = _post(server, b'{"queries": ["Tamsor"]}', headers=headers)
    assert code == 400 and message in payload["error"]
    _still_serves(url, retriever)


def test_topk_null_or_missing_uses_the_default(served):
    server, _ = served
    for body in (
        b'{"queries": ["Tamsor capital"]}',
        b'{"queries": ["Tamsor capital"], "topk": null}',
        b'{"query": "Tamsor capital"}',
    ):
        code, payload = _post(server, body)
        assert code == 200 and len(payload["result"]) == 1 and 1 <= len(payload["result"][0]) <= 3


def test_an_answer_over_the_size_cap_is_a_400(served, retriever, monkeypatch):
    server, url = served
    monkeypatch.setattr(srv, "MAX_RESPONSE_BYTES", 200)
    code, payload = _post(server, json.dumps({"queries": QUERIES, "topk": 4}).encode())
    assert code == 400 and "exceed 200 bytes" in payload["error"]
    monkeypatch.setattr(srv, "MAX_RESPONSE_BYTES", 64 * 1024 * 1024)
    _still_serves(url, retriever)


def test_a_stalled_client_is_dropped_after_the_timeout_and_others_are_served(served, retriever):
    server, url = served  # timeout=1.0
    stalled = socket.create_connection(server.server_address[:2], timeout=10)
    try:
        # Promise 100 bytes, send 5, then stall: the handler thread must not wait forever.
        stalled.sendall(b'POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"que')
        idle = socket.create_connection(server.server_address[:2], timeout=10)  # sends nothing at all
        _still_serves(url, retriever)  # meanwhile others are answered
        t0 = time.perf_counter()
        assert stalled.recv(1024) == b"" and idle.recv(1024) == b""  # closed by the server
        assert time.perf_counter() - t0 < 5
        idle.close()
    finally:
        stalled.close()
    _still_serves(url, retriever)


def _trickle(server, data: bytes, every: float, first: bytes = b"") -> float | None:
    """Send ``first`` at once, then ``data`` a byte at a time, one every ``every`` seconds (each well
    within the per-read timeout); the seconds until the server closed the connection, or None if it
    never did."""
    with socket.create_connection(server.server_address[:2], timeout=10) as s:
        s.sendall(first)
        t0 = time.monotonic()
        for i in range(len(data)):  # bounded: len(data) * every seconds at most
            try:
                s.sendall(data[i : i + 1])
                readable, _, _ = select.select([s], [], [], every)
                if readable and s.recv(4096) == b"":
                    return time.monotonic() - t0
            except OSError:  # reset by the server
                return time.monotonic() - t0
    return None


BODY = json.dumps({"queries": QUERIES, "topk": 2}).encode()
HEAD = f"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Length: {len(BODY)}\r\n\r\n".encode()


@pytest.mark.parametrize("where", ["headers", "body"])
def test_a_trickling_client_is_cut_off_at_the_whole_request_deadline(served, retriever, where):
    """A byte every 0.25 s never trips the 1 s per-read timeout; the 1 s whole-request deadline cuts
    it off (with the default 30 s, a byte every 5 s used to hold a connection and its thread forever)."""
    server, url = served  # timeout=1.0
    if where == "headers":
        elapsed = _trickle(server, HEAD + BODY, every=0.25)
    else:
        elapsed = _trickle(server, BODY, every=0.25, first=HEAD)
    assert elapsed is not None, "the trickling client was never cut off"
    assert elapsed < 2.5, elapsed
    _still_serves(url, retriever)


def test_the_deadline_is_per_request_on_a_kept_alive_connection(served):
    """Requests on one connection, each whole in time, 0.6 s apart (2.4 s in all, past the 1 s
    deadline): each is answered; the deadline starts at a request's first byte."""
    server, _ = served
    with socket.create_connection(server.server_address[:2], timeout=10) as s:
        for _ in range(4):
            s.sendall(HEAD + BODY)
            data = s.recv(65536)
            assert data.startswith(b"HTTP/1.1 200 "), data[:80]
            head, _, body = data.partition(b"\r\n\r\n")
            length = next(int(x.split(b":")[1]) for x in head.split(b"\r\n") if x.lower().startswith(b"content-length"))
            while len(body) < length:
                body += s.recv(65536)
            assert len(json.loads(body)["result"]) == len(QUERIES)
            time.sleep(0.6)


def test_bounded_concurrent_load_is_answered_correctly_in_time(served, retriever):
    server, url = served
    expected = [[h["id"] for h in r] for r in retriever.search(QUERIES, 3)]
    client = HTTPRetriever(url, timeout=10, retries=0)

    def one(i):
        return [[h["id"] for h in r] for r in client.search(QUERIES, 3)]

    t0 = time.perf_counter()
    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(one, range(96)))
    assert time.perf_counter() - t0 < 15
    assert results == [expected] * 96

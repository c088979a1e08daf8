"""A small Search-R1-compatible retrieval server (stdlib ``http.server`` + ``BM25Retriever``).

    python -m gigpo.envs.search.server --corpus wiki.jsonl --port 8000   # a JSONL corpus
    python -m gigpo.envs.search.server --port 8000                       # the generated world

``POST /retrieve`` takes ``{"queries": [...], "topk": k, "return_scores": bool}`` (a single
``"query"`` string is accepted too) and answers, like Search-R1's ``retrieval_server.py``,
``{"result": [[{"document": {"id", "contents"}, "score": s}, ...], ...]}`` (with return_scores)
or ``{"result": [[{"id", "contents"}, ...], ...]}`` (without). Errors get a 4xx/5xx with
``{"error": message}``: every malformed request (bad JSON, too deep, a missing or bad
Content-Length, ``topk`` not an integer in 1..100, more than ``MAX_QUERIES`` queries, an answer
over ``MAX_RESPONSE_BYTES``) is a 400. A connection is closed when it sits idle for ``timeout``
seconds, or when a request whose first byte has arrived is not whole (request line, headers and
body) within ``timeout`` seconds: a client that trickles a byte at a time cannot hold a thread.
``GET /health`` answers ``{"status": "ok", "documents": n}``.
"""

from __future__ import annotations

import argparse
import io
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from gigpo.envs.search.retrievers import BM25Retriever, Retriever

MAX_BODY_BYTES = 8 * 1024 * 1024
MAX_TOPK = 100
MAX_QUERIES = 1024  # per request; a training batch sends one query per episode
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
REQUEST_TIMEOUT = 30.0  # seconds a connection may idle, and a request may take to arrive whole


class BadRequest(ValueError):
    """A malformed request: answered 400 with its message."""


def _content_length(value: str | None) -> int:
    if value is None:
        raise BadRequest("missing Content-Length header; send the JSON body with its length")
    try:
        length = int(value.strip())
    except ValueError:
        raise BadRequest(f"Content-Length {value[:40]!r} is not an integer") from None
    if not 1 <= length <= MAX_BODY_BYTES:
        raise BadRequest(f"Content-Length {length} is out of range: the body must be 1..{MAX_BODY_BYTES} bytes of JSON")
    return length


def parse_request(body: bytes, default_topk: int) -> tuple[list[str], int, bool]:
    """``(queries, topk, return_scores)`` of a ``/retrieve`` body; ``BadRequest`` says what is wrong."""
    try:
        req = json.loads(body)
    except RecursionError:
        raise BadRequest("the JSON is nested too deeply") from None
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError, an integer with too many digits
        raise BadRequest(f"the body is not valid JSON ({e})") from None
    if not isinstance(req, dict):
        raise BadRequest(
            f'the body must be a JSON object like {{"queries": [...], "topk": k}}, got {type(req).__name__}'
        )
    if "queries" in req:
        queries = req["queries"]
    elif "query" in req:
        queries = [req["query"]]
    else:
        raise BadRequest('the body needs "queries" (a list of strings) or "query" (a string)')
    if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
        raise BadRequest('"queries" must be a list of strings')
    if len(queries) > MAX_QUERIES:
        raise BadRequest(f"{len(queries)} queries in one request; at most {MAX_QUERIES}, split the batch")
    topk = req.get("topk")
    if topk is None:  # Search-R1's client sends null for "the server's default"
        topk = default_topk
    # bool is an int in Python and 2.5 or 1e400 (inf) are not counts: only a true integer will do.
    if type(topk) is not int or not 1 <= topk <= MAX_TOPK:
        raise BadRequest(f'"topk" must be an integer in 1..{MAX_TOPK}, got {str(topk)[:40]}')
    scores = req.get("return_scores", False)
    if not isinstance(scores, bool):
        raise BadRequest(f'"return_scores" must be true or false, got {str(scores)[:40]}')
    return queries, topk, scores


class _DeadlineReader(io.RawIOBase):
    """The read side of a connection with a whole-request deadline: a socket timeout bounds one
    read only, so a client sending a byte every ``timeout - 1`` seconds would never trip it. Idle
    (no request begun) each read waits up to ``timeout``; once a request's first bytes arrive, the
    rest of it must arrive within ``timeout`` of them (``TimeoutError``, which closes the
    connection). ``next_request()`` re-arms it between requests."""

    def __init__(self, sock: socket.socket, timeout: float) -> None:
        self.sock, self.timeout = sock, timeout
        self.deadline: float | None = None

    def readable(self) -> bool:
        return True

    def next_request(self) -> None:
        self.deadline = None

    def readinto(self, b) -> int:  # type: ignore[override]
        if self.deadline is None:
            wait = self.timeout
        else:
            wait = self.deadline - time.monotonic()
            if wait <= 0:
                raise TimeoutError(f"the request did not arrive whole within {self.timeout:g} s")
        self.sock.settimeout(wait)
        n = self.sock.recv_into(b)
        if n and self.deadline is None:
            self.deadline = time.monotonic() + self.timeout
        return n


def _handler(retriever: Retriever, n_docs: int | None, default_topk: int, request_timeout: float | None):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = request_timeout  # StreamRequestHandler puts it on the socket: a stalled client times out

        def setup(self) -> None:
            super().setup()
            self.reader: _DeadlineReader | None = None
            if request_timeout:
                self.rfile.close()
                self.reader = _DeadlineReader(self.connection, request_timeout)
                self.rfile = io.BufferedReader(self.reader)

        def handle_one_request(self) -> None:
            if self.reader is not None:
                self.reader.next_request()
            super().handle_one_request()

        def send_response(self, *args, **kwargs) -> None:
            # The request is read: the answer gets the full per-write timeout, not the deadline's rest.
            self.connection.settimeout(request_timeout)
            super().send_response(*args, **kwargs)

        def log_message(self, *args) -> None:  # keep test and training logs quiet
            pass

        def _send(self, code: int, payload: dict) -> None:
            body = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path.rstrip("/") == "/health":
                self._send(200, {"status": "ok", "documents": n_docs})
            else:
                self._send(404, {"error": f"no route GET {self.path}; use POST /retrieve"})

        def do_POST(self) -> None:
            if self.path.rstrip("/") != "/retrieve":
                self.close_connection = True  # the unread body would be taken for the next request
                return self._send(404, {"error": f"no route POST {self.path}; use POST /retrieve"})
            try:
                length = _content_length(self.headers.get("Content-Length"))
            except BadRequest as e:
                self.close_connection = True
                return self._send(400, {"error": f"bad request: {e}"})
            try:
                body = self.rfile.read(length)
            except OSError:  # timed out (a stalled client) or reset
                self.close_connection = True
                return
            if len(body) < length:  # the client hung up early
                self.close_connection = True
                return
            try:
                queries, topk, with_scores = parse_request(body, default_topk)
            except BadRequest as e:
                return self._send(400, {"error": f"bad request: {e}"})
            try:
                hits = retriever.search(queries, topk)
            except Exception as e:
                return self._send(500, {"error": f"retrieval failed: {type(e).__name__}: {e}"})
            size = sum(len(h["contents"]) + 64 for row in hits for h in row)  # a lower bound of the JSON size
            if size > MAX_RESPONSE_BYTES:
                return self._send(
                    400,
                    {
                        "error": f"bad request: the answer would exceed {MAX_RESPONSE_BYTES} bytes; "
                        "send fewer queries or a smaller topk"
                    },
                )
            docs = lambda row: [{"id": h["id"], "contents": h["contents"]} for h in row]  # noqa: E731
            if with_scores:
                result = [[{"document": d, "score": h["score"]} for d, h in zip(docs(row), row)] for row in hits]
            else:
                result = [docs(row) for row in hits]
            self._send(200, {"result": result})

    return Handler


def make_server(
    retriever: Retriever,
    host: str = "127.0.0.1",
    port: int = 8000,
    default_topk: int = 3,
    timeout: float | None = REQUEST_TIMEOUT,
) -> ThreadingHTTPServer:
    """A server bound to (host, port) (port 0: a free port, see ``server.server_address``); not started.

    ``timeout``: seconds a connection may sit idle, and seconds a request may take from its first
    byte to its last (request line, headers and body), before the connection is closed.
    """
    n_docs = len(retriever.docs) if hasattr(retriever, "docs") else None
    server = ThreadingHTTPServer((host, port), _handler(retriever, n_docs, default_topk, timeout))
    server.daemon_threads = True
    return server


def serve_in_thread(
    retriever: Retriever, host: str = "127.0.0.1", port: int = 0, timeout: float | None = REQUEST_TIMEOUT
):
    """Start a server in a daemon thread; returns ``(server, url)``. Stop with ``server.shutdown()``."""
    server = make_server(retriever, host, port, timeout=timeout)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    h, p = server.server_address[:2]
    return server, f"http://{h}:{p}/retrieve"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Search-R1-compatible BM25 retrieval server (POST /retrieve).")
    ap.add_argument("--corpus", help="JSONL corpus ({'id', 'contents'} per line); default: the generated world")
    ap.add_argument("--world-seed", type=int, default=0, help="seed of the generated world (without --corpus)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--topk", type=int, default=3, help="topk when a request does not give one")
    ap.add_argument(
        "--timeout",
        type=float,
        default=REQUEST_TIMEOUT,
        help="seconds a connection may idle, and a request may take to arrive whole, before it is closed",
    )
    args = ap.parse_args(argv)
    if args.corpus:
        retriever = BM25Retriever.from_jsonl(args.corpus)
    else:
        from gigpo.envs.search.world import generate_world

        retriever = BM25Retriever(generate_world(args.world_seed).docs)
    server = make_server(retriever, args.host, args.port, args.topk, timeout=args.timeout)
    print(
        f"serving {len(retriever.docs)} documents at http://{args.host}:{server.server_address[1]}/retrieve", flush=True
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()

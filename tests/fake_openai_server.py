"""A small OpenAI-compatible completion server for the contract tests (tests/test_policy_server.py).

Stdlib ``http.server`` on 127.0.0.1 that samples with gigpo's own ``HFGenerator`` from a model
directory, speaking the subset of vLLM's API that ``ServerGenerator`` uses: ``/health``,
``/v1/models``, ``/tokenize``, ``/v1/completions`` (token-id prompts, ``return_token_ids`` or
``return_tokens_as_token_ids``, ``logprobs: 0``, ``seed``, ``stop_token_ids``, ``stop`` strings
matched on the decoded text (``skip_special_tokens``), ``allowed_token_ids`` applied to the logits
before the log-probs, as vLLM does),
``/collective_rpc`` (``reload_weights`` with ``weights_path``) and ``/reset_prefix_cache``; and,
for the text-only API backend (``gigpo.policy.api``), ``/v1/chat/completions`` (messages through
the model's chat template) and ``/v1/completions`` with a text prompt, under ``/v1`` as an
OpenAI base URL has it. ``State.auth`` holds the last request's ``Authorization`` header and
``State.prompts`` every text prompt (chat: the user message) received; with ``State.key`` set,
``/v1`` requests without that Bearer key are answered 401.

Switches on ``FakeServer.state`` make it misbehave as real servers do: ``fail_next`` (answer 500
to that many completions), ``dead`` (500 on completions, 503 on /health: a crashed engine),
``dead_after`` (``dead`` from that completion on, counted since the start), ``token_ids``
(False: no ``return_token_ids`` field), ``id_tokens`` (False: no ``token_id:N`` tokens either),
``raw_logprobs`` (log-probs of the untempered distribution), ``allowed_ids`` (False: ignore
``allowed_token_ids``, as a server without them), ``stop_strings`` (False: ignore ``stop``),
``misbehave`` (a broken or hostile engine's completions: ``"too_many_tokens"`` 50x ``max_tokens``
ids, ``"positive_logprobs"``, ``"nan_logprobs"``, ``"out_of_vocab"`` an id past the vocabulary,
``"non_json"`` a 200 whose body is not JSON, not even UTF-8, ``"not_an_object"`` a JSON list).

As a program (``python fake_openai_server.py serve MODEL --port N ...``) it stands in for the
``vllm serve`` command that gigpo launches (other vLLM flags are ignored). There,
``--die-after-reload N`` makes the process SIGKILL itself when the N-th completion request after
its first ``reload_weights`` arrives (with gigpo's weight sync, the first is the sync's probe: N >= 2
dies mid-rollout), once: ``--die-marker PATH`` is created then, and a process started while it
exists (the restarted server) does not die.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


class State:
    def __init__(self, model_dir: str, name: str = "policy"):
        self.name = name
        self.lock = threading.Lock()
        self.fail_next = 0
        self.dead = False
        self.token_ids = True
        self.id_tokens = True
        self.raw_logprobs = False
        self.allowed_ids = True
        self.stop_strings = True
        self.misbehave: str | None = None
        self.completions = 0
        self.dead_after: int | None = None
        self.die_after_reload: int | None = None  # as a program only: it kills its own process
        self.die_marker: str | None = None
        self.since_reload: int | None = None  # completions since the first reload_weights
        self.reloads: list[str] = []
        self.auth: str | None = None
        self.key: str | None = None  # when set, /v1 requests without "Bearer <key>" get 401
        self.prompts: list[str] = []
        self.adapters: dict = {}  # LoRA name -> (model, generator), as vLLM's runtime LoRA loading
        self.load(model_dir)

    def load(self, model_dir: str) -> None:
        from gigpo.policy import HFGenerator, load_policy

        self.model, self.tok = load_policy(model_dir, device="cpu", dtype="float32")
        self.gen = HFGenerator(self.model, self.tok)

    def load_adapter(self, name: str, path: str) -> None:
        import copy

        from peft import PeftModel

        from gigpo.policy import HFGenerator

        model = PeftModel.from_pretrained(copy.deepcopy(self.model), path).eval()
        self.adapters[name] = (model, HFGenerator(model, self.tok))

    def complete(self, body: dict) -> dict:
        import numpy as np
        import torch

        from gigpo.policy import SamplingParams, token_logprobs

        params = SamplingParams(
            temperature=float(body.get("temperature", 1.0)),
            top_p=float(body.get("top_p", 1.0)),
            max_new_tokens=int(body.get("max_tokens", 16)),
            seed=body.get("seed"),
        )
        if isinstance(body["prompt"], str):
            with self.lock:
                self.prompts.append(body["prompt"])
            prompt = list(self.tok(body["prompt"], add_special_tokens=False)["input_ids"])
        else:
            prompt = [int(t) for t in body["prompt"]]
        with self.lock:
            model, gen = self.adapters.get(body.get("model"), (self.model, self.gen))
            if body.get("stop_token_ids"):
                gen.eos_ids = [int(i) for i in body["stop_token_ids"]]
            allowed = body.get("allowed_token_ids") if self.allowed_ids else None
            g = gen.generate([prompt], params, constraints=[Only(allowed)] if allowed else None)[0]
            lps = g.logprobs
            if self.raw_logprobs and len(g.token_ids):
                with torch.no_grad():
                    lp, _, _ = token_logprobs(model, [np.asarray(prompt)], [g.token_ids], pad_token_id=0)
                lps = lp[0].numpy()
        ids, finished = [int(t) for t in g.token_ids], g.finished
        stop = [body["stop"]] if isinstance(body.get("stop"), str) else body.get("stop") or []
        stop = stop if self.stop_strings else []
        skip = bool(body.get("skip_special_tokens", True))
        for k in range(len(ids) if stop else 0):  # vLLM keeps the token that completes a stop string
            if any(x in self.tok.decode(ids[: k + 1], skip_special_tokens=skip) for x in stop):
                ids, lps, finished = ids[: k + 1], lps[: k + 1], True
                break
        if body.get("return_tokens_as_token_ids") and self.id_tokens:
            tokens = [f"token_id:{t}" for t in ids]
        else:
            tokens = [self.tok.decode([t]) for t in ids]
        choice = {
            "index": 0,
            "text": self.tok.decode(ids, skip_special_tokens=True),
            "logprobs": {"tokens": tokens, "token_logprobs": [float(x) for x in lps]},
            "finish_reason": "stop" if finished else "length",
        }
        if body.get("return_token_ids") and self.token_ids:
            choice["token_ids"] = ids
        if self.misbehave:
            self._misbehave(choice, ids or [0], int(body.get("max_tokens", 16)))
        return {"object": "text_completion", "model": self.name, "choices": [choice]}

    def _misbehave(self, choice: dict, ids: list, max_tokens: int) -> None:
        lp = choice["logprobs"]
        if self.misbehave == "too_many_tokens":
            ids = (ids * (50 * max_tokens))[: 50 * max_tokens]
            lp["token_logprobs"] = [-1.0] * len(ids)
        elif self.misbehave == "positive_logprobs":
            lp["token_logprobs"] = [abs(x) + 0.5 for x in lp["token_logprobs"]]
        elif self.misbehave == "nan_logprobs":
            lp["token_logprobs"] = [float("nan")] * len(lp["token_logprobs"])
        elif self.misbehave == "out_of_vocab":
            ids = [*ids[:-1], 10_000_000]  # past any vocabulary
        else:
            return
        if "token_ids" in choice:
            choice["token_ids"] = ids
        if all(t.startswith("token_id:") for t in lp["tokens"]):
            lp["tokens"] = [f"token_id:{t}" for t in ids]

    def chat(self, body: dict) -> dict:
        """A chat completion: the messages through the model's chat template, then ``complete``."""
        with self.lock:
            self.prompts.append(body["messages"][-1]["content"])
        text = self.tok.apply_chat_template(body["messages"], tokenize=False, add_generation_prompt=True)
        ids = list(self.tok(text, add_special_tokens=False)["input_ids"])
        out = self.complete({**body, "prompt": ids, "logprobs": None})
        ch = out["choices"][0]
        msg = {"role": "assistant", "content": ch["text"]}
        return {"object": "chat.completion", "model": self.name, "choices": [{"index": 0, "message": msg}]}


class Only:
    """vLLM's ``allowed_token_ids`` as an ``HFGenerator`` constraint: every token from ``ids``."""

    def __init__(self, ids):
        self.ids = [int(i) for i in ids]

    def start(self):
        return None

    def allowed(self, st, eos_ids):
        import numpy as np

        return np.asarray(self.ids, dtype=np.int64)

    def advance(self, st, tok) -> None:
        pass


def make_handler(state: State):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet
            pass

        def _send(self, code: int, obj=None) -> None:
            data = json.dumps(obj if obj is not None else {}).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _send_text(self, text: str) -> None:
            data = text.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/health":
                self._send(503 if state.dead else 200)
            elif self.path == "/v1/models":
                self._send(200, {"data": [{"id": state.name}]})
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self):
            n = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(n) or b"{}")
            state.auth = self.headers.get("Authorization")
            if state.key is not None and self.path.startswith("/v1/") and state.auth != f"Bearer {state.key}":
                self._send(401, {"error": {"message": "Incorrect API key provided"}})
            elif self.path == "/v1/chat/completions":
                self._send(200, state.chat(body))
            elif self.path == "/v1/completions":
                with state.lock:
                    state.completions += 1
                    if state.dead_after is not None and state.completions >= state.dead_after:
                        state.dead = True
                    if state.since_reload is not None:
                        state.since_reload += 1
                    die = state.die_after_reload is not None and state.since_reload == state.die_after_reload
                    fail = state.dead or state.fail_next > 0
                    state.fail_next = max(state.fail_next - 1, 0)
                if die and not (state.die_marker and os.path.exists(state.die_marker)):
                    if state.die_marker:
                        open(state.die_marker, "w").close()
                    os.kill(os.getpid(), signal.SIGKILL)  # mid-request, as an OOM kill or a crash would
                if fail:
                    self._send(500, {"error": "EngineCore encountered an issue"})
                elif state.misbehave in ("non_json", "not_an_object"):
                    data = b"\xff\xfe<html>502 Bad Gateway" if state.misbehave == "non_json" else b"[1, 2, 3]"
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                else:
                    self._send(200, state.complete(body))
            elif self.path == "/tokenize":
                ids = state.tok(body["prompt"], add_special_tokens=bool(body.get("add_special_tokens", True)))
                self._send(200, {"tokens": list(ids["input_ids"]), "count": len(ids["input_ids"])})
            elif self.path == "/collective_rpc" and body.get("method") == "reload_weights":
                path = body.get("kwargs", {}).get("weights_path")
                with state.lock:
                    state.load(path)
                    state.reloads.append(path)
                    if state.since_reload is None:
                        state.since_reload = 0
                self._send(200, {"results": [None]})
            elif self.path == "/v1/load_lora_adapter":  # vLLM answers these two in plain text
                with state.lock:
                    state.load_adapter(body["lora_name"], body["lora_path"])
                self._send_text(f"Success: LoRA adapter '{body['lora_name']}' added successfully.")
            elif self.path == "/v1/unload_lora_adapter":
                with state.lock:
                    state.adapters.pop(body["lora_name"])
                self._send_text(f"Success: LoRA adapter '{body['lora_name']}' removed successfully.")
            elif self.path == "/reset_prefix_cache":
                self._send(200, {"success": True})
            else:
                self._send(404, {"error": f"no route {self.path}"})

    return Handler


class FakeServer:
    """``FakeServer(model_dir).start()`` -> serving on ``.url``; ``.stop()`` closes the socket."""

    def __init__(self, model_dir: str, port: int = 0, name: str = "policy"):
        self.state = State(model_dir, name)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), make_handler(self.state))
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def start(self) -> FakeServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def main(argv: list[str]) -> None:
    """``serve MODEL --port N [--served-model-name NAME] [--die-after-reload N --die-marker PATH]
    [ignored vllm flags]``: serve until killed."""
    sys.path.insert(0, str(SRC))
    args = argv[1:] if argv and argv[0] == "serve" else argv
    model, port, name, die_after, marker = args[0], 0, "policy", None, None
    for i, a in enumerate(args):
        if a == "--port":
            port = int(args[i + 1])
        if a == "--served-model-name":
            name = args[i + 1]
        if a == "--die-after-reload":
            die_after = int(args[i + 1])
        if a == "--die-marker":
            marker = args[i + 1]
    srv = FakeServer(model, port=port, name=name)
    srv.state.die_after_reload, srv.state.die_marker = die_after, marker
    print(f"fake server on {srv.url}", flush=True)
    srv.httpd.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])

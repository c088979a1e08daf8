"""``ServerGenerator``: rollouts sampled by an inference engine behind OpenAI-compatible HTTP servers.

The trainer's prompt token ids go to ``POST /v1/completions`` as ``prompt``; the server returns
the exact generated ids (``return_token_ids``, or ``return_tokens_as_token_ids`` tokens
``"token_id:N"`` from a server without the former) and each sampled token's log-prob
(``logprobs: 0``). Responses are never re-tokenized. Each prompt is its own request with its own
seed (derived from ``SamplingParams.seed`` and the row), so the rollouts of a group differ and a
run repeats where the engine is deterministic; the engine batches concurrent requests itself.

Before the first rollout, ``probe()`` checks every server: ``/health``, the served model name,
``/tokenize`` against the trainer's tokenizer on a sample prompt, and one completion: token ids
and log-probs present, and (given the trainer's model) log-probs equal to the trainer's own
recomputation (``token_logprobs``) within ``logprob_tolerance``. That last check catches a server
that returns raw instead of sampling log-probs (vLLM: start it with ``--logprobs-mode
processed_logprobs``) or serves other weights.

Action constraints (``rollout.constrain_actions``: ``generate(..., constraints=...)``, as
``HFGenerator`` takes them): a constrained row is sampled as ``HFGenerator`` samples it, in
several requests (``_constrained``): free text that stops at the open tag, then each restricted
token with ``allowed_token_ids`` (vLLM masks the logits to them before its sampling log-probs).
The first constrained call checks that every server applies them (``check_masking``).

Weight sync (``sync_weights``): the policy is written to a new directory under ``sync_dir``
(atomically) and every server reloads it in place (vLLM's dev-mode ``POST /collective_rpc``
``reload_weights`` with ``weights_path``, then ``POST /reset_prefix_cache``: cached prefixes were
computed with the old weights); a probe then checks the server's log-probs against the model.
``policy_version`` names the weights the servers hold; the rollout records it per row.

Every completion is checked before it reaches a rollout (``_parse``): a JSON object with a
choice, at most the request's ``max_tokens`` ids, each an integer in ``[0, vocab_size)``, one
finite log-prob <= ``LOGPROB_EPS`` per id; otherwise ``ServerError`` names the check and the server.

A server that stays down once a request's retries are used up raises ``ServerDown``. When
``revive`` is set (``gigpo.train.serving.ServerBackend`` sets it for the vLLM server it started),
``generate`` and ``sync_weights`` hand the failure to it: it brings the server back holding the
weights of ``policy_version`` (or says no), the server is probed again, and the interrupted call
is redone whole with the same per-row seeds (the rows it had already received are dropped).
Threads that see the same death wait for one revival and retry.

Docs: docs/serving.md.
"""

from __future__ import annotations

import itertools
import shutil
import threading
import time
import uuid
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from gigpo.policy.base import Generation, SamplingParams

# A short ChatML exchange: the probe's prompt (tokenizer agreement and one completion).
PROBE_MESSAGES = [
    {"role": "user", "content": "You are in the middle of a room. Your task is to: put a mug in the sink."}
]
PROBE_TEMPERATURE = 0.7  # != 1, so raw (untempered) log-probs would not pass for processed ones
PROBE_TOKENS = 8
RETRY_STATUS = (429, 500, 502, 503, 504)
LOGPROB_EPS = 1e-4  # a sampled token's log-prob above this (it is <= 0 up to rounding) is refused


class ServerError(RuntimeError):
    """An inference server is unreachable, dead, or does not honour the exact-token contract."""


class ServerDown(ServerError):
    """Server ``url`` failed a request after its retries (connection errors, 5xx answers)."""

    def __init__(self, url: str, message: str) -> None:
        super().__init__(message)
        self.url = url


def row_seed(seed: int | None, row: int) -> int | None:
    """The sampling seed of prompt ``row`` in a call with ``SamplingParams.seed`` = ``seed``."""
    if seed is None:
        return None
    return int(np.random.SeedSequence([int(seed) & 0xFFFFFFFF, row]).generate_state(1)[0] & 0x7FFFFFFF)


class ServerGenerator:
    """``Generator`` over one or more OpenAI-compatible ``/v1/completions`` servers.

    Args:
        tokenizer: the trainer's tokenizer (probe only; prompts are already token ids).
        urls: base URLs (``http://127.0.0.1:8000``); requests go to the least loaded.
        model: the served model name (``""``: the first one ``/v1/models`` lists).
        policy: the trainer's model: the probe compares the server's log-probs with it.
        eos_token_ids: ids that end a response (default ``default_eos_ids(policy, tokenizer)``).
        timeout_s: seconds one request may take.
        concurrency: requests in flight per server.
        max_retries: retries of a request after a connection error or a 5xx, with backoff.
        backoff_s: first retry's delay (doubles per retry).
        sync_dir: where ``sync_weights`` writes the policy for the servers to load.
        logprob_tolerance: max |server - trainer| log-prob in the probe.
        vocab_size: ids a server may return are in ``[0, vocab_size)`` (default: the larger of
            ``len(tokenizer)`` and ``policy.config.vocab_size``, its embedding rows).
        lora: the policy is a peft LoRA model and the servers hold its base weights: a weight sync
            loads the adapter (``POST /v1/load_lora_adapter``) and requests name it.
        probe: run ``probe()`` now.
    """

    def __init__(
        self,
        tokenizer,
        urls: Sequence[str],
        *,
        model: str = "",
        policy=None,
        eos_token_ids: Sequence[int] | None = None,
        timeout_s: float = 300.0,
        concurrency: int = 16,
        max_retries: int = 3,
        backoff_s: float = 0.5,
        sync_dir: str | Path | None = None,
        logprob_tolerance: float = 0.02,
        lora: bool = False,
        probe: bool = True,
        vocab_size: int | None = None,
    ) -> None:
        import httpx

        if not urls:
            raise ValueError("ServerGenerator needs at least one server URL")
        if concurrency < 1 or max_retries < 0 or timeout_s <= 0:
            raise ValueError(
                f"ServerGenerator: concurrency >= 1, max_retries >= 0 and timeout_s > 0 needed, got "
                f"{concurrency}, {max_retries}, {timeout_s}"
            )
        self.tokenizer = tokenizer
        self.urls = [u.rstrip("/") for u in urls]
        self.model = model
        self.policy = policy
        if eos_token_ids is None:
            from gigpo.policy.generate import default_eos_ids

            eos_token_ids = default_eos_ids(policy, tokenizer)
        self.eos_ids = [int(i) for i in eos_token_ids]
        if vocab_size is None:
            sizes = [len(tokenizer), int(getattr(getattr(policy, "config", None), "vocab_size", 0) or 0)]
            vocab_size = max(sizes)
        self.vocab_size = int(vocab_size)
        self.timeout_s = float(timeout_s)
        self.concurrency = int(concurrency)
        self.max_retries = int(max_retries)
        self.backoff_s = float(backoff_s)
        self.sync_dir = Path(sync_dir) if sync_dir else None
        self.logprob_tolerance = float(logprob_tolerance)
        self.lora = bool(lora)
        # LoRA: the adapter requests name (None: the base model) and where it was saved. Names carry
        # a per-process tag: a server that outlives a run may still hold its predecessor's names.
        self.adapter: str | None = None
        self.adapter_dir: Path | None = None
        self._lora_tag = uuid.uuid4().hex[:8]
        self.policy_version: int | None = None  # the weights version the servers hold (sync_weights)
        self.server_log = ""  # where a server's log is, for messages (a server gigpo started)
        self.ids_field = "token_ids"  # or "tokens" (return_tokens_as_token_ids), set by the probe
        self._masks_checked = False  # check_masking passed on every server (at the first constrained call)
        # ``revive(url, error) -> bool``: bring a server that is down back with the weights of
        # ``policy_version`` (True), or decline (False: the error stands). Module docstring.
        self.revive: Callable[[str, str], bool] | None = None
        self._revive_lock = threading.Lock()
        self._revivals = 0  # revivals so far; a call that began before one retries without another
        self._inflight = dict.fromkeys(self.urls, 0)
        self._lock = threading.Lock()
        self._rr = itertools.count()
        n = self.concurrency * len(self.urls)
        self._client = httpx.Client(
            timeout=httpx.Timeout(self.timeout_s, connect=min(10.0, self.timeout_s)),
            limits=httpx.Limits(max_connections=n, max_keepalive_connections=n),
        )
        self._pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="gigpo-server")
        if probe:
            self.probe()

    # ------------------------------------------------------------------ HTTP plumbing
    def _pick(self, avoid: str | None = None) -> str:
        """The least loaded server (ties in turn), another than ``avoid`` when there is one."""
        with self._lock:
            cands = [u for u in self.urls if u != avoid] or self.urls
            low = min(self._inflight[u] for u in cands)
            best = [u for u in cands if self._inflight[u] == low]
            url = best[next(self._rr) % len(best)]
            self._inflight[url] += 1
            return url

    def _release(self, url: str) -> None:
        with self._lock:
            self._inflight[url] -= 1

    def health(self, url: str) -> str:
        """``"ok"`` when ``GET url/health`` answers 200, else what went wrong (for messages)."""
        import httpx

        try:
            r = self._client.get(f"{url}/health", timeout=min(10.0, self.timeout_s))
        except httpx.HTTPError as e:
            return f"GET /health failed: {type(e).__name__}: {e}"
        return "ok" if r.status_code == 200 else f"GET /health answered {r.status_code}"

    def _down(self, url: str, what: str) -> ServerDown:
        log = f" ({self.server_log})" if self.server_log else ""
        return ServerDown(
            url,
            f"inference server {url} {what} (health: {self.health(url)}); check that it still runs "
            f"(its log{log} says why it stopped), restart it and resume the run with --resume",
        )

    def _post(
        self, path: str, body: dict, url: str | None = None, abort: threading.Event | None = None, text: bool = False
    ) -> dict:
        """``_post_at``'s answer alone."""
        return self._post_at(path, body, url, abort, text)[0]

    def _post_at(
        self, path: str, body: dict, url: str | None = None, abort: threading.Event | None = None, text: bool = False
    ) -> tuple[dict, str]:
        """(answer, the URL that gave it): POST ``body`` to ``path`` on ``url`` (default: the least
        loaded server), retrying connection errors and 5xx answers ``max_retries`` times with backoff, on another
        server when there is one. Raises ``ServerError`` naming the server (``ServerDown`` when
        the retries are used up). ``abort`` set: no further attempt (another request of the same
        call failed). ``text``: the answer is plain text (vLLM's LoRA endpoints), as ``{"text": ...}``."""
        import httpx

        last, tried = "", url
        for attempt in range(self.max_retries + 1):
            if attempt and abort is not None and abort.is_set():
                raise ServerDown(tried or "?", f"{path} abandoned: another request of the same call failed ({last})")
            u = url or self._pick(avoid=tried if attempt else None)
            try:
                r = self._client.post(f"{u}{path}", json=body)
            except httpx.HTTPError as e:
                last, tried = f"{type(e).__name__}: {e}", u
            else:
                if r.status_code == 200 and text:
                    return {"text": r.text}, u
                if r.status_code == 200:
                    try:
                        return (r.json() if r.content else {}), u
                    except ValueError:  # JSONDecodeError, or bytes that are not UTF-8 at all
                        raise ServerError(
                            f"inference server {u}: {path} answered non-JSON: {r.content[:200]!r}"
                        ) from None
                if r.status_code not in RETRY_STATUS:
                    raise ServerError(f"inference server {u}: {path} answered {r.status_code}: {r.text[:500]}")
                last, tried = f"HTTP {r.status_code}: {r.text[:200]}", u
            finally:
                if url is None:
                    self._release(u)
            if attempt < self.max_retries:
                delay = self.backoff_s * 2**attempt
                if abort is not None:
                    abort.wait(delay)
                else:
                    time.sleep(delay)
        raise self._down(tried or "?", f"failed {path} {self.max_retries + 1} time(s) (last: {last})")

    # ------------------------------------------------------------------ Generator
    def _body(self, prompt: Sequence[int], params: SamplingParams, seed: int | None, max_tokens: int) -> dict:
        body: dict[str, Any] = {
            "model": self.adapter or self.model,
            "prompt": [int(t) for t in prompt],
            "max_tokens": int(max_tokens),
            "temperature": float(params.temperature),
            "top_p": float(params.top_p),
            # Explicit neutral values: vLLM would otherwise take the model's generation_config
            # defaults (top_k, repetition penalty), which gigpo's samplers and log-probs do not use.
            "top_k": 0,
            "min_p": 0.0,
            "repetition_penalty": 1.0,
            "logprobs": 0,
            "stop_token_ids": self.eos_ids,
            "n": 1,
        }
        if self.ids_field == "token_ids":
            body["return_token_ids"] = True
        else:
            body["return_tokens_as_token_ids"] = True
        if seed is not None:
            body["seed"] = int(seed)
        return body

    def _parse(self, resp: dict, url: str = "", max_tokens: int | None = None) -> Generation:
        """One choice -> ``Generation``; ``ServerError`` when ids or log-probs are missing, or when
        the answer fails a check (module docstring): nothing unchecked reaches a rollout."""

        def bad(check: str, what: str) -> ServerError:
            return ServerError(f"inference server {url}: completion refused ({check} check): {what}")

        try:
            ch = resp["choices"][0]
        except (KeyError, IndexError, TypeError):
            raise ServerError(f"inference server {url}: a completion without choices: {str(resp)[:300]}") from None
        if not isinstance(ch, dict):
            raise bad("format", f"a choice is {type(ch).__name__}, not a JSON object: {str(ch)[:200]}")
        lp = ch.get("logprobs") or {}
        if not isinstance(lp, dict):
            raise bad("format", f'"logprobs" is {type(lp).__name__}, not a JSON object: {str(lp)[:200]}')
        ids = ch.get("token_ids")
        if ids is None:
            toks = lp.get("tokens") or []
            if toks and all(isinstance(t, str) and t.startswith("token_id:") for t in toks):
                try:
                    ids = [int(t.split(":", 1)[1]) for t in toks]
                except ValueError:
                    raise bad("token id", f"a token_id:N token without an integer N: {toks[:8]}") from None
        if ids is None:
            raise ServerError(
                f"inference server {url} returns no token ids (neither return_token_ids nor "
                "return_tokens_as_token_ids tokens); gigpo trains on the sampled ids and never "
                "re-tokenizes text: use a server that returns them (vLLM >= 0.10)"
            )
        if not isinstance(ids, list) or not all(type(t) is int for t in ids):
            raise bad("token id", f"token_ids is not a list of integers: {str(ids)[:200]}")
        if max_tokens is not None and len(ids) > max_tokens:
            raise bad("token count", f"{len(ids)} tokens for a request of max_tokens {max_tokens}")
        out = [t for t in ids if not 0 <= t < self.vocab_size]
        if out:
            raise bad("vocabulary", f"token id {out[0]} is outside the vocabulary [0, {self.vocab_size})")
        lps = lp.get("token_logprobs")
        if lps is None or not isinstance(lps, list) or len(lps) != len(ids) or any(x is None for x in lps):
            raise ServerError(
                f"inference server {url} returns no log-prob per sampled token (logprobs: 0); "
                f"got {len(lps) if isinstance(lps, list) else 0} for {len(ids)} tokens"
            )
        if not all(type(x) in (int, float) for x in lps):
            raise bad("log-prob", f"token_logprobs holds non-numbers: {str(lps)[:200]}")
        arr = np.asarray(lps, dtype=np.float64)
        if not np.isfinite(arr).all():
            raise bad("log-prob", f"a log-prob is not finite ({arr[~np.isfinite(arr)][0]})")
        if len(arr) and arr.max() > LOGPROB_EPS:
            raise bad("log-prob", f"log-prob {arr.max():.6g} > 0 (a log-probability is at most 0)")
        finished = ch.get("finish_reason") == "stop"
        return Generation(
            token_ids=np.asarray(ids, dtype=np.int32),
            logprobs=np.minimum(arr, 0.0).astype(np.float32),
            finished=bool(finished and len(ids) and int(ids[-1]) in self.eos_ids),
        )

    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams, constraints: Sequence | None = None
    ) -> list[Generation]:
        """One response per prompt, sampled by the servers (see module docstring).

        ``constraints``: per prompt an ``ActionConstraint`` or None (``gigpo.policy.constrain``),
        as ``HFGenerator.generate`` takes them (``_constrained``)."""
        from gigpo.policy.generate import check_params

        check_params(params)
        cons = list(constraints) if constraints is not None else [None] * len(prompts)
        if len(cons) != len(prompts):
            raise ValueError(f"generate: {len(cons)} constraints for {len(prompts)} prompts")
        for i, p in enumerate(prompts):
            if len(p) == 0:
                raise ValueError(f"prompt {i} is empty; every prompt needs at least one token")
        # Each row's requests carry seeds derived from its row seed, so a call redone after a
        # revival samples as the interrupted one would have (on a deterministic engine, the same tokens).
        seeds = [row_seed(params.seed, i) for i in range(len(prompts))]
        while True:
            seen = self._revivals
            try:
                if not self._masks_checked and any(c is not None for c in cons):
                    for u in self.urls:
                        self.check_masking(u)
                    self._masks_checked = True
                return self._run_all(prompts, params, seeds, cons)
            except ServerDown as e:
                if not self._revive(e, seen, compare=True):
                    raise

    def _run_all(self, prompts, params: SamplingParams, seeds: list, cons: list) -> list[Generation]:
        """``_sample`` of every row, or the first row's error; then the others stop retrying."""
        abort = threading.Event()
        futs = [self._pool.submit(self._sample, p, params, s, c, abort) for p, s, c in zip(prompts, seeds, cons)]
        wait(futs, return_when=FIRST_EXCEPTION)
        for f in futs:
            if f.done() and f.exception() is not None:
                abort.set()
                for g in futs:
                    g.cancel()
                raise f.exception()  # type: ignore[misc]
        return [f.result() for f in futs]

    def _sample(
        self, prompt, params: SamplingParams, seed: int | None, constraint, abort: threading.Event
    ) -> Generation:
        if constraint is None:
            return self._completion(self._body(prompt, params, seed, params.max_new_tokens), abort)
        return self._constrained(prompt, params, seed, constraint, abort)

    def _completion(self, body: dict, abort: threading.Event | None = None) -> Generation:
        resp, url = self._post_at("/v1/completions", body, abort=abort)
        return self._parse(resp, url, max_tokens=int(body["max_tokens"]))

    def _constrained(self, prompt, params: SamplingParams, seed: int | None, c, abort=None) -> Generation:
        """One response under the action constraint ``c``, sampled as ``HFGenerator`` samples it.

        ``c``'s own state machine (``ActionConstraint.allowed`` / ``advance``) walks the response.
        Free text comes from completions that stop at the open tag (``stop``; the engine matches
        it on the decoded text, so its tokens are walked here, and tokens after the point where
        the walk entered the trie are dropped, a stop it missed continues free). Each restricted
        token is its own one-token completion with ``allowed_token_ids``: vLLM masks the logits
        to those ids before temperature and top-p, so the returned log-prob is that of the
        renormalised distribution, as ``token_logprobs(..., allowed=...)`` recomputes it. A
        position with one allowed id (most of a trie) takes it with log-prob 0, as the masked
        distribution gives, without a request. Requests after the first carry seeds derived from
        the row's seed and the position.
        """
        st, n = c.start(), int(params.max_new_tokens)
        ids: list[int] = []
        lps: list[float] = []
        allowed: list = []
        while len(ids) < n and not (ids and ids[-1] in self.eos_ids):
            k, ok = len(ids), c.allowed(st, self.eos_ids)
            s = row_seed(seed, k) if k else seed
            if ok is not None:
                allowed.append((k, ok))
            if ok is not None and len(ok) == 1:
                new = [(int(ok[0]), 0.0)]
            else:
                body = self._body([*prompt, *ids], params, s, n - k if ok is None else 1)
                if ok is not None:
                    body["allowed_token_ids"] = [int(t) for t in ok]
                elif st.mode == "free":
                    body.update(stop=[c.vocab.open_tag], skip_special_tokens=False)
                g = self._completion(body, abort)
                new = list(zip(g.token_ids.tolist(), g.logprobs.tolist()))
                if ok is not None and (len(new) != 1 or new[0][0] not in ok):
                    raise ServerError(
                        f"inference server returned tokens {[t for t, _ in new]} for a completion with "
                        f"allowed_token_ids {ok.tolist()}: it does not apply them"
                    )
                if not new:  # no token at all (vLLM always gives one): the response ends here
                    break
            for t, lp in new:
                mode = st.mode
                ids.append(t)
                lps.append(lp)
                c.advance(st, t)
                if mode == "free" and st.mode == "trie":
                    break  # restricted from the next token on
        return Generation(
            token_ids=np.asarray(ids, dtype=np.int32),
            logprobs=np.asarray(lps, dtype=np.float32),
            finished=bool(ids and ids[-1] in self.eos_ids),
            allowed=allowed,
        )

    def check_masking(self, url: str) -> None:
        """``url`` applies ``allowed_token_ids`` before its log-probs (what ``_constrained`` needs):
        a completion allowed one id must return that id with log-prob 0."""
        ids = self.probe_prompt()[1]
        params = SamplingParams(temperature=PROBE_TEMPERATURE, max_new_tokens=1)
        body = {**self._body(ids, params, 0, 1), "allowed_token_ids": [ids[0]]}
        g = self._parse(self._post("/v1/completions", body, url=url), url, max_tokens=1)
        if g.token_ids.tolist() != [ids[0]] or not abs(float(g.logprobs[0])) < 1e-5:
            raise ServerError(
                f"inference server {url} does not apply allowed_token_ids: a completion allowed only "
                f"token {ids[0]} returned {g.token_ids.tolist()} with log-probs {g.logprobs.tolist()}; "
                "rollout.constrain_actions with rollout.backend=server needs a server that masks the "
                "logits to allowed_token_ids before its log-probs (vLLM, --logprobs-mode processed_logprobs)"
            )

    def _revive(self, err: ServerDown, seen: int, compare: bool) -> bool:
        """Hand ``err`` to ``revive`` and probe the revived server; True: redo the call.

        ``seen``: ``_revivals`` when the failed call began. When it has grown since, another
        thread already revived the servers after the same death, and the call is simply redone.
        ``compare``: check the revived server's log-probs against ``policy`` (which holds the
        weights of ``policy_version`` between syncs, not during one).
        """
        if self.revive is None:
            return False
        with self._revive_lock:
            if self._revivals == seen:
                if not self.revive(err.url, str(err)):
                    return False
                self._revivals += 1
                self._masks_checked = False  # a restarted server is checked again at the next constrained call
                self.probe(compare=compare)
        return True

    # ------------------------------------------------------------------ probe
    def probe(self, compare: bool = True) -> dict:
        """Check every server (module docstring); returns what was measured. Raises ``ServerError``.

        ``compare=False`` skips the log-prob comparison with ``policy`` (a server about to be
        given the policy's weights by ``sync_weights``, which compares them then)."""
        for u in self.urls:
            h = self.health(u)
            if h != "ok":
                raise ServerError(
                    f"no inference server answers at {u} ({h}); start one (`gigpo serve --config ...`) "
                    "or leave rollout.server.urls empty to let gigpo start one"
                )
        models = {u: [m.get("id") for m in self._get(u, "/v1/models").get("data", [])] for u in self.urls}
        if not self.model:
            self.model = next((m for m in models[self.urls[0]] if m), "")
            if not self.model:
                raise ServerError(f"inference server {self.urls[0]} lists no model at /v1/models")
        for u, names in models.items():
            if self.model not in names:
                raise ServerError(f"inference server {u} does not serve model {self.model!r} (it serves {names})")
        report: dict[str, Any] = {"model": self.model}
        text, ids = self.probe_prompt()
        for u in self.urls:
            tok = self._post("/tokenize", {"model": self.model, "prompt": text, "add_special_tokens": False}, url=u)
            if list(tok.get("tokens") or []) != ids:
                raise ServerError(
                    f"inference server {u} tokenizes a sample prompt differently from the trainer's "
                    f"tokenizer ({len(tok.get('tokens') or [])} vs {len(ids)} tokens): serve the "
                    "trainer's model directory (tokenizer included)"
                )
            report[u] = self.check_logprobs(u, ids, compare=compare)
        return report

    def probe_prompt(self) -> tuple[str, list[int]]:
        """The probe's prompt as text and as the trainer's token ids."""
        tok = self.tokenizer
        if getattr(tok, "chat_template", None):
            text = tok.apply_chat_template(PROBE_MESSAGES, tokenize=False, add_generation_prompt=True)
        else:
            text = PROBE_MESSAGES[0]["content"]
        return text, list(tok(text, add_special_tokens=False)["input_ids"])

    def check_logprobs(self, url: str, ids: Sequence[int] | None = None, compare: bool = True) -> dict:
        """One completion from ``url``: ids and log-probs present, and (given ``policy`` and
        ``compare``) its log-probs within ``logprob_tolerance`` of the trainer's. Returns
        ``max_abs_diff``."""
        ids = list(ids if ids is not None else self.probe_prompt()[1])
        params = SamplingParams(temperature=PROBE_TEMPERATURE, top_p=1.0, max_new_tokens=PROBE_TOKENS, seed=0)
        resp = self._post("/v1/completions", self._body(ids, params, 0, PROBE_TOKENS), url=url)
        ch = (resp.get("choices") or [{}])[0] if isinstance(resp, dict) else {}
        if self.ids_field == "token_ids" and isinstance(ch, dict) and ch.get("token_ids") is None:
            self.ids_field = "tokens"  # a server without return_token_ids: ask for "token_id:N" tokens
            resp = self._post("/v1/completions", self._body(ids, params, 0, PROBE_TOKENS), url=url)
        gen = self._parse(resp, url, max_tokens=PROBE_TOKENS)
        out: dict[str, Any] = {"ids_field": self.ids_field, "tokens": len(gen.token_ids)}
        if not compare or self.policy is None or not len(gen.token_ids):
            return out
        import torch

        from gigpo.learner.logprobs import token_logprobs

        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.eos_ids[0]
        was_training = self.policy.training
        self.policy.eval()
        try:
            with torch.no_grad():
                ref, _, _ = token_logprobs(
                    self.policy, [np.asarray(ids)], [gen.token_ids], pad_token_id=pad, temperature=PROBE_TEMPERATURE
                )
        finally:
            self.policy.train(was_training)
        diff = float(np.abs(ref[0, : len(gen.token_ids)].float().cpu().numpy() - gen.logprobs).max())
        out["max_abs_diff"] = diff
        if not diff <= self.logprob_tolerance:
            raise ServerError(
                f"inference server {url}: its log-probs differ from the trainer's by up to {diff:.4f} "
                f"(tolerance {self.logprob_tolerance}) on a probe at temperature {PROBE_TEMPERATURE}: "
                "it returns raw instead of sampling log-probs (vLLM: --logprobs-mode "
                "processed_logprobs), runs another dtype (--dtype float32), or holds other weights "
                "than the trainer's model"
            )
        return out

    def _get(self, url: str, path: str) -> dict:
        import httpx

        try:
            r = self._client.get(f"{url}{path}")
        except httpx.HTTPError as e:
            raise self._down(url, f"failed GET {path} ({type(e).__name__}: {e})") from e
        if r.status_code != 200:
            raise ServerError(f"inference server {url}: GET {path} answered {r.status_code}: {r.text[:300]}")
        return r.json()

    # ------------------------------------------------------------------ weight sync
    def sync_weights(self, model, version: int) -> float:
        """Make every server sample from ``model``'s weights, recorded as ``policy_version``.

        Writes ``sync_dir/v<version>`` atomically (``save_for_serving``), asks each server to
        reload from it and to drop its prefix cache, then checks the server's log-probs against
        ``model``. With ``lora`` only the adapter moves (``_sync_adapter``). Returns the seconds
        it took.
        """
        if self.sync_dir is None:
            raise ServerError("ServerGenerator.sync_weights needs sync_dir (where the servers load weights from)")
        if self.lora:
            return self._sync_adapter(model, version)
        t0 = time.perf_counter()
        target = self._write_version("v", version, lambda d: save_for_serving(model, self.tokenizer, d))
        # Revived on the weights of ``policy_version`` (still on disk); then load again.
        self._with_revival(lambda: self._load(model, target))
        self.policy_version = int(version)
        self._drop_versions("v", target)  # the servers hold the new weights; older copies go
        return time.perf_counter() - t0

    def _load(self, model, target: Path) -> None:
        """Every server reloads its weights from ``target`` and is checked against ``model``."""
        for u in self.urls:
            self._post("/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": str(target)}}, url=u)
            self._post("/reset_prefix_cache", {}, url=u)
        self._check_against(model)

    def _sync_adapter(self, model, version: int) -> float:
        """LoRA weight sync: ``model``'s adapter saved to ``sync_dir/lora-v<version>`` (atomically),
        loaded into every server under a new name, checked against ``model``; the previous
        adapter is then unloaded and its files removed. Returns the seconds it took."""
        if not hasattr(model, "peft_config"):
            raise ServerError("ServerGenerator(lora=True).sync_weights needs a peft LoRA model")
        t0 = time.perf_counter()
        # peft's save_pretrained writes the adapter only (adapter_config.json + weights)
        target = self._write_version("lora-v", version, model.save_pretrained)
        name = f"gigpo-{self._lora_tag}-v{int(version):06d}"
        # revived holding the previous adapter; then load again
        self._with_revival(lambda: self._load_adapters(name, target))
        previous, self.adapter, self.adapter_dir = self.adapter, name, target
        self._check_against(model)
        self.policy_version = int(version)
        if previous is not None:
            for u in self.urls:
                self._post("/v1/unload_lora_adapter", {"lora_name": previous}, url=u, text=True)
        self._drop_versions("lora-v", target)
        return time.perf_counter() - t0

    def _write_version(self, prefix: str, version: int, write: Callable[[Path], Any]) -> Path:
        """``write(dir)`` into a temporary directory renamed to ``sync_dir/<prefix><version>``, so a
        server never reads a half-written one."""
        assert self.sync_dir is not None
        target = self.sync_dir / f"{prefix}{int(version):06d}"
        tmp = self.sync_dir / f".tmp-{prefix}{int(version):06d}"
        shutil.rmtree(tmp, ignore_errors=True)
        write(tmp)
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)
        return target

    def _drop_versions(self, prefix: str, keep: Path) -> None:
        assert self.sync_dir is not None
        for old in self.sync_dir.glob(f"{prefix}*"):
            if old != keep and old.is_dir():
                shutil.rmtree(old, ignore_errors=True)

    def _with_revival(self, load: Callable[[], Any]) -> None:
        """``load()``, redone after ``revive`` brought a dead server back (module docstring)."""
        while True:
            seen = self._revivals
            try:
                load()
                return
            except ServerDown as e:
                if not self._revive(e, seen, compare=False):
                    raise

    def _check_against(self, model) -> None:
        """Every server's log-probs checked against ``model`` (``check_logprobs``)."""
        policy, self.policy = self.policy, model
        try:
            for u in self.urls:
                self.check_logprobs(u)
        finally:
            self.policy = policy

    def _load_adapters(self, name: str, path: Path) -> None:
        for u in self.urls:
            self.load_adapter(u, name, path)

    def load_adapter(self, url: str, name: str | None = None, path: Path | None = None) -> None:
        """Load a LoRA adapter into ``url`` (default: the current one, e.g. into a restarted server)."""
        name, path = name or self.adapter, path or self.adapter_dir
        if name is None or path is None:
            return
        self._post("/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(path)}, url=url, text=True)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._client.close()


def save_for_serving(model, tokenizer, out: str | Path) -> Path:
    """``model`` (full weights) and ``tokenizer`` as a Hugging Face directory an engine can load and
    reload in place.

    A peft LoRA model gives its base weights (without the adapter: ``sync_weights`` loads that).
    Tied input/output embeddings are written untied (``lm_head.weight`` a copy of the embedding,
    ``tie_word_embeddings: false``): vLLM's in-place reload leaves a tied LM head holding the old
    weights, so a served model must own its head. Same numbers, one matrix more on the server.
    """
    import torch
    from safetensors.torch import save_file

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if hasattr(model, "peft_config"):  # a LoRA model: its base weights (the adapter goes by sync)
        model = model.get_base_model()
        sd = {
            k.replace(".base_layer.", "."): v.detach().to("cpu").contiguous().clone()
            for k, v in model.state_dict().items()
            if ".lora_" not in k
        }
    else:
        sd = {k: v.detach().to("cpu").contiguous().clone() for k, v in model.state_dict().items()}
    cfg = model.config
    tied = bool(getattr(cfg, "tie_word_embeddings", False))
    if tied and "lm_head.weight" not in sd:
        emb = model.get_input_embeddings().weight
        sd["lm_head.weight"] = emb.detach().to("cpu").contiguous().clone()
    with torch.no_grad():
        save_file(sd, str(out / "model.safetensors"), metadata={"format": "pt"})
    d = cfg.to_dict()
    d["tie_word_embeddings"] = False
    type(cfg).from_dict(d).save_pretrained(out)
    gc = getattr(model, "generation_config", None)
    if gc is not None:
        gc.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out

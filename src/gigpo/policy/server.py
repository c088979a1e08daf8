"""``ServerGenerator``: rollouts sampled by an inference engine behind OpenAI-compatible HTTP servers.

The trainer's prompt token ids go to ``POST /v1/completions`` as ``prompt``; the server returns
the exact generated ids (``return_token_ids``, or ``return_tokens_as_token_ids`` tokens
``"token_id:N"`` from a server without the former) and each sampled token's log-prob
(``logprobs: 0``). Responses are never re-tokenized. Each prompt is its own request with its own
seed (derived from ``SamplingParams.seed`` and the row), so the rollouts of a group differ and a
run repeats where the engine is deterministic; the engine batches concurrent requests itself.

Before the first rollout, ``probe()`` checks every server, and every completion is checked before
it reaches a rollout (``gigpo.policy.server_checks``).

Action constraints (``rollout.constrain_actions``: ``generate(..., constraints=...)``, as
``HFGenerator`` takes them): a constrained row is sampled as ``HFGenerator`` samples it, in
several requests (``_constrained``): free text that stops at the open tag, then each restricted
token with ``allowed_token_ids`` (vLLM masks the logits to them before its sampling log-probs).
The first constrained call checks that every server applies them (``check_masking``).

Weight sync (``sync_weights``, LoRA adapters): ``gigpo.policy.server_sync``.
``policy_version`` names the weights the servers hold; the rollout records it per row.

A server that stays down once a request's retries are used up raises ``ServerDown``. When
``revive`` is set (``gigpo.train.serving.ServerBackend`` sets it for the vLLM server it started),
``generate`` and ``sync_weights`` hand the failure to it: it brings the server back holding the
weights of ``policy_version`` (or says no), the server is probed again, and the interrupted call
is redone whole with the same per-row seeds (the rows it had already received are dropped).
Threads that see the same death wait for one revival and retry.

Docs: docs/serving.md.

This module holds the ``ServerGenerator`` client (HTTP plumbing, generation, revival); its
probe and completion checks come from ``server_checks.CompletionChecks`` and its weight sync from
``server_sync.WeightSync``. The names of both modules are importable from here as before.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from gigpo.policy.base import Generation, SamplingParams
from gigpo.policy.server_checks import (
    LOGPROB_EPS,
    PROBE_MESSAGES,
    PROBE_TEMPERATURE,
    PROBE_TOKENS,
    ServerDown,
    ServerError,
)
from gigpo.policy.server_sync import WeightSync, save_for_serving

__all__ = [
    "LOGPROB_EPS",
    "PROBE_MESSAGES",
    "PROBE_TEMPERATURE",
    "PROBE_TOKENS",
    "RETRY_STATUS",
    "ServerDown",
    "ServerError",
    "ServerGenerator",
    "row_seed",
    "save_for_serving",
]

RETRY_STATUS = (429, 500, 502, 503, 504)


def row_seed(seed: int | None, row: int) -> int | None:
    """The sampling seed of prompt ``row`` in a call with ``SamplingParams.seed`` = ``seed``."""
    if seed is None:
        return None
    return int(np.random.SeedSequence([int(seed) & 0xFFFFFFFF, row]).generate_state(1)[0] & 0x7FFFFFFF)


class ServerGenerator(WeightSync):
    """``Generator`` over one or more OpenAI-compatible ``/v1/completions`` servers.

    The probe and the completion checks (``probe``, ``check_logprobs``, ``check_masking``,
    ``_parse``) come from ``server_checks.CompletionChecks``, ``sync_weights`` and the LoRA
    adapters from ``server_sync.WeightSync``.

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

    def _get(self, url: str, path: str) -> dict:
        import httpx

        try:
            r = self._client.get(f"{url}{path}")
        except httpx.HTTPError as e:
            raise self._down(url, f"failed GET {path} ({type(e).__name__}: {e})") from e
        if r.status_code != 200:
            raise ServerError(f"inference server {url}: GET {path} answered {r.status_code}: {r.text[:300]}")
        return r.json()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._client.close()

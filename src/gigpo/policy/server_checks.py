"""The checks ``ServerGenerator`` (``gigpo.policy.server``) makes of its servers and their answers.

Before the first rollout, ``probe()`` checks every server: ``/health``, the served model name,
``/tokenize`` against the trainer's tokenizer on a sample prompt, and one completion: token ids
and log-probs present, and (given the trainer's model) log-probs equal to the trainer's own
recomputation (``token_logprobs``) within ``logprob_tolerance``. That last check catches a server
that returns raw instead of sampling log-probs (vLLM: start it with ``--logprobs-mode
processed_logprobs``) or serves other weights.

Every completion is checked before it reaches a rollout (``_parse``): a JSON object with a
choice, at most the request's ``max_tokens`` ids, each an integer in ``[0, vocab_size)``, one
finite log-prob <= ``LOGPROB_EPS`` per id; otherwise ``ServerError`` names the check and the server.

Here: ``ServerError`` and ``ServerDown``, the probe's prompt and limits, and ``CompletionChecks``,
the mixin of ``ServerGenerator`` that holds the probe and the parsing of completions.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from gigpo.policy.base import Generation, SamplingParams

# A short ChatML exchange: the probe's prompt (tokenizer agreement and one completion).
PROBE_MESSAGES = [
    {"role": "user", "content": "You are in the middle of a room. Your task is to: put a mug in the sink."}
]
PROBE_TEMPERATURE = 0.7  # != 1, so raw (untempered) log-probs would not pass for processed ones
PROBE_TOKENS = 8
LOGPROB_EPS = 1e-4  # a sampled token's log-prob above this (it is <= 0 up to rounding) is refused


class ServerError(RuntimeError):
    """An inference server is unreachable, dead, or does not honour the exact-token contract."""


class ServerDown(ServerError):
    """Server ``url`` failed a request after its retries (connection errors, 5xx answers)."""

    def __init__(self, url: str, message: str) -> None:
        super().__init__(message)
        self.url = url


class CompletionChecks:
    """``ServerGenerator``'s probe and completion checks (a mixin: the state is the generator's)."""

    if TYPE_CHECKING:  # what ServerGenerator provides
        tokenizer: Any
        urls: list[str]
        model: str
        policy: Any
        eos_ids: list[int]
        vocab_size: int
        logprob_tolerance: float
        ids_field: str

        def health(self, url: str) -> str: ...

        def _get(self, url: str, path: str) -> dict: ...

        def _post(
            self,
            path: str,
            body: dict,
            url: str | None = None,
            abort: threading.Event | None = None,
            text: bool = False,
        ) -> dict: ...

        def _body(self, prompt: Sequence[int], params: SamplingParams, seed: int | None, max_tokens: int) -> dict: ...

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

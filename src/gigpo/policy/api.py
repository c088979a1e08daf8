"""``APIGenerator``: text-only completions from any OpenAI-compatible API, for evaluation only.

A hosted chat model (GPT-4o, Gemini's OpenAI endpoint) returns text, not the token ids and
sampling log-probs that training needs (``ServerGenerator`` refuses such a server). A prompting
agent that is only evaluated needs the text alone, so ``rollout.backend=api`` sends each prompt to
``POST {base_url}/chat/completions`` (the user message; the server applies its model's chat
template) or ``POST {base_url}/completions`` (the whole prompt text, rendered with
``model.name_or_path``'s chat template) and reads back the text. The key is read from an
environment variable (``rollout.api.key_env``) and sent as ``Authorization: Bearer``; without it no
header is sent (a local server needs none).

The rollout loop knows a text-only generator by ``text_only = True`` and sends it the ``Prompt``
attribute named by ``prompt_field`` (``message`` or ``text``); its rows carry no token ids.
Docs: docs/algorithm.md#prompting-baselines.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

from gigpo.policy.base import SamplingParams
from gigpo.policy.server import RETRY_STATUS, row_seed
from gigpo.policy.server_checks import ServerError

ENDPOINTS = ("chat", "completions")


class APIError(ServerError):
    """The API is unreachable, refuses the request, or answers without text."""


class APIGenerator:
    """Text completions from an OpenAI-compatible API (module docstring).

    Args:
        base_url: the API's base URL, ``/v1`` included (``https://api.openai.com/v1``).
        model: the model name the API serves (``gpt-4o``).
        endpoint: ``chat`` (``/chat/completions``, messages) or ``completions`` (text prompts).
        key_env: environment variable holding the API key ('' or unset: no key sent).
        timeout_s, concurrency, max_retries, backoff_s: as ``ServerGenerator``'s.
    """

    text_only = True

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        endpoint: str = "chat",
        key_env: str = "OPENAI_API_KEY",
        timeout_s: float = 120.0,
        concurrency: int = 8,
        max_retries: int = 3,
        backoff_s: float = 1.0,
    ) -> None:
        import httpx

        if endpoint not in ENDPOINTS:
            raise ValueError(f"APIGenerator: endpoint must be one of {ENDPOINTS}, got {endpoint!r}")
        if not model:
            raise ValueError("APIGenerator needs the model name the API serves (e.g. gpt-4o)")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.endpoint = endpoint
        self.prompt_field = "message" if endpoint == "chat" else "text"
        self.key_env = key_env
        key = os.environ.get(key_env, "") if key_env else ""
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.max_retries = int(max_retries)
        self.backoff_s = float(backoff_s)
        self._client = httpx.Client(
            timeout=httpx.Timeout(timeout_s, connect=min(10.0, timeout_s)),
            headers=headers,
            limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency),
        )
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="gigpo-api")

    def _body(self, prompt: str, params: SamplingParams, seed: int | None) -> dict:
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": int(params.max_new_tokens),
            "temperature": float(params.temperature),
            "top_p": float(params.top_p),
            "n": 1,
        }
        if self.endpoint == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        if seed is not None:
            body["seed"] = int(seed)  # honoured by OpenAI (best effort) and vLLM
        return body

    def _post(self, body: dict) -> str:
        import httpx

        path = "/chat/completions" if self.endpoint == "chat" else "/completions"
        url, last = f"{self.base_url}{path}", ""
        for attempt in range(self.max_retries + 1):
            try:
                r = self._client.post(url, json=body)
            except httpx.HTTPError as e:
                last = f"{type(e).__name__}: {e}"
            else:
                if r.status_code == 200:
                    return self._text(r.json(), url)
                if r.status_code in (401, 403):
                    raise APIError(
                        f"API {url} answered {r.status_code} (not authorised): put the API key in "
                        f"${self.key_env} (rollout.api.key_env names the variable): {r.text[:200]}"
                    )
                if r.status_code not in RETRY_STATUS:
                    raise APIError(f"API {url} answered {r.status_code}: {r.text[:500]}")
                last = f"HTTP {r.status_code}: {r.text[:200]}"
            if attempt < self.max_retries:
                time.sleep(self.backoff_s * 2**attempt)
        raise APIError(
            f"API {url} failed {self.max_retries + 1} time(s) (last: {last}); check rollout.api.base_url "
            "and that the service is up"
        )

    def _text(self, resp: dict, url: str) -> str:
        try:
            ch = resp["choices"][0]
            text = ch["message"]["content"] if self.endpoint == "chat" else ch["text"]
        except (KeyError, IndexError, TypeError):
            raise APIError(f"API {url} answered without a completion's text: {str(resp)[:300]}") from None
        return text or ""

    def complete(self, prompts: Sequence[str], params: SamplingParams) -> list[str]:
        """One response text per prompt (each its own request, with its own seed)."""
        futs = [
            self._pool.submit(self._post, self._body(p, params, row_seed(params.seed, i)))
            for i, p in enumerate(prompts)
        ]
        return [f.result() for f in futs]

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._client.close()

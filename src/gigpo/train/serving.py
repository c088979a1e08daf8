"""``rollout.backend=server``: the ``ServerGenerator`` a config describes, and the vLLM server
gigpo starts when ``rollout.server.urls`` is empty (docs/serving.md).

``ServerBackend(cfg, model, tokenizer, work_dir)`` is what ``Trainer`` and ``evaluate_model``
use; ``serve(cfg)`` is ``gigpo serve``.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from gigpo.policy.launch import LaunchError
from gigpo.policy.server_checks import ServerDown, ServerError

__all__ = ["LaunchError", "ServerBackend", "ServerError", "serve", "vllm_server"]


def lora_args(model) -> list[str]:
    """vLLM flags to serve ``model``'s LoRA adapters at run time (none for a full model): the
    adapter's rank, and room for two adapters (the new one is loaded before the old is unloaded)."""
    if not hasattr(model, "peft_config"):
        return []
    rank = max(int(c.r) for c in model.peft_config.values())
    return ["--enable-lora", "--max-lora-rank", str(rank), "--max-loras", "2"]


def vllm_server(
    cfg, model_dir: Path, *, port: int | None = None, log_path: Path | None = None, extra: list[str] | None = None
):
    """A (not yet started) ``VLLMServer`` for ``model_dir`` with the flags ``cfg`` implies
    (``extra``: more flags before the config's own ``extra_args``)."""
    from gigpo.policy.launch import VLLMServer

    s, r = cfg.rollout.server, cfg.rollout
    return VLLMServer(
        model_dir,
        port=s.port if port is None else port,
        vllm_bin=s.vllm_bin,
        dtype=cfg.model.dtype,
        # A prompt is at most max_prompt_tokens (the agent cuts it), a response max_response_tokens.
        max_model_len=r.max_prompt_tokens + r.max_response_tokens,
        seed=cfg.seed,
        extra_args=[*(extra or []), *s.extra_args],
        log_path=log_path,
        start_timeout_s=s.start_timeout_s,
    )


class ServerBackend:
    """The generator for ``rollout.backend=server`` and, without URLs, the local vLLM server.

    With ``rollout.server.urls``: the servers are probed (health, model, tokenizer, token ids and
    log-probs); with ``sync=True`` the trainer's weights are then loaded into them by the first
    ``sync_weights``, which also checks their log-probs against ``model``; without, ``model``'s
    log-probs are compared at once (the servers must already hold its weights).
    Without URLs: ``model`` is written to ``work_dir/start`` and a vLLM server started on it (log:
    ``work_dir/vllm.log``); it already holds the weights, recorded as ``version``. When that server
    dies mid-run, ``restart`` (the generator's ``revive``) starts it again, up to
    ``rollout.server.max_restarts`` times; ``restarts`` counts them.
    """

    def __init__(self, cfg, model, tokenizer, work_dir: Path, *, version: int = 0, sync: bool = True) -> None:
        from gigpo.policy.server import ServerGenerator
        from gigpo.policy.server_sync import save_for_serving

        s = cfg.rollout.server
        self.work_dir = Path(work_dir)
        self.launched = None
        self.restarts = 0
        self.max_restarts = int(s.max_restarts)
        urls = list(s.urls)
        lora = hasattr(model, "peft_config")
        if not urls:
            start = save_for_serving(model, tokenizer, self.work_dir / "start")  # LoRA: the base weights
            self.launched = vllm_server(cfg, start, log_path=self.work_dir / "vllm.log", extra=lora_args(model))
            print(f"starting vLLM on {self.launched.url} (log: {self.launched.log_path}) ...", flush=True)
            self.launched.start()
            print(f"vLLM answered after {self.launched.start_seconds:.0f} s", flush=True)
            urls = [self.launched.url]
        try:
            self.generator = ServerGenerator(
                tokenizer,
                urls,
                model=s.model,
                policy=model,
                timeout_s=s.timeout_s,
                concurrency=s.concurrency,
                max_retries=s.max_retries,
                sync_dir=self.work_dir / "weights",
                logprob_tolerance=s.logprob_tolerance,
                lora=lora,
                probe=False,
            )
            if self.launched is not None:
                self.generator.server_log = str(self.launched.log_path)
            # LoRA: the servers hold the base model until the first sync loads the adapter.
            self.probe = self.generator.probe(compare=not (sync and s.urls) and not lora)
            if self.launched is not None:
                if not lora:
                    self.generator.policy_version = version
                self.generator.revive = self.restart
        except BaseException:
            self.close()
            raise

    def restart(self, url: str, error: str) -> bool:
        """Start the server gigpo launched again after it died; False when it is not ours or
        still answers /health (a restart would not help), so that ``error`` stands.

        The new server loads the weights of the generator's ``policy_version`` (the directory its
        last weight sync wrote, which stays until the next sync, or ``start``), on the same host
        and port, logging to ``vllm.restart<N>.log``: the dead server's log is kept. Called by
        ``ServerGenerator`` under its revival lock, which probes the server afterwards.
        """
        srv = self.launched
        if srv is None or url != srv.url:
            return False
        code = srv.proc.poll() if srv.proc is not None else None
        health = self.generator.health(url)
        if code is None and health == "ok":
            return False
        if self.restarts >= self.max_restarts:
            if not self.max_restarts:
                return False  # restarts off: the error, which names the log, stands as it is
            raise ServerDown(
                url,
                f"{error}\n(gigpo already restarted this server {self.restarts} time(s) in this run, "
                f"rollout.server.max_restarts={self.max_restarts}; its logs are in {self.work_dir})",
            )
        self.restarts += 1
        why = f"its process exited with code {code}" if code is not None else f"it runs but {health}"
        version = self.generator.policy_version
        weights = Path(self.generator.sync_dir or self.work_dir / "weights") / f"v{int(version or 0):06d}"
        old_log = srv.log_path
        srv.stop()  # a live but unanswering server, and the engine workers of a dead one
        srv.model_dir = weights if weights.is_dir() else self.work_dir / "start"
        srv.log_path = self.work_dir / f"vllm.restart{self.restarts}.log"
        print(
            f"vLLM server {url} died ({why}; its log: {old_log}); restarting it "
            f"({self.restarts} of rollout.server.max_restarts={self.max_restarts}) on the weights of "
            f"policy version {version} (log: {srv.log_path}) ...",
            flush=True,
        )
        srv.start()  # up to rollout.server.start_timeout_s; LaunchError with the new log's tail
        self.generator.server_log = str(srv.log_path)
        self.generator.load_adapter(url)  # LoRA: the adapter of that version (none: a no-op)
        print(f"vLLM answered again after {srv.start_seconds:.0f} s", flush=True)
        return True

    def close(self) -> None:
        gen = getattr(self, "generator", None)
        if gen is not None:
            gen.close()
        if self.launched is not None:
            self.launched.stop()
            self.launched = None
        shutil.rmtree(self.work_dir / "weights", ignore_errors=True)
        shutil.rmtree(self.work_dir / "start", ignore_errors=True)


def serve(cfg, port: int = 8000) -> int:
    """``gigpo serve``: a vLLM server on 127.0.0.1 for the model a ``gigpo train`` with ``cfg``
    starts from (``model.name_or_path``; its SFT model when ``sft.enabled``), until Ctrl-C."""
    from gigpo.policy.load import load_policy, resolve_path
    from gigpo.policy.server_sync import save_for_serving

    from gigpo.policy.tiny import tiny_config

    model_path, tiny = cfg.model.name_or_path, tiny_config(cfg.env.family, cfg.env.task_kwargs, cfg.env.kwargs)
    resolve_path(model_path, cfg.model.cache_dir or None, tiny=tiny)  # builds `tiny` when not cached
    if cfg.sft.enabled:
        from gigpo.train.sft import ensure_sft_model

        model_path = ensure_sft_model(cfg, progress=cfg.log.progress)
    # model.lora: the base model with runtime LoRA loading, rank as the trainer's (load_policy's lora)
    lora: dict | None = {} if cfg.model.lora else None
    cache = cfg.model.cache_dir or None
    model, tok = load_policy(model_path, device="cpu", dtype="float32", cache_dir=cache, lora=lora, tiny=tiny)
    work = Path(tempfile.mkdtemp(prefix="gigpo-serve-"))
    try:
        start = save_for_serving(model, tok, work / "model")
        extra = lora_args(model)
        del model
        server = vllm_server(cfg, start, port=cfg.rollout.server.port or port, log_path=work / "vllm.log", extra=extra)
        print(f"starting vLLM for {model_path} on {server.url} (log: {server.log_path}) ...", flush=True)
        server.start()
        print(
            f"serving {model_path} as {server.served_name!r} on {server.url}; train with:\n"
            f"  gigpo train --config ... rollout.backend=server 'rollout.server.urls=[{server.url}]'\n"
            "Ctrl-C stops it.",
            flush=True,
        )
        code = server.wait()
        return 0 if code in (0, 130, -2, -15) else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)

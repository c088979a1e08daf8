"""Weight sync of ``ServerGenerator`` (``gigpo.policy.server``): the ``WeightSync`` mixin and
``save_for_serving``.

Weight sync (``sync_weights``): the policy is written to a new directory under ``sync_dir``
(atomically) and every server reloads it in place (vLLM's dev-mode ``POST /collective_rpc``
``reload_weights`` with ``weights_path``, then ``POST /reset_prefix_cache``: cached prefixes were
computed with the old weights); a probe then checks the server's log-probs against the model.
``policy_version`` names the weights the servers hold; the rollout records it per row.

With ``lora`` (a peft LoRA policy, servers holding its base weights) only the adapter moves: it
is saved under ``sync_dir``, loaded into every server under a new name (``POST
/v1/load_lora_adapter``) that requests then name, and the previous one is unloaded. A server that
goes down during a sync is revived (``revive``) and the load redone.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from gigpo.policy.server_checks import CompletionChecks, ServerDown, ServerError


class WeightSync(CompletionChecks):
    """``ServerGenerator``'s weight sync and LoRA adapters (a mixin: the state is the generator's)."""

    if TYPE_CHECKING:  # what ServerGenerator provides
        sync_dir: Path | None
        lora: bool
        adapter: str | None
        adapter_dir: Path | None
        _lora_tag: str
        policy_version: int | None
        _revivals: int

        def _revive(self, err: ServerDown, seen: int, compare: bool) -> bool: ...

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
        """``load()``, redone after ``revive`` brought a dead server back (``gigpo.policy.server``'s docstring)."""
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

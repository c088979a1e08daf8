"""The offline-built ``tiny`` model: an ordinary HF directory, deterministic, cached, env-aware tokenizer."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from gigpo.policy.tiny import (
    SCAFFOLD_TEXT,
    TAG_TOKENS,
    TinyConfig,
    TinyCorpusError,
    collect_corpus,
    tiny_config,
    tiny_hash,
    tiny_path,
)

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


# ------------------------------------------------------------- plug-in families stay local
PLUGIN_DIR = Path(__file__).resolve().parent / "data" / "plugin_family"


@pytest.fixture
def echo_installed(tmp_path, monkeypatch):
    """The fixture family ``echo`` installed as a package whose entry point gives it a share of the
    ``tiny`` corpus (4 episodes), beside a broken plug-in; the registry restored afterwards."""
    from gigpo.envs import spec

    site = tmp_path / "site"
    (site / "echo_tiny_ep.py").parent.mkdir(parents=True)
    (site / "echo_tiny_ep.py").write_text(
        "import dataclasses\nimport gigpo_echo_family\n\n\ndef spec():\n"
        "    return dataclasses.replace(gigpo_echo_family.FAMILY_SPEC, tiny_corpus_episodes=4)\n"
    )
    for name, ep in (("echo_tiny", "echo = echo_tiny_ep:spec"), ("broken_fam", "broken = no_such_module_xyz:SPEC")):
        d = site / f"{name}-0.1.dist-info"
        d.mkdir()
        (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
        (d / "entry_points.txt").write_text(f"[gigpo.families]\n{ep}\n")
    saved = spec._state()
    monkeypatch.syspath_prepend(str(PLUGIN_DIR))
    monkeypatch.syspath_prepend(str(site))
    spec._reset_for_tests()
    with pytest.warns(RuntimeWarning, match="entry point 'broken'"):
        assert "echo" in spec.families()
    yield spec, site
    spec._restore(saved)
    for m in ("gigpo_echo_family", "echo_tiny_ep"):
        sys.modules.pop(m, None)


def test_an_installed_plugin_changes_no_builtin_runs_tiny(tiny_dir, echo_installed):
    """The session's ``tiny`` was built with no plug-in installed; with one (and a broken one)
    installed, every built-in family's run gets the same config, cache key and corpus text."""
    spec, site = echo_installed
    built = json.loads((tiny_dir / "gigpo_tiny.json").read_text())
    for family in ("alfworld", "webshop", "search", "sokoban", None):
        cfg = tiny_config(family, task_kwargs={"x": 1}, env_kwargs={"y": 2})  # a built-in run's kwargs: unused
        assert cfg == TinyConfig() and [list(f) for f in cfg.families] == built["config"]["families"]
        assert tiny_path(cache_dir=str(tiny_dir.parent.parent), cfg=cfg) == tiny_dir  # the same cache key
    # ALFWorld's expert text differs between processes (its first rollouts in a process), so the
    # text is compared without it.
    no_alf = dataclasses.replace(cfg, families=tuple(f for f in cfg.families if f[0] != "alfworld"))
    with_plugin = collect_corpus(no_alf)
    assert "echo" not in with_plugin[1]
    sys.path.remove(str(site))
    spec._reset_for_tests()
    assert "echo" not in spec.families()
    assert tiny_config("webshop") == cfg and collect_corpus(no_alf) == with_plugin


def test_a_plugin_runs_tiny_adds_that_family_alone(echo_installed):
    cfg = tiny_config("echo")
    assert cfg.families == TinyConfig().families + (("echo", 4),)
    assert tiny_hash(cfg) != tiny_hash(TinyConfig())
    with_kwargs = tiny_config("echo", env_kwargs={"choices": 2})
    assert with_kwargs.family_kwargs == {"echo": ({}, {"choices": 2})} and tiny_hash(with_kwargs) != tiny_hash(cfg)
    only_echo = dataclasses.replace(with_kwargs, families=(("echo", 4),))
    corpus, used = collect_corpus(only_echo)
    assert used == ["echo"] and "say the word" in "\n".join(corpus)
    # the run's env.kwargs reach make_env: 7 choices of 6 fruits cannot be drawn
    too_many = dataclasses.replace(only_echo, family_kwargs={"echo": ({}, {"choices": 7})})
    with pytest.raises(TinyCorpusError, match="'echo' failed to give its text.*ValueError"):
        collect_corpus(too_many)


def test_a_family_that_fails_to_give_its_text_is_an_error_naming_it(echo_installed):
    # ALFWorld's task_kwargs on the echo family (the old docs/extending.md command): no skipping,
    # which would have built a tokenizer without echo's text under a key that includes it.
    cfg = tiny_config("echo", task_kwargs={"task_types": [1]})
    with pytest.raises(TinyCorpusError, match=r"env family 'echo' failed to give its text.*task_types"):
        collect_corpus(dataclasses.replace(cfg, families=(("echo", 4),)))
    with pytest.raises(ValueError, match=r"env family 'broken': entry point 'broken'"):
        tiny_config("broken")

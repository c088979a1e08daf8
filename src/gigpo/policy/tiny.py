"""The built-in ``tiny`` model: a few-million-parameter Qwen2 with a BPE tokenizer trained offline.

Nothing is downloaded. The tokenizer is a byte-level BPE (any text round-trips) trained with
``tokenizers`` on the environments' own text: observations, admissible actions, instructions and
expert actions from expert rollouts of generated tasks of each built-in env family whose engines
are installed (and of the run's own family when it is a plug-in: ``tiny_config``), plus the
agent prompt scaffolding (instruction templates and the ``<think>``/``<action>``/... tags, which are
single tokens). The model is a randomly initialised ``Qwen2ForCausalLM`` (seeded), meant to be
warm-started by SFT on expert demonstrations.

The result is an ordinary Hugging Face directory (``AutoModelForCausalLM.from_pretrained(dir)`` and
``AutoTokenizer.from_pretrained(dir)`` work), cached under ``models_dir()/tiny-<hash>``; the hash
covers the model/tokenizer config, the seed, the scaffolding text, the transformers/tokenizers
versions, the corpus families' source files and engine versions, and the task/env options of a
plug-in family (the corpus is a deterministic function of those, so the hash changes whenever the
corpus can). An installed plug-in that a run does not use changes nothing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

from gigpo.policy.cache import build_atomic, models_dir

log = logging.getLogger(__name__)

BUILD_VERSION = 1  # bump when the build procedure changes in a way the hash would not see

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Agent scaffolding tags: added as (non-special) single tokens, so decoding with
# skip_special_tokens=True keeps them, as the action parser needs.
TAG_TOKENS = [
    "<think>",
    "</think>",
    "<action>",
    "</action>",
    "<search>",
    "</search>",
    "<answer>",
    "</answer>",
    "<information>",
    "</information>",
]

QWEN2_PRETOKENIZE_REGEX = (  # transformers.models.qwen2.tokenization_qwen2.PRETOKENIZE_REGEX
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

# Qwen2-style ChatML template (without Qwen's default system prompt).
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

SCAFFOLD_TEXT = [
    "You are an expert agent operating in the ALFRED embodied environment. Your task is to: {task}. "
    "Prior to this step, you have already taken {n} step(s). Below are the most recent {k} observations "
    "and the corresponding actions you took: {history}. You are now at step {t} and your current "
    "observation is: {obs}. Your admissible actions of the current situation are: [{actions}].",
    "Now it's your turn to take an action. You should first reason step-by-step about the current "
    "situation. This reasoning process MUST be enclosed within <think> </think> tags. Once you've "
    "finished your reasoning, you should choose an admissible action for current step and present it "
    "within <action> </action> tags.",
    "You are an expert autonomous agent operating in the WebShop e-commerce environment. Your task is "
    "to: {instruction}. Your current observation is: {obs}. Your admissible actions of the current "
    "situation are: [search[...], click[...], click[back to search], click[next >], click[< prev], "
    "click[buy now]].",
    "You are a helpful assistant. Answer the given question. You must conduct reasoning inside <think> "
    "and </think> first every time you get new information. After reasoning, if you find you lack some "
    "knowledge, you can call a search engine by <search> query </search> and it will return the top "
    "searched results between <information> and </information>. You can search as many times as you "
    "want. If you find no further external knowledge needed, you can directly provide the answer inside "
    "<answer> and </answer>, without detailed illustrations. For example, <answer> Beijing </answer>. "
    "Question: {question}",
    "<think> I need to find the object first, then go to the target receptacle. </think> "
    "<action> go to countertop 1 </action>",
    "<think> I should search for the missing fact. </think> <search> capital of france </search> "
    "<information> Doc 1 (Title: Paris) Paris is the capital and largest city of France. </information> "
    "<answer> Paris </answer>",
    "<think> The product matches the instruction and the price is lower than the limit. </think> "
    "<action> click[buy now] </action>",
    "Nothing happens. You arrive at the kitchen. On the countertop 1, you see a apple 1, a knife 2. "
    "You pick up the mug 1 from the cabinet 3. You put the mug 1 in/on the coffeemachine 1.",
]


@dataclass(frozen=True)
class TinyConfig:
    """Sizes of the ``tiny`` model and of the corpus collection (all part of the cache hash)."""

    vocab_size: int = 4096
    hidden_size: int = 256
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    intermediate_size: int = 704
    max_position_embeddings: int = 4096
    rope_theta: float = 10000.0
    seed: int = 0
    max_steps: int = 30  # steps per expert rollout
    # (family, expert rollouts for the tokenizer corpus): each built-in family's
    # FamilySpec.tiny_corpus_episodes (ALFWorld 6, WebShop 40, search 150, Sokoban 40, which reach
    # the 4k vocab with the build well under a minute). Installed plug-ins are not in it, so
    # installing one changes no built-in family's run; ``tiny_config(family)`` adds a run's own
    # plug-in family.
    families: tuple[tuple[str, int], ...] = field(default_factory=lambda: _builtin_corpus_families())
    # family -> (task_kwargs, env_kwargs) its corpus tasks and env are made with (default: none,
    # the spec's env_kwargs); part of the cache key when set.
    family_kwargs: Mapping[str, tuple[Mapping[str, Any], Mapping[str, Any]]] = field(default_factory=dict)


def _builtin_corpus_families() -> tuple[tuple[str, int], ...]:
    from gigpo.envs.spec import builtin_families

    return tuple((name, s.tiny_corpus_episodes) for name, s in builtin_families().items() if s.tiny_corpus_episodes > 0)


def tiny_config(
    family: str | None = None,
    task_kwargs: Mapping[str, Any] | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
    **overrides: Any,
) -> TinyConfig:
    """The ``tiny`` build for a run of env family ``family``.

    A built-in family's run (or ``family=None``) gets ``TinyConfig()``: the built-in families'
    corpus, whatever plug-ins are installed, and the run's kwargs do not enter it. A plug-in
    family's run adds that family alone, with its ``tiny_corpus_episodes`` (0: nothing added)
    and the run's ``env.task_kwargs`` / ``env.kwargs`` (``task_kwargs`` / ``env_kwargs``).
    """
    from gigpo.envs.spec import get_family, is_builtin

    cfg = TinyConfig(**overrides)
    if family is None or is_builtin(family):
        return cfg
    spec = get_family(family)
    if spec.tiny_corpus_episodes <= 0 or any(f == family for f, _ in cfg.families):
        return cfg
    kwargs = {family: (dict(task_kwargs or {}), dict(env_kwargs or {}))} if (task_kwargs or env_kwargs) else {}
    return dataclasses.replace(
        cfg,
        families=cfg.families + ((family, spec.tiny_corpus_episodes),),
        family_kwargs={**cfg.family_kwargs, **kwargs},
    )


def _engines(cfg: TinyConfig) -> list[str]:
    """Distributions (``FamilySpec.engines``) of the corpus families, in order, once each."""
    names = [d for f, _ in cfg.families for d in _spec(f).engines]
    return list(dict.fromkeys(names))


def _spec(family: str):
    """The family's spec: a built-in without looking at plug-ins, else the registry's (which
    raises a clear error for a family that is not registered)."""
    from gigpo.envs.spec import builtin_families, get_family

    return builtin_families().get(family) or get_family(family)


def corpus_families(cfg: TinyConfig) -> list[str]:
    """The families whose text the build uses: those of ``cfg.families`` whose ``engines`` are all
    installed (an optional extra not installed leaves its family out; the cache key records the
    engines' versions, "absent" included, so it tells the two corpora apart)."""
    return [f for f, _ in cfg.families if all(_version(d) != "absent" for d in _spec(f).engines)]


def _family_source_digest(family: str) -> str:
    """Hash of the family module's source files (or 'absent'), without importing it."""
    try:
        spec = importlib.util.find_spec(_spec(family).module)
    except Exception:  # noqa: BLE001 -- a broken parent import means the family is unusable
        spec = None
    if spec is None or spec.origin is None:
        return "absent"
    origin = Path(spec.origin)
    files = sorted(origin.parent.rglob("*.py")) if origin.name == "__init__.py" else [origin]
    h = hashlib.sha256()
    for f in files:
        h.update(str(f.relative_to(origin.parent)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def tiny_hash(cfg: TinyConfig) -> str:
    """Cache key of the ``tiny`` build for ``cfg`` (see the module docstring for what it covers)."""
    import tokenizers
    import transformers

    config = asdict(cfg)
    if not cfg.family_kwargs:  # unset: the key of the builds from before the option
        del config["family_kwargs"]
    key = {
        "cfg": config,
        "build": BUILD_VERSION,
        "scaffold": SCAFFOLD_TEXT,
        "special": SPECIAL_TOKENS + TAG_TOKENS,
        "template": CHAT_TEMPLATE,
        "versions": [transformers.__version__, tokenizers.__version__],
        "families": {f: _family_source_digest(f) for f, _ in cfg.families},
        "engines": [_version(d) for d in _engines(cfg)],
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=repr).encode()).hexdigest()[:16]


def _expert_texts(family: str, n_tasks: int, cfg: TinyConfig) -> list[str]:
    """Text of ``n_tasks`` expert rollouts of ``family``'s train tasks."""
    from gigpo import envs

    task_kwargs, env_kwargs = cfg.family_kwargs.get(family, ({}, {}))
    texts: list[str] = []
    tasks = envs.make_tasks(family, "train", n=n_tasks, seed=cfg.seed, **task_kwargs)
    env = envs.make_env(family, **env_kwargs)
    try:
        for task in tasks:
            obs, info = env.reset(task)
            texts += [obs, str(info.get("instruction", ""))]
            for _ in range(cfg.max_steps):
                texts += list(info.get("admissible_actions", []) or [])
                action = env.expert_action()
                obs, _r, done, info = env.step(action)
                texts += [action, obs]
                if done:
                    break
    finally:
        env.close()
    return [t for t in texts if t]


class TinyCorpusError(RuntimeError):
    """An env family of the ``tiny`` corpus failed to give its text."""


def collect_corpus(cfg: TinyConfig) -> tuple[list[str], list[str]]:
    """The tokenizer's training text (scaffolding plus expert rollouts of each family of
    ``corpus_families(cfg)``) and the names of the families that contributed.

    A family whose engines are installed but whose tasks, env or expert fail is an error naming
    it (``TinyCorpusError``): leaving it out would build a different tokenizer under the same
    cache key. The output is deterministic in ``cfg`` and the installed engines.
    """
    texts, used = list(SCAFFOLD_TEXT), corpus_families(cfg)
    for family, n_tasks in cfg.families:
        if family not in used:
            log.info(
                "tiny corpus: env family %r left out: its engines %s are not installed", family, _spec(family).engines
            )
            continue
        try:
            got = _expert_texts(family, n_tasks, cfg)
        except Exception as e:
            raise TinyCorpusError(
                f"tiny corpus: env family {family!r} failed to give its text ({type(e).__name__}: {e}); "
                f"its make_tasks('train', n={n_tasks}, seed={cfg.seed}), make_env and expert_action must "
                "work with the run's env.task_kwargs/env.kwargs (docs/extending.md), or set its "
                "FamilySpec.tiny_corpus_episodes=0"
            ) from e
        log.info("tiny corpus: %d texts from %s", len(got), family)
        texts += got
    return list(dict.fromkeys(texts)), used  # dedupe (admissible-action lists repeat), order kept


def train_tokenizer(texts: list[str], vocab_size: int):
    """A byte-level BPE ``PreTrainedTokenizerFast`` with ChatML special tokens and single-token tags."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    # Exactly Qwen2's pipeline (NFC, Qwen split regex, byte level): AutoTokenizer maps this
    # directory's model_type ``qwen2`` to ``Qwen2Tokenizer``, which rebuilds that pipeline around
    # our vocab and merges; training with the same one makes both tokenize identically.
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(TAG_TOKENS),
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # every byte: any text round-trips
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    tok.add_tokens([AddedToken(t, normalized=False, special=False) for t in TAG_TOKENS])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        bos_token=None,
        model_max_length=4096,
        padding_side="left",
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_tiny(out_dir: Path, cfg: TinyConfig) -> None:
    """Write the ``tiny`` model + tokenizer (+ corpus.txt) into ``out_dir``."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    corpus, used = collect_corpus(cfg)
    tokenizer = train_tokenizer(corpus, cfg.vocab_size)
    eos = [tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.convert_tokens_to_ids("<|endoftext|>")]
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_key_value_heads,
        intermediate_size=cfg.intermediate_size,
        max_position_embeddings=cfg.max_position_embeddings,
        rope_theta=cfg.rope_theta,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=eos,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=eos, pad_token_id=tokenizer.pad_token_id)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    (out_dir / "corpus.txt").write_text("\n".join(corpus), encoding="utf-8")
    (out_dir / "gigpo_tiny.json").write_text(json.dumps({"config": asdict(cfg), "families_used": used}, indent=1))


def tiny_path(cache_dir: str | None = None, cfg: TinyConfig | None = None) -> Path:
    """Directory of the ``tiny`` model, building it first (seconds) if it is not cached.

    ``cfg``: default ``TinyConfig()``, the built-in families' corpus; ``tiny_config(family, ...)``
    for a run of a plug-in family."""
    cfg = cfg or TinyConfig()
    target = models_dir(cache_dir) / f"tiny-{tiny_hash(cfg)}"
    return build_atomic(target, lambda d: build_tiny(d, cfg))

"""SFT warm start: supervised fine-tuning on expert demonstrations, loss on response tokens only.

Demonstrations are (prompt_ids, response_ids) pairs built exactly as the rollout builds prompts
(``gigpo.rollout.collect_expert_demos``), so the warm-started model acts in the rollout's format.
The result is saved as a Hugging Face model dir (``save_pretrained`` model + tokenizer) usable as
``model.name_or_path``; ``ensure_sft_model`` caches it under a key of everything that shapes it,
so reruns skip the work.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from pathlib import Path

import numpy as np
import torch

from gigpo.learner.logprobs import token_logprobs
from gigpo.learner.loss import token_budget_microbatches


class SFTError(RuntimeError):
    """SFT cannot produce a model (no demonstrations, an unusable output dir); one line for the CLI."""


def sft_loss(
    model, prompts, responses, *, pad_token_id: int, prompt_weight: float = 0.0, allowed=None
) -> tuple[torch.Tensor, int]:
    """Mean negative log-likelihood over response tokens, plus ``prompt_weight`` x the mean NLL
    of the prompt tokens (0 = response tokens only, the usual SFT loss).

    Why a prompt term: a model built from scratch (``tiny``) must first learn to read the scene
    (copy receptacle and object names from the observation and the admissible actions); a row
    has ~20x more prompt than response tokens, so next-token loss on the prompt gives that
    signal at no extra forward cost.
    ``allowed``: per row the action-constrained positions (see ``gigpo.policy.constrain``); their
    NLL is under the distribution renormalised over the allowed ids, as the rollout samples.
    The prompt term is plain next-token loss (env text has no mask); with ``allowed`` the response
    term is the same masked NLL as without it.
    Returns (loss scalar, number of response tokens).
    """
    if prompt_weight <= 0:
        logp, _, mask = token_logprobs(model, prompts, responses, pad_token_id=pad_token_id, allowed=allowed)
        n = int(mask.sum())
        return -(logp * mask).sum() / max(n, 1), n
    from gigpo.learner.logprobs import pad_rows, response_logprobs

    device = next(model.parameters()).device
    ids, attn, start, rlen = pad_rows(prompts, responses, pad_token_id)
    ids, attn = ids.to(device), attn.to(device)
    logits = model(input_ids=ids, attention_mask=attn, use_cache=False).logits[:, :-1].float()  # (B, T-1, V)
    # prompt: plain next-token NLL of every prompt token after the first
    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")  # (B, T-1)
    tgt = torch.arange(1, ids.shape[1], device=device)[None, :]  # position of each target token
    is_prompt = attn[:, 1:].bool() & (tgt < start.to(device)[:, None])
    n_p = int(is_prompt.sum())
    # response: token_logprobs' masked log-probs, from the same forward pass
    logp, _, mask = response_logprobs(logits, ids, start, rlen, allowed=allowed)
    n = int(mask.sum())
    loss = -logp.sum() / max(n, 1) + prompt_weight * (nll * is_prompt).sum() / max(n_p, 1)
    return loss, n


def sft_train(
    model,
    demos,
    *,
    epochs: int,
    lr: float,
    batch_rows: int,
    pad_token_id: int,
    token_budget: int = 16384,
    seed: int = 0,
    progress: bool = False,
    prompt_weight: float = 0.0,
    warmup_steps: int = 0,
) -> list[float]:
    """Train ``model`` on ``demos`` (list of (prompt_ids, response_ids[, allowed])); returns loss per step."""
    if not demos:
        raise ValueError("SFT got no demonstrations; raise sft.episodes or check the env's expert")
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=0.0)
    rng = np.random.default_rng(seed)
    model.train()
    steps = epochs * math.ceil(len(demos) / batch_rows)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: sft_lr_factor(s, steps, warmup_steps))
    losses: list[float] = []
    bar = _bar(progress, steps, "SFT")
    for _ in range(epochs):
        order = rng.permutation(len(demos))
        for start in range(0, len(demos), batch_rows):
            rows = order[start : start + batch_rows]
            lens = [len(demos[i][0]) + len(demos[i][1]) for i in rows]
            mbs = token_budget_microbatches(lens, token_budget)
            total_tokens = sum(len(demos[i][1]) for i in rows)
            opt.zero_grad(set_to_none=True)
            step_loss = 0.0
            for mb in mbs:
                idx = [rows[j] for j in mb]
                allowed = [demos[i][2] if len(demos[i]) > 2 else None for i in idx]
                loss, n = sft_loss(
                    model,
                    [demos[i][0] for i in idx],
                    [demos[i][1] for i in idx],
                    pad_token_id=pad_token_id,
                    prompt_weight=prompt_weight,
                    allowed=allowed if any(a is not None for a in allowed) else None,
                )
                # weight by tokens so the step is a token mean over the whole batch
                (loss * n / total_tokens).backward()
                step_loss += float(loss.detach()) * n / total_tokens
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            losses.append(step_loss)
            if bar:
                bar[0].update(bar[1], advance=1, description=f"SFT loss {step_loss:.3f}")
    if bar:
        bar[0].stop()
    model.eval()
    return losses


def sft_lr_factor(step: int, steps: int, warmup_steps: int) -> float:
    """Linear warm-up over ``warmup_steps``, then linear decay to 0 at ``steps``.

    Why warm-up: Adam's first full-size steps on a from-scratch ``tiny`` leave it unable to learn
    to copy a name from its prompt for hundreds of steps
    (research/notes/default-job-settings.md#sft-learning-rate-warm-up).
    """
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    return max(0.0, 1.0 - step / max(steps, 1))


def _bar(enabled: bool, total: int, desc: str):
    if not enabled:
        return None
    from rich.progress import Progress

    p = Progress(transient=True)
    p.start()
    return p, p.add_task(desc, total=total)


def sft_key(cfg) -> str:
    """Hash of everything that shapes the SFT model (model, env/prompt format, SFT settings, seed)."""
    parts = {
        "model": cfg.model.name_or_path,
        "sft": dataclasses.asdict(cfg.sft) | {"output_dir": ""},
        "family": cfg.env.family,
        "kwargs": cfg.env.kwargs,
        # eval_split picks held-out games only; SFT reads the train split
        "task_kwargs": {k: v for k, v in cfg.env.task_kwargs.items() if k != "eval_split"},
        "max_steps": cfg.env.max_steps,
        "history": cfg.env.history_length,
        "prompt": cfg.rollout.max_prompt_tokens,
        "seed": cfg.seed,
        "task_seed": cfg.env.task_seed,
        "version": 2,
    }
    if cfg.model.name_or_path == "tiny":  # the alias names no weights: key on the build itself
        from gigpo.policy.tiny import TinyConfig, tiny_hash
        from gigpo.train.factories import load_kwargs

        # the build load_policy(**load_kwargs(cfg)) loads (a plug-in family's run may add its text)
        parts["tiny"] = tiny_hash(load_kwargs(cfg).get("tiny") or TinyConfig())
    if cfg.rollout.constrain_actions:  # changes the SFT loss; old keys stay valid when off
        parts["constrain_actions"] = True
    if cfg.rollout.repeat_task:  # changes the prompts
        parts["repeat_task"] = True
    if cfg.rollout.prompt != "full":  # likewise
        parts["prompt_form"] = cfg.rollout.prompt
    if cfg.sft.think == "reason":  # the default was the only style before the option existed
        del parts["sft"]["think"]
    for k in ("warmup_steps", "relabel", "explore_steps"):  # likewise: keys from before these options stay valid
        if getattr(cfg.sft, k) == 0:
            del parts["sft"][k]
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def run_sft(cfg, out_dir: Path, *, progress: bool = True) -> dict:
    """Collect demos, fine-tune ``cfg.model``, save model + tokenizer to ``out_dir``; returns stats."""
    from gigpo.envs import make_tasks
    from gigpo.policy.load import load_policy
    from gigpo.rollout import collect_expert_demos
    from gigpo.train.factories import build_agent, load_kwargs

    torch.manual_seed(cfg.seed)
    model, tok = load_policy(cfg.model.name_or_path, **load_kwargs(cfg))
    agent = build_agent(cfg, tok)
    tasks = make_tasks(
        cfg.env.family, "train", n=cfg.sft.episodes, seed=cfg.env.task_seed + 7919, **cfg.env.task_kwargs
    )
    demos = collect_expert_demos(
        cfg.env.family,
        tasks,
        tok,
        agent,
        max_steps=cfg.env.max_steps,
        env_kwargs=cfg.env.kwargs,
        with_allowed=cfg.rollout.constrain_actions,
        think=cfg.sft.think,
        relabel=cfg.sft.relabel,
        seed=cfg.seed,
        explore_steps=cfg.sft.explore_steps,
    )
    if not demos:
        raise SFTError(
            f"no expert demonstrations: the {cfg.env.family} expert won none of the {len(tasks)} "
            f"sft.episodes task(s) within env.max_steps={cfg.env.max_steps}; raise env.max_steps or "
            "sft.episodes, or check env.task_kwargs"
        )
    losses = sft_train(
        model,
        demos,
        epochs=cfg.sft.epochs,
        lr=cfg.sft.lr,
        batch_rows=cfg.sft.batch_rows,
        pad_token_id=tok.pad_token_id,
        seed=cfg.seed,
        progress=progress,
        prompt_weight=cfg.sft.prompt_loss_weight,
        warmup_steps=cfg.sft.warmup_steps,
    )
    out_dir = Path(out_dir)  # callers pass a temporary dir (build_sft_dir): the final name appears complete
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    stats = {"demos": len(demos), "episodes": len(tasks), "loss_first": losses[0], "loss_last": losses[-1]}
    (out_dir / "sft_stats.json").write_text(json.dumps(stats))
    return stats


def build_sft_dir(cfg, out: str | Path, *, progress: bool = True) -> tuple[Path, dict | None]:
    """``(out, stats)``: run SFT into a temporary sibling and rename it to ``out``, so a killed SFT
    leaves no ``out`` that a later run would take for a finished model (and the next call removes
    its temporary). A complete ``out`` is reused (stats None); an incomplete one is refused, never
    trained over or loaded."""
    from gigpo.policy.cache import build_atomic, remove_stale_temporaries
    from gigpo.policy.load import model_dir_problems

    out = Path(out)
    # A killed SFT's temporary dir (a model's worth of disk) goes now, not a live build's (its lock is held).
    remove_stale_temporaries(out)
    if out.exists():
        missing = model_dir_problems(out)
        if missing:
            raise SFTError(
                f"{out} exists but is not a complete model directory (missing {', '.join(missing)}); "
                "remove it or choose another output path"
            )
        return out, None
    stats: dict = {}
    build_atomic(out, lambda tmp: stats.update(run_sft(cfg, tmp, progress=progress)))
    return out, stats


def ensure_sft_model(cfg, *, progress: bool = True) -> str:
    """Path of the SFT model for ``cfg``: ``sft.output_dir`` or a cache dir keyed by ``sft_key``."""
    from gigpo.policy.cache import models_dir

    out = cfg.sft.output_dir or models_dir(cfg.model.cache_dir or None) / f"sft-{cfg.env.family}-{sft_key(cfg)}"
    return str(build_sft_dir(cfg, out, progress=progress)[0])

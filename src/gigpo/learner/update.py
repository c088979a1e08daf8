"""One policy update over an iteration's rows: log-prob passes, mini-batches, micro-batches, guards.

Row inputs (N rows, one per agent step):
    prompts   list of int arrays   exact prompt ids
    responses list of int arrays   exact response ids
    advantages float [N]           one scalar per row, broadcast over the row's response tokens
                                   (docs/algorithm.md#combined-advantage)
    token_advantages list of float arrays or None: per response token instead (GAE,
                                   docs/algorithm.md#ppo-with-a-learned-critic)
    old_logp / ref_logp  list of float arrays (len = response length) or None

Rows that are one sample repeated (a state every rollout passes, the same action taken there) are
merged into one row weighted by their count (``identical_row_groups``; exact, see there). An
iteration's rows, shuffled (``train.mini_batch_order``), are cut into ``ceil(rows /
mini_batch_rows)`` mini-batches of about equal size, each one optimizer step
(``weighted_mini_batches``); inside, rows are split into
micro-batches under a padded-token budget (``loss.token_budget_microbatches``) and gradients are
accumulated, each micro-batch's loss being its share of the mini-batch's (``loss.Norm``: sums
divided by the mini-batch's token or row count), so the step's loss and gradient do not depend on
how rows are split into micro-batches. With more than one process (``gigpo.learner.distributed``)
each rank takes its share of every mini-batch and the gradients are averaged over ranks.

With a value head on the policy's backbone (``critic.shared_backbone``) the same forward gives the
values, and ``vf_coef`` times the clipped value loss is added to the policy loss: one backward, one
optimizer (the head's parameters join the policy's AdamW, learning rate and gradient clip).
"""

from __future__ import annotations

import contextlib
import math
from collections import defaultdict

import numpy as np
import torch

from gigpo.learner.logprobs import prompt_order, token_logprobs
from gigpo.learner.distributed import Dist
from gigpo.learner.precision import autocast_context
from gigpo.learner.loss import Norm, actor_loss, token_budget_microbatches, value_loss


class TrainingDiverged(RuntimeError):
    """Too many consecutive non-finite losses; the run stops instead of corrupting weights."""


def pad_float_rows(seqs, idx, width: int, device) -> torch.Tensor:
    """Rows ``idx`` of the per-row float arrays ``seqs``, right-padded with 0 to ``[len(idx), width]``."""
    out = torch.zeros(len(idx), width, dtype=torch.float32)
    for j, i in enumerate(idx):
        v = torch.as_tensor(np.asarray(seqs[i], dtype=np.float32))
        out[j, : len(v)] = v
    return out.to(device)


def padded_lengths(prompts, responses, multiple: int = 1) -> list[int]:
    """Row lengths as ``token_logprobs(..., pad_multiple=multiple)`` pads them (for the token budget)."""
    return [-(-(len(p) + len(r)) // multiple) * multiple for p, r in zip(prompts, responses)]


def identical_row_groups(prompts, responses, advantages, old_logp, allowed=None, tol: float = 1e-5) -> list[np.ndarray]:
    """The update's rows grouped where they are one sample repeated: the same prompt and response
    tokens, the same constrained positions, advantages of one sign (0 goes with the negatives) and
    old log-probs within ``tol`` of the group's first row. Rows of a repeated state (a Sokoban grid
    every rollout passes, the same action taken there) are such groups.

    Why merging them is exact: the clipped surrogate with dual clip is ``|A| * h(ratio)`` with one
    ``h`` per sign of A, so k rows of one sign sum to ``k * mean(A) * h(ratio)``: one row of weight
    k and advantage mean(A). Entropy and KL terms do not involve A and weigh k times as well.
    Returns the groups as index arrays, in order of their first row.
    """
    buckets: dict[tuple, list[int]] = {}
    groups: list[list[int]] = []
    for i in range(len(prompts)):
        key = (
            *_row_key(prompts[i], responses[i], allowed[i] if allowed is not None else None),
            bool(advantages[i] > 0),
        )
        lp = np.asarray(old_logp[i], dtype=np.float64)
        for g in buckets.setdefault(key, []):
            first = np.asarray(old_logp[groups[g][0]], dtype=np.float64)
            if np.abs(lp - first).max(initial=0.0) <= tol:
                groups[g].append(i)
                break
        else:
            buckets[key].append(len(groups))
            groups.append([i])
    return [np.asarray(g) for g in groups]


def _mean_rows(seqs, groups) -> list:
    """Per group, the mean of the rows' float arrays (the row itself for a group of one)."""
    return [seqs[g[0]] if len(g) == 1 else np.mean([np.asarray(seqs[i], np.float64) for i in g], 0) for g in groups]


def by_prompt(order: np.ndarray, prompts) -> np.ndarray:
    """``order`` with the rows of each prompt brought together, prompts in the order of their first
    row in ``order`` (a random order of rows gives a random order of prompts)."""
    groups: dict[bytes, list[int]] = {}
    for i in order:
        groups.setdefault(np.asarray(prompts[i]).tobytes(), []).append(int(i))
    return np.array([i for g in groups.values() for i in g], dtype=np.int64)


@contextlib.contextmanager
def update_attention(model, kernel: str):
    """``model`` with the attention kernel ``kernel`` (``train.update_attention``; '' = its own)
    inside the block, its own again after."""
    own = getattr(getattr(model, "config", None), "_attn_implementation", None)
    if not kernel or own is None or kernel == own or not hasattr(model, "set_attn_implementation"):
        yield
        return
    model.set_attn_implementation(kernel)
    try:
        yield
    finally:
        model.set_attn_implementation(own)


def weighted_mini_batches(order: np.ndarray, weights: np.ndarray, rows: int) -> list[np.ndarray]:
    """``order`` cut into ``ceil(total / rows)`` consecutive mini-batches of about equal weight
    (a merged row counts as the rows it stands for and is not split). Equal sizes instead of full
    ones and a remainder: a remainder of a few rows would get a whole optimizer step of its own
    (Adam's step does not shrink with the batch). ``rows`` dividing the total gives slices of ``rows``."""
    cum = np.cumsum(np.asarray(weights, dtype=np.float64)[order])
    total = float(cum[-1]) if len(cum) else 0.0
    k = max(1, math.ceil(total / rows - 1e-9))
    cuts = [int(np.searchsorted(cum, total * j / k - 1e-6)) + 1 for j in range(1, k)]
    return [b for b in np.split(order, cuts) if len(b)]


@torch.no_grad()
def batched_logprobs(
    model,
    prompts,
    responses,
    *,
    pad_token_id: int,
    temperature: float,
    token_budget: int,
    allowed=None,
    autocast: str = "none",
    pad_multiple: int = 1,
    share_prefix: bool = False,
) -> list[np.ndarray]:
    """Per-row response log-probs (float32 arrays), computed in token-budget micro-batches.
    ``allowed``: per-row action-constrained positions (``gigpo.policy.constrain``) or None;
    ``autocast``: ``train.autocast``; ``pad_multiple``: ``train.pad_multiple``; ``share_prefix``:
    ``train.share_prefix`` (micro-batches then take rows in prompt order).

    A row repeated in the batch (the same prompt, response and constrained positions: rollouts
    that pass one state and take one action there) is computed once and its log-probs copied."""
    was_training = model.training
    model.eval()
    first: dict[tuple, int] = {}
    keys = (
        _row_key(prompts[i], responses[i], allowed[i] if allowed is not None else None) for i in range(len(prompts))
    )
    src = [first.setdefault(k, i) for i, k in enumerate(keys)]
    rows = list(first.values())  # each distinct row's first index, in batch order
    P, R = [prompts[i] for i in rows], [responses[i] for i in rows]
    lengths = padded_lengths(P, R, pad_multiple)
    got: dict[int, np.ndarray] = {}
    order = prompt_order(P) if share_prefix else None
    for mb in token_budget_microbatches(lengths, token_budget, order):
        with autocast_context(model, autocast):
            lp, _, _ = token_logprobs(
                model,
                [P[i] for i in mb],
                [R[i] for i in mb],
                pad_token_id=pad_token_id,
                temperature=temperature,
                pad_multiple=pad_multiple,
                allowed=[allowed[rows[i]] for i in mb] if allowed is not None else None,
                share_prefix=share_prefix,
            )
        lp = lp.float().cpu().numpy()
        for j, i in enumerate(mb):
            got[rows[i]] = lp[j, : len(R[i])]
    model.train(was_training)
    return [got[s].copy() for s in src]


def _row_key(prompt, response, allowed) -> tuple:
    akey = tuple((int(k), np.asarray(ids).tobytes()) for k, ids in allowed) if allowed else None
    return (np.asarray(prompt).tobytes(), np.asarray(response).tobytes(), akey)


# Metrics of the update that are shares of the step's loss (summed over micro-batches and ranks);
# the others are micro-batch means, weighted by the micro-batch's response tokens.
BEHAV_METRICS = ("behav_weight_mean", "behav_weight_max", "behav_truncated", "behav_kl_k3")
_SHARE_METRICS = ("loss", "pg_loss", "entropy", "kl", "value_loss")
# Maxima: over micro-batches, ranks and optimizer steps (a token-weighted mean of maxima is no max).
_MAX_METRICS = ("behav_weight_max",)


class PolicyUpdater:
    """Holds the optimizer-side state of the update (and the consecutive-NaN counter).

    Args:
        model: the policy (trainable parameters get AdamW). Under ``fsdp`` it is sharded in place.
        cfg: ``TrainConfig``. temperature: the rollout temperature (log-probs use the same
        tempered distribution as the sampler, as the reference does).
        dist: this process's place in a data-parallel job (``gigpo.learner.distributed``); one process
        when None. Every rank must call ``update`` with the same rows and seed.
        value_head: a ``SharedCritic`` on ``model`` (``critic.shared_backbone``) or None; its
        parameters are trained with the policy's, ``vf_coef`` weighing its value loss
        (``cliprange_value`` as ``critic.cliprange_value``).
    """

    def __init__(
        self,
        model,
        cfg,
        *,
        pad_token_id: int,
        temperature: float = 1.0,
        dist: Dist | None = None,
        value_head=None,
        vf_coef: float = 0.0,
        cliprange_value: float = 0.5,
    ) -> None:
        self.model = model
        self.value_head, self.vf_coef, self.cliprange_value = value_head, vf_coef, cliprange_value
        self.cfg = cfg
        self.pad_token_id = pad_token_id
        self.temperature = temperature
        self.dist = dist or Dist.single()
        self.fwd = self.dist.wrap(model)  # the module the update's forward runs through
        self.params = [p for p in model.parameters() if p.requires_grad]
        if value_head is not None:  # after the policy's: the optimizer state's order stays the policy's
            self.params += [p for p in value_head.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.lr_scale = 1.0  # lowered by each watchdog rollback (gigpo.train.guards)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self._lr_factor)
        self.bad_updates = 0  # consecutive non-finite losses

    def _lr_factor(self, it: int) -> float:
        """Linear warm-up over ``warmup_iterations`` then constant or cosine (per iteration),
        times ``lr_scale``."""
        w = self.cfg.warmup_iterations
        if w and it < w:
            return self.lr_scale * (it + 1) / w
        if self.cfg.schedule == "cosine":
            total = max(1, self.cfg.iterations - w)
            return self.lr_scale * 0.5 * (1 + math.cos(math.pi * min(1.0, (it - w) / total)))
        return self.lr_scale

    def state_dict(self) -> dict:
        """Optimizer and schedule state (under ``fsdp`` a collective; full on rank 0 only)."""
        return {
            "optimizer": self.dist.full_optim_state(self.model, self.optimizer),
            "scheduler": self.scheduler.state_dict(),
            "bad_updates": self.bad_updates,
            "lr_scale": self.lr_scale,
        }

    def load_state_dict(self, state: dict) -> None:
        self.dist.load_full_optim_state(self.model, self.optimizer, state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.bad_updates = state["bad_updates"]
        self.lr_scale = float(state.get("lr_scale", 1.0))

    def roll_back(self, state: dict, lr_factor: float) -> None:
        """Restore the optimizer state of an earlier point (``state_dict()`` of then) but keep the
        schedule's position; scale the learning rate by ``lr_factor`` from now on."""
        self.dist.load_full_optim_state(self.model, self.optimizer, state["optimizer"])
        self.lr_scale *= lr_factor
        self.bad_updates = 0
        self._apply_schedule()

    def set_lr(self, lr: float) -> None:
        """Make ``lr`` the base learning rate (e.g. a resumed run's new ``train.lr``): the loaded
        optimizer and scheduler states would otherwise keep the old one."""
        self.scheduler.base_lrs = [lr for _ in self.optimizer.param_groups]
        for g in self.optimizer.param_groups:
            g["initial_lr"] = lr
        self._apply_schedule()

    def _apply_schedule(self) -> None:
        """Set each group's lr from its base lr and the schedule at its current position."""
        factor = self._lr_factor(max(self.scheduler.last_epoch, 0))
        for g in self.optimizer.param_groups:
            g["lr"] = g["initial_lr"] * factor
        self.scheduler._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    def update(
        self,
        prompts,
        responses,
        advantages,
        old_logp,
        ref_logp=None,
        *,
        seed: int = 0,
        allowed=None,
        token_advantages=None,
        old_values=None,
        returns=None,
        behav_logp=None,
    ) -> dict:
        """Run ``ppo_epochs`` over the rows; returns averaged metrics (see docs/metrics.md).
        ``allowed``: per-row action-constrained positions (``gigpo.policy.constrain``) or None.
        ``token_advantages``: per-row arrays of per-token advantages, used instead of ``advantages``.
        ``old_values``, ``returns``: per-row token arrays, the value head's targets (with
        ``value_head`` only; then ``value_loss`` and ``vf_clipfrac`` are among the metrics).
        ``behav_logp``: per-row arrays, the sampling policy's log-probs when ``old_logp`` is the
        proximal policy's (decoupled PPO, ``actor_loss``); None: ``old_logp`` sampled the rows."""
        if (self.value_head is not None) != (returns is not None and old_values is not None):
            raise ValueError("old_values and returns are given exactly when the updater has a value_head")
        kw = dict(ref_logp=ref_logp, seed=seed, allowed=allowed, token_advantages=token_advantages)
        with update_attention(self.model, self.cfg.update_attention):
            return self._update(prompts, responses, advantages, old_logp, old_values, returns, behav_logp, **kw)

    def _update(
        self,
        prompts,
        responses,
        advantages,
        old_logp,
        old_values,
        returns,
        behav_logp,
        *,
        ref_logp,
        seed,
        allowed,
        token_advantages,
    ) -> dict:
        vt = (old_values, returns) if returns is not None else None
        cfg, model = self.cfg, self.model
        model.train()
        adv = np.asarray(advantages, dtype=np.float32)
        weights = np.ones(len(prompts), dtype=np.float32)
        # Per-token advantages and value targets differ between repeats of a row; GSPO's
        # per-row ratio is not written for weighted rows. Those update every row as it is.
        if cfg.merge_identical_rows and token_advantages is None and vt is None and cfg.policy_loss == "ppo":
            groups = identical_row_groups(prompts, responses, adv, old_logp, allowed)
            if len(groups) < len(prompts):
                first = [int(g[0]) for g in groups]
                prompts, responses = [prompts[i] for i in first], [responses[i] for i in first]
                allowed = [allowed[i] for i in first] if allowed is not None else None
                weights = np.array([len(g) for g in groups], dtype=np.float32)
                adv = np.array([adv[g].mean() for g in groups], dtype=np.float32)
                old_logp = _mean_rows(old_logp, groups)
                ref_logp = _mean_rows(ref_logp, groups) if ref_logp is not None else None
                behav_logp = _mean_rows(behav_logp, groups) if behav_logp is not None else None
        n = len(prompts)
        rng = np.random.default_rng(seed)
        acc: dict[str, list[float]] = defaultdict(list)
        status: dict[str, int] = defaultdict(int)
        for _epoch in range(cfg.ppo_epochs):
            order = rng.permutation(n)
            if cfg.mini_batch_order == "by_prompt":
                order = by_prompt(order, prompts)
            for rows in weighted_mini_batches(order, weights, cfg.mini_batch_rows):
                st = self._step(
                    rows,
                    prompts,
                    responses,
                    adv,
                    old_logp,
                    ref_logp,
                    acc,
                    allowed,
                    token_advantages,
                    vt,
                    weights,
                    behav_logp,
                )
                status[st] += 1
                if st == "kl":
                    break
            if status["kl"]:
                break
        self.scheduler.step()
        # means over optimizer steps
        out = {k: float(np.max(v) if k in _MAX_METRICS else np.mean(v)) for k, v in acc.items()}
        out["skipped_updates"] = status["nonfinite"]
        out["optimizer_steps"] = status["ok"]
        out["kl_stopped"] = status["kl"]
        out["distinct_rows"] = n
        out["lr"] = self.optimizer.param_groups[0]["lr"]
        return out

    def _step(
        self,
        rows,
        prompts,
        responses,
        adv,
        old_logp,
        ref_logp,
        acc,
        allowed=None,
        token_adv=None,
        vt=None,
        weights=None,
        behav_logp=None,
    ) -> str:
        """One optimizer step on the mini-batch ``rows`` (this rank's share of it under ``dist``);
        appends the step's metrics to ``acc``. Returns "ok", or why the step was not taken:
        "nonfinite" (loss or gradient), "kl" (the policy is already ``train.target_kl`` away from
        the sampler's on these rows; the caller ends the update).
        ``weights``: per row, how many identical rows it stands for (``identical_row_groups``)."""
        cfg, model, dist, dev = self.cfg, self.model, self.dist, next(self.model.parameters()).device
        w = weights if weights is not None else np.ones(len(prompts), dtype=np.float32)
        # The loss's denominators are the whole mini-batch's, whichever rows this rank holds.
        norm = Norm(tokens=float(sum(w[i] * len(responses[i]) for i in rows)), rows=float(sum(w[i] for i in rows)))
        lengths = padded_lengths([prompts[i] for i in rows], [responses[i] for i in rows], cfg.pad_multiple)
        mine = dist.shard(list(rows), lengths) if dist.enabled else list(rows)
        lengths = padded_lengths([prompts[i] for i in mine], [responses[i] for i in mine], cfg.pad_multiple)
        # Two forward passes per micro-batch (prefix, rest) under a wrapped model would be two
        # collectives for one backward: sharing prefixes is for one process.
        share = cfg.share_prefix and not dist.enabled and vt is None
        order = prompt_order([prompts[i] for i in mine]) if share else None
        mbs: list[list | None] = [
            [mine[j] for j in mb] for mb in token_budget_microbatches(lengths, cfg.micro_token_budget, order)
        ]
        # Each forward/backward of a wrapped model is a collective: every rank runs as many
        # micro-batches; a rank short of rows runs zero-weight ones on the mini-batch's first row.
        n_mb = dist.max_int(len(mbs))
        mbs += [None] * (n_mb - len(mbs))
        self.optimizer.zero_grad(set_to_none=True)
        finite = True
        sums: dict[str, float] = defaultdict(float)  # shares summed; other metrics token-weighted
        for j, mb in enumerate(mbs):
            idx = mb if mb is not None else [rows[0]]
            with dist.no_sync(self.fwd, last=j == n_mb - 1):
                with autocast_context(model, cfg.autocast):
                    lp, ent, mask, *hidden = token_logprobs(
                        self.fwd,
                        [prompts[i] for i in idx],
                        [responses[i] for i in idx],
                        pad_token_id=self.pad_token_id,
                        temperature=self.temperature,
                        with_entropy=cfg.entropy_coef > 0,
                        pad_multiple=cfg.pad_multiple,
                        allowed=[allowed[i] for i in idx] if allowed is not None else None,
                        with_hidden=vt is not None,
                        share_prefix=share,
                    )
                    values = self.value_head.head(hidden[0]) * mask if vt is not None else None
                if weights is not None and mb is not None:
                    # a merged row's tokens count once per row it stands for, in loss and metrics
                    mask = mask * torch.as_tensor(w[idx], device=dev)[:, None]
                width = lp.shape[1]
                old = pad_float_rows(old_logp, idx, width, dev)
                ref = pad_float_rows(ref_logp, idx, width, dev) if ref_logp is not None else None
                behav = pad_float_rows(behav_logp, idx, width, dev) if behav_logp is not None else None
                if token_adv is not None:
                    a = pad_float_rows(token_adv, idx, width, dev)  # (B, L): one advantage per token
                else:
                    a = torch.as_tensor(adv[idx], device=dev)  # (B,) broadcast over tokens in the loss
                loss, m = actor_loss(
                    lp,
                    old,
                    a,
                    mask,
                    entropy=ent,
                    ref_logp=ref,
                    clip_low=cfg.clip_low,
                    clip_high=cfg.clip_high,
                    dual_clip_c=cfg.dual_clip_c,
                    agg_mode=cfg.loss_agg_mode,
                    entropy_coef=cfg.entropy_coef,
                    kl_type=cfg.kl_type,
                    kl_coef=cfg.kl_coef if ref is not None else 0.0,
                    policy_loss=cfg.policy_loss,
                    norm=norm,
                    behav_logp=behav,
                    behav_weight_cap=cfg.behav_weight_cap,
                )
                if values is not None and vt is not None:
                    vl, m["vf_clipfrac"] = value_loss(
                        values,
                        pad_float_rows(vt[0], idx, width, dev),
                        pad_float_rows(vt[1], idx, width, dev),
                        mask,
                        cliprange_value=self.cliprange_value,
                        agg_mode=cfg.loss_agg_mode,
                        norm=norm,
                    )
                    m["value_loss"] = float(vl.detach())
                    loss = loss + self.vf_coef * vl
                if mb is None:
                    loss = loss * 0.0  # a zero-weight micro-batch: only its collectives count
                elif not torch.isfinite(loss):
                    finite = False
                # DDP and FSDP average gradients over ranks; the shares are of the whole step.
                (loss * dist.world).backward()
            if mb is None or not finite:
                continue
            n_tok = float(mask.sum())
            m["loss"] = float(loss.detach())
            for k, v in m.items():
                if k in _MAX_METRICS:
                    sums[k] = max(sums.get(k, v), v)
                else:
                    sums[k] += v if k in _SHARE_METRICS else v * n_tok
        params = self.params
        if dist.enabled:
            # Same names on every rank (actor_loss's, a rank without rows sends zeros); the last
            # entry counts the ranks that saw a non-finite loss, so all skip the step together.
            keys = ["loss", "pg_loss", "clipfrac", "clipfrac_lower", "approx_kl", "kl_k3"]
            keys += ["entropy"] * (cfg.entropy_coef > 0) + ["kl"] * (ref_logp is not None)
            keys += list(BEHAV_METRICS) * (behav_logp is not None)
            maxed = [k for k in keys if k in _MAX_METRICS]
            keys = [k for k in keys if k not in _MAX_METRICS]
            totals = dist.sum([sums.get(k, 0.0) for k in keys] + [0.0 if finite else 1.0])
            finite = totals[-1] == 0.0
            # a rank without rows sends 0: below any weight (weights are > 0)
            sums = dict(zip(keys, totals[:-1])) | dict(zip(maxed, dist.max([sums.get(k, 0.0) for k in maxed])))
        if finite:
            gn = torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip if cfg.grad_clip > 0 else float("inf"))
            if hasattr(gn, "full_tensor"):  # a DTensor under FSDP
                gn = gn.full_tensor()
            finite = bool(torch.isfinite(gn))
        if not finite:
            # NaN/inf guard (the same decision on every rank): drop this step's gradients and keep
            # the previous weights.
            self.optimizer.zero_grad(set_to_none=True)
            self.bad_updates += 1
            acc["nonfinite_loss"].append(1.0)
            if self.bad_updates >= cfg.max_bad_updates:
                raise TrainingDiverged(
                    f"{self.bad_updates} consecutive updates had a non-finite loss or gradient; stopping. "
                    "Lower train.lr, check the model dtype (float32 is safest), or raise train.max_bad_updates."
                )
            return "nonfinite"
        if cfg.target_kl > 0 and sums.get("kl_k3", 0.0) / max(norm.tokens, 1.0) > cfg.target_kl:
            # Measured before this step: earlier steps moved the policy this far (same decision on
            # every rank: the sums are all-reduced).
            self.optimizer.zero_grad(set_to_none=True)
            return "kl"
        for k, v in sums.items():
            acc[k].append(v if k in _SHARE_METRICS + _MAX_METRICS else v / max(norm.tokens, 1.0))
        self.bad_updates = 0
        self.optimizer.step()
        acc["grad_norm"].append(float(gn))
        return "ok"

"""The actor loss as the reference computes it (docs/algorithm.md#loss; verl ``core_algos.py``).

All per-token tensors here are ``[B, L]``: row b is one agent step, column k its k-th response
token; ``mask`` is 1.0 on real response tokens and 0.0 on right padding.

``total = pg_loss - entropy_coef * agg(entropy) + kl_coef * agg(kl)``, each aggregated with the
same ``loss_agg_mode``. ``pg_loss`` is PPO's per-token clipped surrogate (``ppo``) or GSPO's
sequence-level one (``gspo``, ``gspo_loss``); ``POLICY_LOSSES`` names them.

Under gradient accumulation (and across data-parallel ranks) a micro-batch's loss is its *share* of
the optimizer step's loss: the sum of its masked token (or row) terms divided by the token (or row)
count of the whole mini-batch (``Norm``), not by its own. The micro-batch shares then add up to
the mini-batch's loss however its rows are split into micro-batches or over ranks, and no
division by the number of micro-batches is needed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp_min(1.0)


AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean")
KL_TYPES = ("low_var_kl", "kl", "abs", "mse")
POLICY_LOSSES = ("ppo", "gspo")
# GSPO's objective is a mean over sequences (arXiv:2507.18071); verl's loss_mode=gspo aggregates its
# policy term this way whatever loss_agg_mode says. Here gspo requires it, so KL and entropy match.
GSPO_AGG_MODE = "seq-mean-token-mean"


@dataclass(frozen=True)
class Norm:
    """The denominators of an optimizer step's loss: its mini-batch's response tokens and rows.

    A micro-batch aggregated with ``Norm`` of its mini-batch gives its share of the mini-batch's
    loss (``agg_loss``); without one, a micro-batch is its own mini-batch.
    """

    tokens: float
    rows: float


def agg_loss(loss: torch.Tensor, mask: torch.Tensor, mode: str, norm: Norm | None = None) -> torch.Tensor:
    """Reduce a per-token loss ``[B, L]`` to a scalar.

    token-mean:           sum over all tokens / number of tokens (long responses weigh more).
    seq-mean-token-sum:   per row sum over tokens, then mean over rows.
    seq-mean-token-mean:  per row mean over its tokens, then mean over rows.

    ``norm``: the mini-batch's token and row counts; the sums are divided by those instead of this
    tensor's own, so the shares of a mini-batch's micro-batches add up to its loss.
    """
    if mode == "token-mean":
        tokens = mask.sum().clamp_min(1.0) if norm is None else max(norm.tokens, 1.0)
        return (loss * mask).sum() / tokens
    rows = loss.shape[0] if norm is None else norm.rows
    row_sum = (loss * mask).sum(-1)  # (B,)
    if mode == "seq-mean-token-sum":
        return row_sum.sum() / max(rows, 1)
    if mode == "seq-mean-token-mean":
        # a row's token count, whatever weight its mask carries (a merged row: the rows it stands for)
        return (row_sum / (mask > 0).sum(-1).clamp_min(1)).sum() / max(rows, 1)
    raise ValueError(f"unknown loss_agg_mode {mode!r}; use one of {list(AGG_MODES)}")


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, kl_type: str) -> torch.Tensor:
    """Per-token KL estimate of the current policy from the frozen reference.

    low_var_kl is Schulman's k3 estimator ``exp(ref - logp) - (ref - logp) - 1`` (>= 0), with the
    reference's clamps: log-ratio to [-20, 20] before exp, result to [-10, 10].
    """
    if kl_type == "kl":
        return logp - ref_logp
    if kl_type == "abs":
        return (logp - ref_logp).abs()
    if kl_type == "mse":
        return 0.5 * (logp - ref_logp).square()
    if kl_type == "low_var_kl":
        kl = (ref_logp - logp).clamp(-20.0, 20.0)
        return (kl.exp() - kl - 1.0).clamp(-10.0, 10.0)
    raise ValueError(f"unknown kl_type {kl_type!r}; use one of {list(KL_TYPES)}")


@dataclass
class PGStats:
    clipfrac: float  # share of tokens (gspo: of rows) where the clipped branch was taken
    clipfrac_lower: float  # share of tokens where the dual clip (A < 0) bound was taken
    approx_kl: float  # masked mean of (old - new) log-prob: how far the update moved
    kl_k3: float  # masked mean of (r - 1) - log r, r = new / old: the same, >= 0 per token (train.target_kl)


def policy_gradient_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip_c: float = 3.0,
    agg_mode: str = "token-mean",
    norm: Norm | None = None,
    token_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, PGStats]:
    """Clipped surrogate with separate low/high clip and dual clip for A < 0.

    logp, old_logp, mask: [B, L]; advantages: [B, L] (a row's scalar broadcast over its tokens)
    or [B] (broadcast here). ``token_weights`` [B, L] (no gradient): each token's surrogate is
    multiplied by it (decoupled PPO's behaviour importance weight, ``behaviour_weights``).
    """
    if advantages.dim() == 1:
        advantages = advantages[:, None].expand_as(logp)
    neg_kl = (logp - old_logp).clamp(-20.0, 20.0)
    ratio = neg_kl.exp()
    l1 = -advantages * ratio
    l2 = -advantages * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    clipped = torch.maximum(l1, l2)
    l3 = -advantages * dual_clip_c
    dual = torch.minimum(l3, clipped)
    per_token = torch.where(advantages < 0, dual, clipped)
    if token_weights is not None:
        per_token = per_token * token_weights
    with torch.no_grad():
        stats = PGStats(
            clipfrac=float(masked_mean((l2 > l1).float(), mask)),
            clipfrac_lower=float(masked_mean(((clipped > l3) & (advantages < 0)).float(), mask)),
            approx_kl=float(masked_mean(-neg_kl, mask)),
            kl_k3=float(masked_mean(ratio - 1.0 - neg_kl, mask)),
        )
    return agg_loss(per_token, mask, agg_mode, norm), stats


def gspo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float = 3e-4,
    clip_high: float = 4e-4,
    agg_mode: str = GSPO_AGG_MODE,
    norm: Norm | None = None,
    token_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, PGStats]:
    """GSPO's clipped surrogate with the sequence-level ratio (Zheng et al., arXiv:2507.18071).

    Row i is one sequence: ``s_i = exp(masked mean over its tokens of (logp - old_logp))``, the
    geometric mean of its token ratios, clipped to [1 - clip_low, 1 + clip_high]; the loss is
    ``max(-A s_i, -A clip(s_i))`` averaged per row (``seq-mean-token-mean``, the only mode allowed).

    Written in verl's GSPO-token form: every token of row i carries the ratio
    ``sg[s_i] * pi(y_t) / sg[pi(y_t)]``, whose value is s_i and whose gradient w.r.t. ``logp[i, t]``
    is ``s_i``; with a row's advantage on every token this has the value and gradient of the
    sequence form (advantages varying over a row's tokens give the paper's GSPO-token). As verl:
    the log-ratio is clamped at 10 before exp, there is no dual clip. Default clips are the
    paper's (3e-4, 4e-4).
    """
    if agg_mode != GSPO_AGG_MODE:
        raise ValueError(f"gspo averages per sequence: use loss_agg_mode {GSPO_AGG_MODE!r}, got {agg_mode!r}")
    if advantages.dim() == 1:
        advantages = advantages[:, None].expand_as(logp)
    n_tok = mask.sum(-1)
    log_ratio = logp - old_logp
    seq_log_ratio = (log_ratio * mask).sum(-1) / n_tok.clamp_min(1.0)  # (B,) log s_i
    tok_log_ratio = logp - logp.detach() + seq_log_ratio.detach()[:, None]
    ratio = tok_log_ratio.clamp(max=10.0).exp()
    l1 = -advantages * ratio
    l2 = -advantages * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    per_token = torch.maximum(l1, l2)
    if token_weights is not None:
        per_token = per_token * token_weights
    with torch.no_grad():
        # Per row the clipped branch is all or nothing (one ratio, one advantage), so the mean over
        # rows with tokens of each row's clipped share is the share of sequences clipped.
        rows = n_tok > 0
        row_clip = ((l2 > l1).float() * mask).sum(-1) / n_tok.clamp_min(1.0)
        stats = PGStats(
            clipfrac=float(row_clip[rows].mean()) if bool(rows.any()) else 0.0,
            clipfrac_lower=0.0,
            approx_kl=float(masked_mean(-log_ratio, mask)),
            kl_k3=float(masked_mean(log_ratio.clamp(-20.0, 20.0).exp() - 1.0 - log_ratio, mask)),
        )
    return agg_loss(per_token, mask, GSPO_AGG_MODE, norm), stats


def actor_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    entropy: torch.Tensor | None = None,
    ref_logp: torch.Tensor | None = None,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip_c: float = 3.0,
    agg_mode: str = "token-mean",
    entropy_coef: float = 0.0,
    kl_type: str = "low_var_kl",
    kl_coef: float = 0.0,
    policy_loss: str = "ppo",
    norm: Norm | None = None,
    behav_logp: torch.Tensor | None = None,
    behav_weight_cap: float = 2.0,
) -> tuple[torch.Tensor, dict]:
    """The full actor loss of one micro-batch: its share of the mini-batch's loss under ``norm``
    (the mini-batch's counts, ``agg_loss``), or its own loss without one.

    ``policy_loss``: ``ppo`` (``policy_gradient_loss``) or ``gspo`` (``gspo_loss``; ignores
    ``dual_clip_c`` and needs ``agg_mode`` = ``GSPO_AGG_MODE``).
    Returns (loss scalar, metrics dict with pg_loss, entropy, kl (shares like the loss), clipfrac,
    clipfrac_lower, approx_kl, kl_k3 (this micro-batch's own means)).

    ``behav_logp``: the log-probs of the policy that sampled the rows when it is not ``old_logp``'s
    (rows sampled some updates ago, ``train.off_policy_steps``): decoupled PPO, where ``old_logp``
    is the proximal policy and every token's term is weighted by ``behaviour_weights``; the metrics
    then add ``behav_weight_mean``, ``behav_weight_max``, ``behav_truncated`` and ``behav_kl_k3``.
    """
    weights, behav = None, dict[str, float]()
    if behav_logp is not None:
        weights, behav = behaviour_weights(old_logp, behav_logp, mask, behav_weight_cap)
    if policy_loss == "ppo":
        pg, st = policy_gradient_loss(
            logp,
            old_logp,
            advantages,
            mask,
            clip_low=clip_low,
            clip_high=clip_high,
            dual_clip_c=dual_clip_c,
            agg_mode=agg_mode,
            norm=norm,
            token_weights=weights,
        )
    elif policy_loss == "gspo":
        pg, st = gspo_loss(
            logp,
            old_logp,
            advantages,
            mask,
            clip_low=clip_low,
            clip_high=clip_high,
            agg_mode=agg_mode,
            norm=norm,
            token_weights=weights,
        )
    else:
        raise ValueError(f"unknown policy_loss {policy_loss!r}; use one of {list(POLICY_LOSSES)}")
    loss = pg
    out = {
        "pg_loss": float(pg.detach()),
        "clipfrac": st.clipfrac,
        "clipfrac_lower": st.clipfrac_lower,
        "approx_kl": st.approx_kl,
        "kl_k3": st.kl_k3,
    } | behav
    if entropy is not None:
        ent = agg_loss(entropy, mask, agg_mode, norm)
        loss = loss - entropy_coef * ent
        out["entropy"] = float(ent.detach())
    if ref_logp is not None:
        kl = agg_loss(kl_penalty(logp, ref_logp, kl_type), mask, agg_mode, norm)
        loss = loss + kl_coef * kl
        out["kl"] = float(kl.detach())
    return loss, out


def behaviour_weights(
    prox_logp: torch.Tensor, behav_logp: torch.Tensor, mask: torch.Tensor, cap: float
) -> tuple[torch.Tensor, dict]:
    """Decoupled PPO's token weights ``min(pi_prox / pi_behav, cap)`` (no gradient) and their
    statistics.

    The clipped ratio is taken against the proximal policy (the learner's at the start of the
    update) and the behaviour policy's samples are reweighted to it (Hilton et al., "Batch
    size-invariance for policy optimization", 2022; AReaL, arXiv:2505.24298). The weight is
    truncated at ``cap`` as truncated importance sampling does (TIS, Yao et al. 2025; verl's
    ``tis_imp_ratio_cap`` defaults to 2); AReaL's ``behav_imp_weight_cap`` drops such tokens instead.
    ``behav_kl_k3``: the masked mean of k3 KL(behav || prox), how far the data is off-policy.
    """
    with torch.no_grad():
        log_w = (prox_logp - behav_logp).clamp(-20.0, 20.0)
        w = log_w.exp()
        on = mask > 0
        n = on.sum().clamp_min(1)
        stats = {
            "behav_weight_mean": float((w * on).sum() / n),
            "behav_weight_max": float(w[on].max()) if bool(on.any()) else 1.0,
            "behav_truncated": float(((w > cap) & on).sum() / n),
            "behav_kl_k3": float(((w - 1.0 - log_w) * on).sum() / n),
        }
        return w.clamp(max=cap), stats


def value_loss(
    vpreds: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    *,
    cliprange_value: float = 0.5,
    agg_mode: str = "token-mean",
    norm: Norm | None = None,
) -> tuple[torch.Tensor, float]:
    """PPO's clipped value loss (verl ``compute_value_loss``), all tensors ``[B, L]``.

    ``0.5 * agg(max((v - R)^2, (clip(v, v_old - c, v_old + c) - R)^2))``: a token's value may not
    gain by moving more than ``c`` from the value the advantages were computed with.
    ``norm``: the mini-batch's counts (``agg_loss``), for a micro-batch's share of its loss.
    Returns (loss, vf_clipfrac: share of tokens where the clipped error was the larger).
    """
    clipped = torch.maximum(torch.minimum(vpreds, old_values + cliprange_value), old_values - cliprange_value)
    l1 = (vpreds - returns).square()
    l2 = (clipped - returns).square()
    loss = 0.5 * agg_loss(torch.maximum(l1, l2), mask, agg_mode, norm)
    with torch.no_grad():
        clipfrac = float(masked_mean((l2 > l1).float(), mask))
    return loss, clipfrac


def token_budget_microbatches(lengths, budget: int, order=None) -> list[list[int]]:
    """Split rows into micro-batches whose padded size (rows x longest row) stays <= ``budget``.

    Rows are sorted by length (longest first) so rows of similar length share a micro-batch and
    padding stays small; ``order`` (all row indices) takes them in that order instead (by prompt,
    so that rows sharing a prefix share a micro-batch). A row longer than the budget gets a
    micro-batch of its own. Every row index appears in exactly one micro-batch.
    """
    if budget < 1:
        raise ValueError(f"token budget must be >= 1, got {budget}")
    if order is None:
        order = sorted(range(len(lengths)), key=lambda i: (-int(lengths[i]), i))
    batches: list[list[int]] = []
    cur: list[int] = []
    cur_max = 0
    for i in order:
        n = int(lengths[i])
        new_max = max(cur_max, n)
        if cur and new_max * (len(cur) + 1) > budget:
            batches.append(cur)
            cur, new_max = [], n
        cur.append(i)
        cur_max = new_max
    if cur:
        batches.append(cur)
    return batches

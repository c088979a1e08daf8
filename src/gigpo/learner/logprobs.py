"""Log-probs of response tokens under a model: the one computation the sampler's check, the SFT and
the policy update share, so that the log-probs the learner trains with are the sampler's to the bit.

Rows are prompt + response token ids (int arrays); ``pad_rows`` right-pads them into one batch.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch


def pad_rows(prompts: Sequence[np.ndarray], responses: Sequence[np.ndarray], pad_id: int, multiple: int = 1):
    """Right-pad prompt+response rows into one tensor, ``T`` rounded up to a multiple of ``multiple``.

    Returns input_ids [B, T], attention_mask [B, T], resp_start [B] (index of the first response
    token in each row) and resp_len [B].
    """
    lens = [len(p) + len(r) for p, r in zip(prompts, responses)]
    T = -(-max(lens) // multiple) * multiple
    B = len(lens)
    ids = torch.full((B, T), pad_id, dtype=torch.long)
    mask = torch.zeros((B, T), dtype=torch.long)
    for i, (p, r) in enumerate(zip(prompts, responses)):
        row = np.concatenate([np.asarray(p, dtype=np.int64), np.asarray(r, dtype=np.int64)])
        ids[i, : len(row)] = torch.from_numpy(row)
        mask[i, : len(row)] = 1
    resp_start = torch.tensor([len(p) for p in prompts], dtype=torch.long)
    resp_len = torch.tensor([len(r) for r in responses], dtype=torch.long)
    return ids, mask, resp_start, resp_len


def token_logprobs(
    model: torch.nn.Module,
    prompts: Sequence[np.ndarray],
    responses: Sequence[np.ndarray],
    *,
    pad_token_id: int,
    temperature: float = 1.0,
    with_entropy: bool = False,
    allowed: Sequence | None = None,
    pad_multiple: int = 1,
    with_hidden: bool = False,
    share_prefix: bool = False,
):
    """Log-probs of ``responses`` given ``prompts`` in one right-padded forward pass.

    ``allowed``: per row None or the restricted positions ``[(k, allowed ids)]`` recorded by an
    action-constrained sampler (``gigpo.policy.constrain``); those positions use the distribution
    renormalised over the allowed ids, as sampled. ``pad_multiple``: pad the row length (and the
    kept logits) to a multiple of this, so that micro-batches repeat a few shapes; the result is
    the same (padding is masked).

    Differentiable (call under ``torch.no_grad()`` when no gradient is needed).
    Returns ``(logprobs [B, Lmax], entropy [B, Lmax] or None, mask [B, Lmax])`` where position k
    of row i is response token k; ``mask`` is 1 on real response tokens, 0 on padding.
    ``with_hidden``: also return the last layer's (normed) hidden state ``[B, Lmax, H]`` at the
    position that predicts response token k, from the same forward (a value head on the policy's
    backbone reads it: ``gigpo.learner.critic.SharedCritic``).
    ``share_prefix``: rows whose prompts begin alike (a task's rollouts, rows from one state) run
    their common prefix once and the rest on its KV cache (``shared_prefix_plan``); the same
    log-probs and gradients up to float rounding, fewer tokens through the model. Falls back to
    the one pass where it would not save tokens, and with ``with_hidden``.
    """
    plan = shared_prefix_plan(prompts, responses, pad_multiple) if share_prefix and not with_hidden else None
    if plan is not None:
        try:
            return _shared_token_logprobs(
                model, prompts, responses, plan, pad_token_id, temperature, with_entropy, allowed, pad_multiple
            )
        except TypeError:  # a model without Hugging Face's cache arguments: the one pass
            pass
    device = next(model.parameters()).device
    ids, attn, start, rlen = pad_rows(prompts, responses, pad_token_id, multiple=pad_multiple)
    ids, attn = ids.to(device), attn.to(device)
    B, T = ids.shape
    # Only the logits that predict response tokens are needed (positions start-1 .. start+len-2,
    # all within lo .. hi-1): ask the model for those logits alone
    # (``logits_to_keep``), which skips the LM head on the prompt (~20% of a tiny model's FLOPs,
    # and the [B, T, V] logits tensor). Models without the argument get the full logits.
    lo = max(int((start - 1).min()), 0) if B else 0
    hi = int((start + rlen - 1).max()) if B else 0
    n_keep = max(hi, lo + 1) - lo
    n_keep = min(-(-n_keep // pad_multiple) * pad_multiple, T - lo)
    extra = {"output_hidden_states": True} if with_hidden else {}
    try:
        out = model(
            input_ids=ids,
            attention_mask=attn,
            use_cache=False,
            logits_to_keep=torch.arange(lo, lo + n_keep, device=device),
            **extra,
        )
    except TypeError:
        out = model(input_ids=ids, attention_mask=attn, use_cache=False, **extra)
    logits = out.logits  # (B, n_keep, V), or (B, T, V) from a model that ignored logits_to_keep
    res = response_logprobs(
        logits,
        ids,
        start,
        rlen,
        first=lo if logits.shape[1] == n_keep else 0,
        temperature=temperature,
        with_entropy=with_entropy,
        allowed=allowed,
    )
    if not with_hidden:
        return res
    logp, ent, mask = res
    h = out.hidden_states[-1]  # (B, T, H), after the final norm (what the LM head reads)
    pos = (start[:, None] - 1 + torch.arange(logp.shape[1])[None, :]).clamp(0, T - 1).to(device)
    return logp, ent, mask, torch.gather(h, 1, pos[:, :, None].expand(-1, -1, h.shape[-1]))


def prompt_order(prompts) -> list[int]:
    """Row indices sorted by prompt: rows whose prompts begin alike are neighbours."""
    return sorted(range(len(prompts)), key=lambda i: (tuple(np.asarray(prompts[i]).tolist()), i))


def _lcp(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(diff[0]) if len(diff) else n


def shared_prefix_plan(prompts, responses, pad_multiple: int = 1, min_saving: float = 0.2):
    """How ``token_logprobs(..., share_prefix=True)`` splits rows into a shared prefix and the rest.

    Rows are sorted by prompt and cut into runs of neighbours; each run shares its prompts' common
    prefix (at most one token short of its shortest prompt, so every row's first response token
    is predicted by its own pass; a run of one row: its prompt but the last token, so that no row's
    rest is long). The cut minimises the tokens run through the model (each prefix once, each
    row's rest), by dynamic programming over the sorted order.
    Returns ``(prefix_len per row, group per row, [(group's first row, prefix_len)])``, or None
    when the padded token count would not drop by ``min_saving`` of the one-pass count.
    """
    n = len(prompts)
    if n < 2:
        return None
    ps = [np.asarray(p) for p in prompts]
    order = prompt_order(ps)
    lens = [len(ps[i]) + len(responses[i]) for i in order]
    lcp = [_lcp(ps[order[k]], ps[order[k + 1]]) for k in range(n - 1)]
    best = [0.0] * (n + 1)  # best[j]: fewest tokens for the first j sorted rows
    cut: list[tuple[int, int]] = [(0, 0)] * (n + 1)  # (start of the last run, its prefix length)
    for j in range(1, n + 1):
        best[j], cut[j] = best[j - 1] + lens[j - 1], (j - 1, 0)
        total, shared = lens[j - 1], len(ps[order[j - 1]]) - 1
        for i in range(j - 2, -1, -1):  # the run i .. j-1
            shared = min(shared, lcp[i], len(ps[order[i]]) - 1)
            if shared <= 0:
                break
            total += lens[i]
            cost = best[i] + total - (j - i - 1) * shared
            if cost < best[j]:
                best[j], cut[j] = cost, (i, shared)
    runs, j = [], n
    while j > 0:
        i, shared = cut[j]
        runs.append((i, j, shared))
        j = i
    prefix_len, group, groups = [0] * n, [0] * n, []
    for i, j, shared in reversed(runs):
        if j - i == 1:  # a row of its own runs its prompt in the prefix pass too: its rest stays short
            shared = len(ps[order[i]]) - 1
        if shared > 0:
            groups.append((order[i], shared))
        for k in range(i, j):
            prefix_len[order[k]] = shared
            group[order[k]] = len(groups) - 1 if shared > 0 else 0
    if not groups:
        return None
    up = lambda x, m: -(-x // m) * m  # noqa: E731
    one_pass = n * up(max(lens), pad_multiple)
    two = len(groups) * up(max(s for _, s in groups), _suffix_multiple(pad_multiple)) + n * up(
        max(len(ps[i]) + len(responses[i]) - prefix_len[i] for i in range(n)), _suffix_multiple(pad_multiple)
    )
    return (prefix_len, group, groups) if two <= (1 - min_saving) * one_pass else None


def _suffix_multiple(pad_multiple: int) -> int:
    # prefixes and rests are padded less than whole rows: a row's rest is short (a prompt's tail
    # and the response), and padding either to a 64-token multiple would undo what sharing saved
    return max(1, min(pad_multiple, 8))


def _shared_token_logprobs(
    model, prompts, responses, plan, pad_token_id, temperature, with_entropy, allowed, pad_multiple
):
    from transformers import DynamicCache

    device = next(model.parameters()).device
    prefix_len, group, groups = plan
    # the prefixes, right-padded: every query has a real token to attend to
    prefixes = [np.asarray(prompts[r])[:s] for r, s in groups]
    empty = [np.zeros(0, np.int64)] * len(groups)
    pre_ids, pre_attn, _, _ = pad_rows(prefixes, empty, pad_token_id, _suffix_multiple(pad_multiple))
    pre_ids, pre_attn = pre_ids.to(device), pre_attn.to(device)
    cache = DynamicCache(config=getattr(model, "config", None))
    model(input_ids=pre_ids, attention_mask=pre_attn, cache=cache, use_cache=True, logits_to_keep=1)
    idx = torch.as_tensor(group, device=device)
    for layer in cache.layers:  # one cache row per row; autograd carries the gradient back
        layer.batch_select_indices(idx)
    start_pos = torch.as_tensor(prefix_len, device=device)
    # rows of no run attend to none of the prefix positions
    pre_mask = pre_attn[idx] * (start_pos > 0)[:, None]
    rest = [np.asarray(p)[s:] for p, s in zip(prompts, prefix_len)]
    ids, attn, start, rlen = pad_rows(rest, responses, pad_token_id, multiple=_suffix_multiple(pad_multiple))
    ids, attn = ids.to(device), attn.to(device)
    B, T = ids.shape
    pos = start_pos[:, None] + torch.arange(T, device=device)[None, :]
    lo = max(int((start - 1).min()), 0)
    hi = int((start + rlen - 1).max())
    n_keep = max(hi, lo + 1) - lo
    out = model(
        input_ids=ids,
        attention_mask=torch.cat([pre_mask, attn], dim=1),
        position_ids=pos,
        cache=cache,
        use_cache=True,
        logits_to_keep=torch.arange(lo, lo + n_keep, device=device),
    )
    return response_logprobs(
        out.logits, ids, start, rlen, first=lo, temperature=temperature, with_entropy=with_entropy, allowed=allowed
    )


def response_logprobs(
    logits: torch.Tensor,
    ids: torch.Tensor,
    start: torch.Tensor,
    rlen: torch.Tensor,
    *,
    first: int = 0,
    temperature: float = 1.0,
    with_entropy: bool = False,
    allowed: Sequence | None = None,
):
    """``token_logprobs``' result from logits already computed over ``pad_rows`` output.

    ``logits[:, j]`` predicts token ``first + j + 1``; ``ids, start, rlen`` are ``pad_rows``'.
    Lets a caller that needs the logits for more than the response (the SFT prompt loss) reuse
    one forward pass.
    """
    device = logits.device
    Lmax = int(rlen.max()) if ids.shape[0] else 0
    pos = start[:, None] - 1 + torch.arange(Lmax)[None, :]  # (B, Lmax)
    mask = torch.arange(Lmax)[None, :] < rlen[:, None]
    pos = torch.where(mask, pos, torch.full_like(pos, first)) - first
    pos = pos.to(device)
    sel = torch.gather(logits, 1, pos[:, :, None].expand(-1, -1, logits.shape[-1]))  # (B, Lmax, V)
    sel = sel.float() / temperature
    if allowed is not None:
        sel = _restrict(sel, allowed)
    logp_all = torch.log_softmax(sel, dim=-1)
    tgt_pos = torch.where(mask, start[:, None] + torch.arange(Lmax)[None, :], torch.zeros_like(mask, dtype=torch.long))
    targets = torch.gather(ids, 1, tgt_pos.to(device))  # (B, Lmax)
    logp = torch.gather(logp_all, 2, targets[:, :, None]).squeeze(-1)
    mask = mask.to(device)
    logp = logp * mask
    ent = None
    if with_entropy:
        p_all = logp_all.exp()
        ent = -(p_all * logp_all.masked_fill(p_all == 0, 0.0)).sum(-1) * mask  # 0 * -inf = 0
    return logp, ent, mask.float()


def _restrict(sel: torch.Tensor, allowed: Sequence) -> torch.Tensor:
    """``sel`` [B, L, V] with the not-allowed logits of the restricted positions set to -inf."""
    rows, ks, ids = [], [], []
    for i, pos in enumerate(allowed):
        for k, a in pos or ():
            if k < sel.shape[1]:
                rows.append(i)
                ks.append(k)
                ids.append(a)
    if not rows:
        return sel
    r = torch.as_tensor(rows, device=sel.device)
    k = torch.as_tensor(ks, device=sel.device)
    return sel.index_put((r, k), mask_logits(sel[r, k], ids))


def mask_logits(logits, allowed_ids: Sequence[np.ndarray]):
    """``logits`` [n, V] with every id outside row i's ``allowed_ids[i]`` set to -inf (a copy)."""
    block = torch.ones(logits.shape, dtype=torch.bool)
    for i, ids in enumerate(allowed_ids):
        block[i, torch.as_tensor(ids, dtype=torch.long)] = False
    return logits.masked_fill(block.to(logits.device), float("-inf"))

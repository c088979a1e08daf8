"""Batched sampling with exact token ids and sampling log-probs: ``HFGenerator`` and ``bare_generate``.

``HFGenerator`` runs its own decode loop over a left-padded batch with a KV cache
(``past_key_values``) preallocated for the whole decode; a prompt that occurs several times in the
batch is prefilled once. Left padding needs an explicit ``attention_mask`` (pads masked) and
``position_ids`` (each row counts positions from its first real token), so a prompt gets the same
tokens alone or in a batch. Rows that sample EOS leave the batch (their cache rows are dropped), so
the remaining steps run on fewer rows.

Returned log-probs are those of the distribution actually sampled from: logits / temperature, then
top-p (nucleus) truncation and renormalisation. Temperature 0 means greedy (argmax) and the
log-probs are then of the untempered, untruncated distribution (log_softmax of the raw logits),
which is what a temperature-1 recomputation by ``token_logprobs`` gives.

``bare_generate`` calls Hugging Face ``model.generate`` on the same batch: a reference for tests
and the rollout benchmark.
"""

from __future__ import annotations

import functools
from typing import Sequence

import numpy as np
import torch

from gigpo.policy.base import Generation, SamplingParams
from gigpo.learner.logprobs import mask_logits


def default_eos_ids(model, tokenizer) -> list[int]:
    """All ids that end a response: generation/model config EOS, tokenizer EOS, and ``<|im_end|>``."""
    ids: set[int] = set()
    for src in (getattr(model, "generation_config", None), getattr(model, "config", None), tokenizer):
        e = getattr(src, "eos_token_id", None)
        ids.update([e] if isinstance(e, int) else list(e or []))
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    if isinstance(im_end, int) and im_end != tokenizer.unk_token_id:
        ids.add(im_end)
    if not ids:
        raise ValueError("the model and tokenizer define no EOS token; pass eos_token_ids=[...] to HFGenerator")
    return sorted(ids)


def check_params(params: SamplingParams) -> None:
    """Raise ``ValueError`` naming the bad field of ``params``."""
    if not params.temperature >= 0:
        raise ValueError(f"SamplingParams.temperature must be >= 0 (0 = greedy), got {params.temperature}")
    if not 0 < params.top_p <= 1:
        raise ValueError(f"SamplingParams.top_p must be in (0, 1], got {params.top_p}")
    if int(params.max_new_tokens) < 1:
        raise ValueError(f"SamplingParams.max_new_tokens must be >= 1, got {params.max_new_tokens}")


def left_pad(prompts: Sequence[Sequence[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token-id lists. Returns input_ids [B, P] and attention_mask [B, P] (1 = real token)."""
    if len(prompts) == 0:
        return torch.zeros((0, 0), dtype=torch.long), torch.zeros((0, 0), dtype=torch.long)
    for i, p in enumerate(prompts):
        if len(p) == 0:
            raise ValueError(f"prompt {i} is empty; every prompt needs at least one token")
    P = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), P), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), P), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, P - len(p) :] = torch.as_tensor(np.asarray(p, dtype=np.int64))
        mask[i, P - len(p) :] = 1
    return ids.to(device), mask.to(device)


def sample_next(logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator | None):
    """Draw one token per row. logits: float [b, V]. Returns (token ids [b], their log-probs [b])."""
    if temperature == 0:
        logp = torch.log_softmax(logits, dim=-1)
        tok = logits.argmax(dim=-1)
        return tok, logp.gather(1, tok[:, None]).squeeze(1)
    logits = logits / temperature
    if top_p < 1.0:
        # Nucleus: keep the smallest top set whose mass reaches top_p (a token stays iff the mass of
        # the tokens ranked above it is still < top_p, so the top token always stays).
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        drop_sorted = (probs.cumsum(dim=-1) - probs) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    logp = torch.log_softmax(logits, dim=-1)
    tok = torch.multinomial(logp.exp(), 1, generator=generator).squeeze(1)
    return tok, logp.gather(1, tok[:, None]).squeeze(1)


class HFGenerator:
    """In-process sampler for a Hugging Face causal LM (implements ``gigpo.policy.base.Generator``).

    Args:
        model: a causal LM (optionally peft-wrapped); its device is used.
        tokenizer: its tokenizer (for pad and EOS ids).
        eos_token_ids: override the stop ids (default ``default_eos_ids(model, tokenizer)``).
        max_batch_size: split larger prompt lists into chunks of this size (memory bound).
        share_prompts: prefill each distinct prompt once and copy its cache rows to the prompts
            equal to it (a task's rollouts all start from one prompt, and rollouts that reach the
            same state share its prompt when it shows no history); the rows then sample apart.
        preallocate: keep the KV cache in buffers of the whole decode's length, written in place
            (``DynamicCache`` copies itself every step). Both only save time; ``False`` is the plain
            loop, for comparison.
        jump_forward: once a constrained response's remaining tokens are all forced
            (``ActionConstraint.forced_tail``), write them with log-prob 0 and end the row without
            running the model on them: the same distribution. ``False`` samples them one by one.
    """

    def __init__(
        self,
        model,
        tokenizer,
        *,
        eos_token_ids: Sequence[int] | None = None,
        max_batch_size: int | None = None,
        share_prompts: bool = True,
        preallocate: bool = True,
        jump_forward: bool = True,
    ):
        self.share_prompts, self.preallocate, self.jump_forward = share_prompts, preallocate, jump_forward
        self.model = model
        self.tokenizer = tokenizer
        self.eos_ids = list(eos_token_ids) if eos_token_ids is not None else default_eos_ids(model, tokenizer)
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else self.eos_ids[0])
        if max_batch_size is not None and max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1 or None, got {max_batch_size}")
        self.max_batch_size = max_batch_size

    @torch.no_grad()
    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams, constraints: Sequence | None = None
    ) -> list[Generation]:
        """One response per prompt (token ids, chat template already applied); see module docstring.

        ``constraints``: per prompt an ``ActionConstraint`` or None (``gigpo.policy.constrain``);
        restricted positions are recorded in ``Generation.allowed``.
        """
        check_params(params)
        if constraints is not None and len(constraints) != len(prompts):
            raise ValueError(f"generate: {len(constraints)} constraints for {len(prompts)} prompts")
        device = next(self.model.parameters()).device
        gen = torch.Generator(device=device)
        if params.seed is None:
            gen.seed()  # fresh entropy; a fixed default seed would repeat across calls
        else:
            gen.manual_seed(int(params.seed))
        step = self.max_batch_size or max(len(prompts), 1)
        out: list[Generation] = []
        # Sample in eval mode (no dropout, e.g. LoRA dropout): the returned log-probs are then the
        # ones the trainer's old-policy pass recomputes. The caller's mode is restored.
        was_training = self.model.training
        self.model.eval()
        try:
            for s in range(0, len(prompts), step):
                cons = None if constraints is None else constraints[s : s + step]
                out += self._generate_chunk(prompts[s : s + step], params, gen, device, cons)
        finally:
            self.model.train(was_training)
        return out

    def _generate_chunk(self, prompts, params: SamplingParams, gen, device, cons=None) -> list[Generation]:
        from transformers import DynamicCache

        cons = list(cons) if cons is not None and any(c is not None for c in cons) else None
        states = [c.start() if c is not None else None for c in cons] if cons is not None else None
        allowed: list[list] = [[] for _ in prompts]
        B, T = len(prompts), int(params.max_new_tokens)
        # distinct prompts, and for each row the index of its own among them
        first: dict[tuple, int] = {}
        inverse = [first.setdefault(tuple(p), len(first)) for p in prompts] if self.share_prompts else []
        shared = self.share_prompts and len(first) < B
        distinct = list(first) if shared else prompts  # in order of first appearance
        ids, attn = left_pad(distinct, self.pad_id, device)  # (B or distinct, P)
        pos = (attn.cumsum(-1) - 1).clamp(min=0)  # (B, P) position of each token within its row
        eos = torch.tensor(self.eos_ids, device=device)
        out_ids = torch.full((B, T), -1, dtype=torch.long, device=device)
        out_lp = torch.zeros((B, T), dtype=torch.float32, device=device)
        finished = torch.zeros(B, dtype=torch.bool, device=device)
        rows = torch.arange(B, device=device)  # original index of each row still in the batch
        cache = DynamicCache(config=getattr(self.model, "config", None))
        if self.preallocate:
            cache = _preallocated(cache, ids.shape[1] + T)
        res = self.model(
            input_ids=ids, attention_mask=attn, position_ids=pos, cache=cache, use_cache=True, logits_to_keep=1
        )
        last = res.logits[:, -1, :]
        if shared:  # one row per prompt again: the cache, mask and positions of its distinct prompt
            expand = torch.as_tensor(inverse, device=device)
            for layer in cache.layers:
                layer.batch_select_indices(expand)
            last, attn, pos = last[expand], attn[expand], pos[expand]
        next_pos = pos[:, -1] + 1  # (b,)
        for t in range(T):
            logits = (last if t == 0 else res.logits[:, -1, :]).float()
            if states is not None:
                logits = self._restrict(logits, rows, t, cons, states, allowed)
            tok, lp = sample_next(logits, params.temperature, params.top_p, gen)
            out_ids[rows, t] = tok
            out_lp[rows, t] = lp
            done = torch.isin(tok, eos)
            finished[rows] = done
            if states is not None:
                jumped = []
                for j, (r, k) in enumerate(zip(rows.tolist(), tok.tolist())):
                    if cons[r] is not None:
                        cons[r].advance(states[r], k)
                        # a constraint without forced_tail (e.g. a plain allowed-ids mask) is sampled token by token
                        forced = getattr(cons[r], "forced_tail", None) if self.jump_forward else None
                        tail = forced(states[r], self.eos_ids) if forced is not None else None
                        if tail and not done[j]:
                            jumped.append(j)
                            self._write_tail(r, t + 1, tail, out_ids, out_lp, finished, allowed)
                if jumped:
                    done = done.clone()
                    done[jumped] = True
            if t == T - 1:
                break
            if bool(done.any()):
                keep = (~done).nonzero().squeeze(1)
                if keep.numel() == 0:
                    break
                for layer in cache.layers:  # drop finished rows from the KV cache
                    layer.batch_select_indices(keep)
                rows, tok, attn, next_pos = rows[keep], tok[keep], attn[keep], next_pos[keep]
            attn = torch.cat([attn, attn.new_ones((attn.shape[0], 1))], dim=1)  # (b, P + t + 1)
            res = self.model(
                input_ids=tok[:, None], attention_mask=attn, position_ids=next_pos[:, None], cache=cache, use_cache=True
            )
            next_pos = next_pos + 1
        return _to_generations(out_ids.cpu(), out_lp.cpu(), finished.cpu(), allowed if states is not None else None)

    @staticmethod
    def _write_tail(r, t, tail, out_ids, out_lp, finished, allowed):
        """Row ``r``'s forced ``tail`` (ending with EOS) from position ``t`` on, as far as the token
        budget goes; cut by the budget, the row ends unfinished, as sampling it would have."""
        kept = tail[: out_ids.shape[1] - t]
        if kept:
            out_ids[r, t : t + len(kept)] = torch.as_tensor(kept, dtype=out_ids.dtype)
            out_lp[r, t : t + len(kept)] = 0.0  # log 1: one allowed id
            allowed[r] += [(t + i, np.asarray([x], dtype=np.int64)) for i, x in enumerate(kept)]
        finished[r] = len(kept) == len(tail)

    def _restrict(self, logits, rows, t, cons, states, allowed):
        """Mask the logits of rows whose next token is restricted; record (t, ids) per such row."""
        sel, ids_list = [], []
        for j, r in enumerate(rows.tolist()):
            if cons[r] is None:
                continue
            ids = cons[r].allowed(states[r], self.eos_ids)
            if ids is not None:
                sel.append(j)
                ids_list.append(ids)
                allowed[r].append((t, ids))
        if not sel:
            return logits
        idx = torch.as_tensor(sel, device=logits.device)
        logits = logits.clone()
        logits[idx] = mask_logits(logits[idx], ids_list)
        return logits


def _preallocated(cache, capacity: int):
    """``cache`` with each plain ``DynamicLayer`` replaced by a ``SlabLayer`` of ``capacity`` positions
    (a model with other layer kinds, e.g. sliding windows, keeps its own)."""
    from transformers.cache_utils import DynamicLayer

    if all(type(layer) is DynamicLayer for layer in cache.layers):
        cache.layers = [_slab_layer_class()(capacity) for _ in cache.layers]
    return cache


@functools.cache
def _slab_layer_class():  # defined on first use: importing transformers is slow
    from transformers.cache_utils import DynamicLayer

    class SlabLayer(DynamicLayer):
        """A ``DynamicLayer`` whose keys and values live in buffers of the whole decode's length.

        ``DynamicLayer`` grows by ``torch.cat``, copying the whole cache every step; this one writes
        the step's keys in place and returns views of the filled part: the same values, so the same
        attention.
        """

        def __init__(self, capacity: int) -> None:
            super().__init__()
            self.capacity, self.filled = int(capacity), 0

        def lazy_initialization(self, key_states, value_states) -> None:
            super().lazy_initialization(key_states, value_states)
            b, h, _, d = key_states.shape
            self._k = key_states.new_empty((b, h, self.capacity, d))
            self._v = value_states.new_empty((b, value_states.shape[1], self.capacity, value_states.shape[-1]))

        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            n, end = self.filled, self.filled + key_states.shape[-2]
            if end > self.capacity:
                raise RuntimeError(f"decode cache full: {end} positions for a capacity of {self.capacity}")
            self._k[:, :, n:end] = key_states
            self._v[:, :, n:end] = value_states
            self.filled = end
            self.keys, self.values = self._k[:, :, :end], self._v[:, :, :end]
            return self.keys, self.values

        def batch_select_indices(self, indices) -> None:
            if self.filled:
                self._k, self._v = self._k[indices], self._v[indices]
                self.keys, self.values = self._k[:, :, : self.filled], self._v[:, :, : self.filled]

    return SlabLayer


def _to_generations(
    out_ids: torch.Tensor, out_lp: torch.Tensor, finished: torch.Tensor, allowed: list | None = None
) -> list[Generation]:
    """Rows of -1-padded ids [B, T] and log-probs [B, T] -> ``Generation`` list."""
    gens = []
    for i in range(out_ids.shape[0]):
        n = int((out_ids[i] >= 0).sum())
        gens.append(
            Generation(
                token_ids=out_ids[i, :n].numpy().astype(np.int32),
                logprobs=out_lp[i, :n].numpy().astype(np.float32),
                finished=bool(finished[i]),
                allowed=allowed[i] if allowed is not None else None,
            )
        )
    return gens


@torch.no_grad()
def bare_generate(
    model, tokenizer, prompts: Sequence[Sequence[int]], params: SamplingParams, *, with_logprobs: bool = True
) -> list[Generation]:
    """Reference: HF ``model.generate`` on the same left-padded batch (same EOS ids, no top-k).

    Log-probs come from ``generate``'s processed scores (after temperature and top-p), i.e. the
    same quantity ``HFGenerator`` returns; greedy rows get raw-logit log-probs, as there.
    ``with_logprobs=False`` skips keeping the per-step [B, V] scores (plain ``generate`` speed) and
    returns NaN log-probs. Seeded through the global torch RNG, restored afterwards.
    """
    check_params(params)
    device = next(model.parameters()).device
    eos = default_eos_ids(model, tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0]
    ids, attn = left_pad(prompts, pad, device)
    greedy = params.temperature == 0
    kw = (
        dict(do_sample=False)
        if greedy
        else dict(do_sample=True, temperature=params.temperature, top_p=params.top_p, top_k=0)
    )
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        if params.seed is not None:
            torch.manual_seed(int(params.seed))
        res = model.generate(
            input_ids=ids,
            attention_mask=attn,
            max_new_tokens=int(params.max_new_tokens),
            eos_token_id=eos,
            pad_token_id=pad,
            return_dict_in_generate=True,
            output_scores=with_logprobs and not greedy,
            output_logits=with_logprobs and greedy,
            **kw,
        )
    seq = res.sequences[:, ids.shape[1] :]  # (B, T') generated part
    if with_logprobs:
        scores = torch.stack(res.logits if greedy else res.scores, dim=1).float()  # (B, T', V)
        lp = torch.log_softmax(scores, dim=-1).gather(2, seq[:, :, None]).squeeze(2)
    else:
        lp = torch.full(seq.shape, float("nan"), device=seq.device)
    is_eos = torch.isin(seq, torch.tensor(eos, device=device))
    out_ids = seq.clone()
    finished = is_eos.any(dim=1)
    # Cut each row after its first EOS (generate pads finished rows with pad_token_id).
    first = torch.where(finished, is_eos.int().argmax(dim=1), torch.full_like(finished, seq.shape[1], dtype=torch.long))
    after = torch.arange(seq.shape[1], device=device)[None, :] > first[:, None]
    out_ids[after] = -1
    return _to_generations(out_ids.cpu(), lp.cpu(), finished.cpu())

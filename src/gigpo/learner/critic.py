"""PPO's learned critic: per-token values of a step's response, and the critic update.

The critic (``gigpo.policy.load.load_critic``) is the policy's transformer with a scalar head; the
value of response token k is the head's output at the position before it (the state the token
was sampled in), as verl's ``dp_critic`` reads ``values[:, -response_length - 1 : -1]``. Rows,
mini-batches, epochs, micro-batch token budget, loss aggregation and autocast are the policy
update's (``train.*``); learning rate, weight decay, gradient clip and value clip are ``critic.*``
(docs/algorithm.md#ppo-with-a-learned-critic).

``SharedCritic`` is the small-machine option (``critic.shared_backbone``): a scalar head on the
policy's own transformer, trained by the policy's update with the value loss added to the policy
loss (``gigpo.learner.update.PolicyUpdater``, ``value_head``); it has no ``CriticUpdater``.
"""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from gigpo.learner.logprobs import pad_rows
from gigpo.learner.loss import token_budget_microbatches, value_loss
from gigpo.learner.precision import autocast_context
from gigpo.learner.update import pad_float_rows, padded_lengths, weighted_mini_batches


class SharedCritic(torch.nn.Module):
    """A value head on the policy's backbone (``critic.shared_backbone``): no second transformer.

    Its only parameters are the head ``score`` (``Linear(hidden, 1)``, drawn from ``seed`` as
    ``load_critic`` draws its head: normal with the model's ``initializer_range``, bias 0), so its
    ``state_dict`` is the head alone; the policy is held, not registered. Called like a
    ``load_critic`` model (``.logits[..., 0]`` at position j is the value of the state after
    token j), it runs the policy's transformer and its last normed hidden state through the head;
    the policy update gets the values from its own forward instead (``token_logprobs(...,
    with_hidden=True)``).
    """

    policy: Any  # the causal LM (set in __init__ outside the module registry)

    def __init__(self, policy, *, seed: int = 0) -> None:
        super().__init__()
        object.__setattr__(self, "policy", policy)  # not a submodule: its weights are the policy's
        p = next(policy.parameters())
        cfg = policy.config
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.score = torch.nn.Linear(cfg.hidden_size, 1, device=p.device, dtype=p.dtype)
            torch.nn.init.normal_(self.score.weight, std=getattr(cfg, "initializer_range", 0.02))
            torch.nn.init.zeros_(self.score.bias)

    def train(self, mode: bool = True):
        """Set the head's mode and the backbone's (``batched_values`` switches to eval and back)."""
        self.policy.train(mode)
        return super().train(mode)

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        """Values ``[...]`` (float32) of hidden states ``[..., H]``."""
        return self.score(hidden.to(self.score.weight.dtype))[..., 0].float()

    def forward(self, input_ids, attention_mask):
        # logits_to_keep=1: the LM head runs on one position only; the values come from the hidden states.
        out = self.policy(
            input_ids=input_ids,
            attention_mask=attention_mask,
            use_cache=False,
            output_hidden_states=True,
            logits_to_keep=1,
        )
        return SimpleNamespace(logits=self.head(out.hidden_states[-1])[..., None])


def token_values(critic, prompts, responses, *, pad_token_id: int, pad_multiple: int = 1):
    """Values of every response token in one right-padded forward pass (differentiable).

    Returns ``(values [B, Lmax] float32, mask [B, Lmax])``: position k of row i is the value of
    the state before response token k; ``mask`` is 1 on real response tokens, 0 on padding
    (where values are 0).
    """
    device = next(critic.parameters()).device
    ids, attn, start, rlen = pad_rows(prompts, responses, pad_token_id, multiple=pad_multiple)
    out = critic(input_ids=ids.to(device), attention_mask=attn.to(device))
    v = out.logits[..., 0].float()  # (B, T): value after each input token
    width = -(-max(int(rlen.max()), 1) // pad_multiple) * pad_multiple if len(rlen) else 0
    k = torch.arange(width)
    pos = (start[:, None] - 1 + k[None, :]).clamp(0, v.shape[1] - 1)
    mask = (k[None, :] < rlen[:, None]).float().to(device)
    return v.gather(1, pos.to(device)) * mask, mask


@torch.no_grad()
def batched_values(
    critic, prompts, responses, *, pad_token_id: int, token_budget: int, autocast: str = "none", pad_multiple: int = 1
) -> list[np.ndarray]:
    """Per-row response-token values (float32 arrays), in token-budget micro-batches, eval mode."""
    was_training = critic.training
    critic.eval()
    out: list[np.ndarray] = [np.zeros(0, np.float32)] * len(prompts)
    for mb in token_budget_microbatches(padded_lengths(prompts, responses, pad_multiple), token_budget):
        with autocast_context(critic, autocast):
            v, _ = token_values(
                critic,
                [prompts[i] for i in mb],
                [responses[i] for i in mb],
                pad_token_id=pad_token_id,
                pad_multiple=pad_multiple,
            )
        v = v.float().cpu().numpy()
        for j, i in enumerate(mb):
            out[i] = v[j, : len(responses[i])].copy()
    critic.train(was_training)
    return out


def explained_variance(values, returns) -> float:
    """1 - Var(returns - values) / Var(returns) over all tokens (nan when returns do not vary).

    values, returns: per-row float arrays; 1 = the critic predicts every return, 0 = no better than
    the batch mean, < 0 = worse than it.
    """
    v = np.concatenate([np.asarray(x, np.float64) for x in values]) if len(values) else np.zeros(0)
    r = np.concatenate([np.asarray(x, np.float64) for x in returns]) if len(returns) else np.zeros(0)
    var = r.var() if len(r) else 0.0
    return float(1.0 - (r - v).var() / var) if var > 0 else float("nan")


class CriticUpdater:
    """The critic's optimizer and update (as ``PolicyUpdater`` for the policy).

    Args:
        critic: the value model (``load_critic``). cfg: ``CriticConfig`` (lr, weight decay,
        gradient and value clip). train: ``TrainConfig`` (epochs, mini-batch rows, micro-batch
        budget, padding, loss aggregation, autocast).
    """

    def __init__(self, critic, cfg, train, *, pad_token_id: int) -> None:
        self.critic, self.cfg, self.train_cfg, self.pad_token_id = critic, cfg, train, pad_token_id
        params = [p for p in critic.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])

    def set_lr(self, lr: float) -> None:
        """Make ``lr`` the learning rate (a resumed run's ``critic.lr``)."""
        for g in self.optimizer.param_groups:
            g["lr"] = lr

    def update(self, prompts, responses, old_values, returns, *, seed: int = 0) -> dict:
        """``train.ppo_epochs`` passes of mini-batches over the rows; returns averaged metrics
        (``value_loss``, ``vf_clipfrac``, ``grad_norm``, ``skipped_updates``; docs/metrics.md).

        old_values, returns: per-row float arrays (the values the advantages were computed with,
        and the GAE targets).
        """
        t = self.train_cfg
        self.critic.train()
        rng = np.random.default_rng(seed)
        acc: dict[str, list[float]] = defaultdict(list)
        skipped = 0
        n = len(prompts)
        for _epoch in range(t.ppo_epochs):
            # the policy update's mini-batches: equal sizes, no remainder batch
            for rows in weighted_mini_batches(rng.permutation(n), np.ones(n), t.mini_batch_rows):
                ok = self._step(rows, prompts, responses, old_values, returns, acc)
                skipped += 0 if ok else 1
        out = {k: float(np.mean(v)) for k, v in acc.items()}
        out["skipped_updates"] = skipped
        return out

    def _step(self, rows, prompts, responses, old_values, returns, acc) -> bool:
        t, critic = self.train_cfg, self.critic
        dev = next(critic.parameters()).device
        lengths = padded_lengths([prompts[i] for i in rows], [responses[i] for i in rows], t.pad_multiple)
        mbs = [[rows[j] for j in mb] for mb in token_budget_microbatches(lengths, t.micro_token_budget)]
        self.optimizer.zero_grad(set_to_none=True)
        losses, fracs = [], []
        for mb in mbs:
            with autocast_context(critic, t.autocast):
                v, mask = token_values(
                    critic,
                    [prompts[i] for i in mb],
                    [responses[i] for i in mb],
                    pad_token_id=self.pad_token_id,
                    pad_multiple=t.pad_multiple,
                )
            width = v.shape[1]
            loss, frac = value_loss(
                v,
                pad_float_rows(old_values, mb, width, dev),
                pad_float_rows(returns, mb, width, dev),
                mask,
                cliprange_value=self.cfg.cliprange_value,
                agg_mode=t.loss_agg_mode,
            )
            if not torch.isfinite(loss):
                self.optimizer.zero_grad(set_to_none=True)
                return False
            (loss / len(mbs)).backward()
            losses.append(float(loss.detach()))
            fracs.append(frac)
        params = [p for p in critic.parameters() if p.requires_grad]
        gn = torch.nn.utils.clip_grad_norm_(params, self.cfg.grad_clip if self.cfg.grad_clip > 0 else float("inf"))
        if not torch.isfinite(gn):  # as verl's critic: a non-finite gradient skips the step
            self.optimizer.zero_grad(set_to_none=True)
            return False
        self.optimizer.step()
        acc["value_loss"] += losses
        acc["vf_clipfrac"] += fracs
        acc["grad_norm"].append(float(gn))
        return True

"""The models of a run on this rank: the policy and its updater, the fsdp full copy, the KL
reference, the critic; their version, and their part of a checkpoint.

``version`` counts the changes of the policy's weights (update, rollback, best-model load). A
generator that samples elsewhere (``rollout.backend=server``) is brought to it before each rollout,
and the update checks that its rows were sampled at it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gigpo.train.factories import load_kwargs
from gigpo.train.config import Config


@dataclass
class RunModels:
    model: Any  # the trained policy (under fsdp, this rank's shard)
    tokenizer: Any
    full_model: Any  # what rank 0 samples, scores and saves: ``model``, or under fsdp a full copy
    dist: Any  # gigpo.learner.distributed.Dist
    ref_model: Any = None  # the frozen start policy, for the KL term (train.use_kl)
    critic: Any = None  # a separate critic, or a value head on the policy (critic.shared_backbone)
    critic_updater: Any = None  # the separate critic's optimizer loop
    updater: Any = None  # gigpo.learner.update.PolicyUpdater
    version: int = 0
    full_stale: bool = field(default=False)  # under fsdp the full copy lags the shards

    def changed(self) -> None:
        """The policy's weights changed: a new version, and the fsdp full copy is stale."""
        self.version += 1
        self.full_stale = self.dist.sharded

    def sync_full_model(self) -> None:
        """Under fsdp, copy the shards into rank 0's full model when the weights have changed
        (a collective: every rank calls it)."""
        if self.full_stale:
            state = self.dist.full_model_state(self.model)
            if self.full_model is not None:
                self.full_model.load_state_dict(state)
            self.full_stale = False

    def load_weights(self, model_state: dict) -> None:
        """Load a checkpoint's (full) model state on every rank."""
        self.dist.load_full_model_state(self.model, model_state)
        self.full_stale = self.dist.sharded

    def state_dict(self) -> dict:
        """The models' part of a checkpoint (under fsdp every rank gathers)."""
        out = {
            "model": self.dist.full_model_state(self.model),
            "updater": self.updater.state_dict(),
            "policy_version": self.version,
        }
        if self.critic is not None:
            out["critic"] = self.critic.state_dict()
            if self.critic_updater is not None:
                out["critic_updater"] = self.critic_updater.state_dict()
        return out

    def resume(self, state: dict, cfg: Config) -> None:
        """Continue from a checkpoint; a resume may change ``train.lr`` and ``critic.lr``."""
        self.load_weights(state["model"])
        self.version = int(state.get("policy_version", 0))
        self.updater.load_state_dict(state["updater"])
        self.updater.set_lr(cfg.train.lr)
        if self.critic is not None and "critic" in state:
            self.critic.load_state_dict(state["critic"])
            if self.critic_updater is not None:  # a shared head's optimizer state is the updater's
                self.critic_updater.load_state_dict(state["critic_updater"])
                self.critic_updater.set_lr(cfg.critic.lr)

    def save_pretrained(self, path, dist):
        """The trained policy as a Hugging Face directory at ``path`` (model + tokenizer), so
        ``gigpo eval model.name_or_path=<path>`` or ``from_pretrained`` can load it. Written to a
        temporary directory, then swapped in for any previous copy (``replace_dir_atomic``). With
        LoRA this holds the adapter (peft's ``save_pretrained``). Rank 0 writes it; every rank
        calls this (under fsdp the weights are gathered first)."""
        from gigpo.policy.cache import replace_dir_atomic

        def write(d) -> None:
            self.full_model.save_pretrained(d)
            self.tokenizer.save_pretrained(d)

        self.sync_full_model()
        out = replace_dir_atomic(path, write) if dist.is_main else path
        dist.barrier()
        return out

    def roll_back(self, state: dict, lr_factor: float) -> None:
        """Back to an earlier checkpoint's weights and optimizer state (the critic goes back with its
        policy), the schedule's position kept and the learning rate scaled by ``lr_factor``."""
        self.load_weights(state["model"])
        self.changed()
        self.updater.roll_back(state["updater"], lr_factor)
        if self.critic is not None and "critic" in state:
            self.critic.load_state_dict(state["critic"])
            if self.critic_updater is not None:
                self.critic_updater.load_state_dict(state["critic_updater"])


def load_models(cfg: Config, model_path: str, dist) -> RunModels:
    """The policy (with LoRA if asked), the fsdp full copy, the KL reference, the critic, the updater."""
    from gigpo.learner.update import PolicyUpdater
    from gigpo.policy.load import load_policy

    kw = load_kwargs(cfg, device=dist.device)
    lora: dict | None = {} if cfg.model.lora else None
    model, tokenizer = load_policy(model_path, lora=lora, **kw)
    full = model
    if dist.sharded:
        full = load_policy(model_path, lora=lora, **kw)[0] if dist.is_main else None
    out = RunModels(model, tokenizer, full, dist, full_stale=dist.sharded)
    if cfg.train.use_kl and dist.is_main:  # frozen reference = the starting policy (docs/algorithm.md#loss)
        out.ref_model, _ = load_policy(model_path, **kw)
        out.ref_model.eval().requires_grad_(False)
    shared = cfg.needs_critic() and cfg.critic.shared_backbone
    if shared:  # a value head on the policy, trained by the policy's update
        from gigpo.learner.critic import SharedCritic

        out.critic = SharedCritic(model, seed=cfg.seed)
    elif cfg.needs_critic():  # PPO with a learned critic, initialised from the start policy as verl does
        from gigpo.learner.critic import CriticUpdater
        from gigpo.policy.load import load_critic

        out.critic = load_critic(model_path, **kw)
        out.critic_updater = CriticUpdater(out.critic, cfg.critic, cfg.train, pad_token_id=tokenizer.pad_token_id)
    out.updater = PolicyUpdater(
        model,
        cfg.train,
        pad_token_id=tokenizer.pad_token_id,
        temperature=cfg.rollout.temperature,
        dist=dist,
        value_head=out.critic if shared else None,
        vf_coef=cfg.critic.vf_coef,
        cliprange_value=cfg.critic.cliprange_value,
    )
    return out

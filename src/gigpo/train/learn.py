"""The update phase of an iteration: the critic's update, then old and reference log-probs and the
policy update (``gigpo.learner``) on the rows the credit phase scored."""

from __future__ import annotations

from typing import Callable

from gigpo.train import seeds
from gigpo.train.credit import Credit, update_rows
from gigpo.train.metrics import PhaseTimer

SKIPPED = ("old_logprob", "ref_logprob", "update")  # time/* phases of an iteration without a policy update


def check_sampled_version(batch, version: int, it: int) -> None:
    """Every row was sampled by the weights being trained (``rollout.backend=server`` stamps each
    trajectory with the version it was sampled at)."""
    stale = {v for vs in batch.meta.get("traj_policy_version") or [] for v in vs if v != version}
    if stale:
        raise RuntimeError(
            f"iteration {it}: rows sampled by policy version(s) {sorted(stale, key=str)}, but the "
            f"model is at version {version}: the weight sync did not reach the sampler"
        )


def learn(
    cfg, models, batch, credit: Credit, it: int, timer: PhaseTimer, *, on_main: Callable, before_update: Callable
) -> tuple[dict, dict, int]:
    """The critic's and the policy's updates on ``batch``: (actor metrics, critic metrics, rows).

    ``models``: the run's ``RunModels``; ``on_main(fn)`` runs ``fn`` on rank 0 and gives every rank
    its result (log-probs are computed once, as one process does); ``before_update()`` runs just
    before the optimizer steps (the trainer's phase hooks)."""
    crit: dict = {}
    if models.critic_updater is not None:
        with timer("critic_update"):
            crit = models.critic_updater.update(
                batch.prompt_ids,
                batch.response_ids,
                credit.values,
                credit.result.token_returns,
                seed=seeds.iteration_seed(cfg.seed, it, seeds.CRITIC_UPDATE),
            )
    if it <= cfg.critic.warmup_iterations and models.critic is not None:
        timer.skip(*SKIPPED)  # critic warm-up: the policy is left unchanged
        return {}, crit, 0
    upd, n_rows = update_policy(cfg, models, batch, credit, it, timer, on_main=on_main, before_update=before_update)
    # A shared value head learns in the policy's update: its loss is the critic's metric.
    crit |= {k: upd.pop(k) for k in ("value_loss", "vf_clipfrac") if k in upd}
    return upd, crit, n_rows


def update_policy(
    cfg, models, batch, credit: Credit, it: int, timer: PhaseTimer, *, on_main: Callable, before_update: Callable
) -> tuple[dict, int]:
    """Old / reference log-probs and the policy update on ``batch``; returns (metrics, rows)."""
    from gigpo.learner.update import batched_logprobs

    off = cfg.train.off_policy_steps > 0  # versions were checked against the bound when collected
    if not off:
        check_sampled_version(batch, models.version, it)
    rows = update_rows(batch, credit.result, cfg.train.skip_zero_advantage_rows)
    lp_kw = dict(
        pad_token_id=models.tokenizer.pad_token_id,
        temperature=cfg.rollout.temperature,
        token_budget=cfg.train.micro_token_budget,
        allowed=rows.allowed,
        autocast=cfg.train.autocast,
        pad_multiple=cfg.train.pad_multiple,
        share_prefix=cfg.train.share_prefix,
    )

    def logprobs(model):
        return on_main(lambda: batched_logprobs(model, rows.prompts, rows.responses, **lp_kw))

    behav = None
    with timer("old_logprob"):
        if off and cfg.train.off_policy_loss == "decoupled":  # old = the proximal policy (these weights)
            old, behav = logprobs(models.full_model), rows.sampled_logprobs
        elif off:  # PPO's own ratio against the policy that sampled the rows
            old = rows.sampled_logprobs
        else:
            old = rows.sampled_logprobs if cfg.rollout.reuse_sampling_logprobs else logprobs(models.full_model)
    with timer("ref_logprob"):
        ref = logprobs(models.ref_model) if cfg.train.use_kl else None
    with timer("update"):
        before_update()
        if not len(rows):
            return {}, 0
        critic_kw = {}
        if models.updater.value_head is not None:  # the values are the value targets' clip centre
            critic_kw = {"old_values": credit.values, "returns": credit.result.token_returns}
        upd = models.updater.update(
            rows.prompts,
            rows.responses,
            rows.advantages,
            old,
            ref,
            seed=seeds.iteration_seed(cfg.seed, it, seeds.UPDATE),
            allowed=rows.allowed,
            token_advantages=rows.token_advantages,
            behav_logp=behav,
            **critic_kw,
        )
        models.changed()
    return upd, len(rows)

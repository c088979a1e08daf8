"""The training loop: rollout -> returns -> penalty -> advantages -> update, with runs on disk.

One iteration (docs/algorithm.md#iteration):
  1. sample ``tasks_per_iter`` train tasks (deterministic in (seed, iteration));
  2. rollout ``group_size`` episodes per task -> StepBatch (one row per agent step);
  3. discounted returns per trajectory (gamma, paper Eq. 5), episode scores, invalid-action
     penalty (docs/algorithm.md#invalid-action-penalty);
  4. advantages through the estimator registry (one scalar per row; per token with a critic,
     ``algorithm.estimator=ppo``, whose values are computed here and which is updated first);
  5. old log-probs (recomputed, or the sampler's), reference log-probs (once), policy update.

Everything random is derived from (seed, iteration), so ``--resume`` continues exactly.

Under ``torchrun`` (more than one process) rank 0 rolls out, evaluates and writes the run
directory; every rank runs the update on its share of the rows (``gigpo.learner.distributed``).
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
import warnings
from pathlib import Path

import numpy as np
import torch

from gigpo.batch import concat_batches, select_trajectories
from gigpo.policy.base import MakeGenerator
from gigpo.train.checkpoint import (
    best_checkpoint,
    load_checkpoint,
    load_latest,
    pin_best,
    save_checkpoint,
    set_rng_state,
)
from gigpo.train.config import Config, build_agent, grouped_envs, load_kwargs, save_config
from gigpo.learner.distributed import Dist, check_world
from gigpo.train.guards import Watchdog, model_hash
from gigpo.train.logging import MetricsLogger, iteration_summary
from gigpo.learner.update import PolicyUpdater, batched_logprobs


def iteration_seed(seed: int, iteration: int, stream: int = 0) -> int:
    """A 31-bit seed derived from (seed, iteration, stream) (independent of any RNG state)."""
    return int(np.random.SeedSequence([seed, iteration, stream]).generate_state(1)[0] & 0x7FFFFFFF)


def _seed_all(s: int) -> None:
    random.seed(s)
    np.random.seed(s)
    torch.manual_seed(s)


def _debug_kill(iteration: int, phase: str) -> None:
    """Test hook: ``GIGPO_DEBUG_SIGKILL_AT=<iteration>:<phase>`` SIGKILLs this process there."""
    at = os.environ.get("GIGPO_DEBUG_SIGKILL_AT")
    if at and at == f"{iteration}:{phase}":
        os.kill(os.getpid(), signal.SIGKILL)


def _debug_lr(iteration: int) -> float | None:
    """Test hook: ``GIGPO_DEBUG_LR_AT=<iteration>:<lr>`` runs that iteration's update at ``lr``
    (a planted learning-rate spike, to show the guards acting on a real collapse)."""
    at = os.environ.get("GIGPO_DEBUG_LR_AT")
    if at and at.split(":")[0] == str(iteration):
        return float(at.split(":")[1])
    return None


# Size bins of the logged histogram (``step_groups/hist_<bin>``; report.plots reads the same names).
HIST_BINS = ((1, 1, "1"), (2, 2, "2"), (3, 4, "3-4"), (5, 8, "5-8"), (9, 10**9, "9+"))


def step_group_metrics(step_groups: np.ndarray) -> dict:
    """``step_groups/*`` metrics (docs/metrics.md) from ``gigpo.advantages.step_group_stats``.

    step_groups  int [N]  step-group label per row (-1 = the estimator has none: GRPO/RLOO).
    Returns {} when no row has a step group, so those metrics are absent rather than zero.
    """
    from gigpo.advantages import step_group_stats

    st = step_group_stats(step_groups)
    if not st["num_groups"]:
        return {}
    out = {
        "step_groups/num_groups": st["num_groups"],
        "step_groups/share_rows_in_size_gt1": st["share_rows_in_groups_gt1"],
        "step_groups/mean_size": st["mean_group_size"],
        "step_groups/max_size": st["max_group_size"],
    }
    for lo, hi, name in HIST_BINS:
        out[f"step_groups/hist_{name}"] = int(sum(c for size, c in st["size_hist"].items() if lo <= size <= hi))
    return out


def anchor_metrics(batch, anchors, anchor: str) -> dict:
    """``anchor/*`` metrics (docs/metrics.md): the chosen anchor's exact step groups, the observation
    anchor's for comparison, and how often observation groups mix engine states.

    batch: the trained StepBatch; anchors: the keys ``anchor`` gave its rows (``step_anchors``).
    """
    from gigpo.advantages import exact_step_groups, state_mixing, step_group_stats

    if not batch.num_rows:
        return {}
    out: dict = {}

    def sizes(name: str, keys) -> None:
        st = step_group_stats(exact_step_groups(np.asarray(batch.episode_id), keys))
        out[f"anchor/{name}share_rows_in_size_gt1"] = st["share_rows_in_groups_gt1"]
        out[f"anchor/{name}mean_size"] = st["mean_group_size"]

    sizes("", anchors)
    if anchor != "observation":
        sizes("observation_", batch.anchor)
    st = batch.state_anchor
    out["anchor/state_rows_share"] = 0.0 if st is None else float(np.mean([s is not None for s in st]))
    mix = state_mixing(batch.episode_id, batch.anchor, st)
    if mix:
        out["anchor/state_mixed_share"] = mix["mixed_share"]
        out["anchor/state_mixed_rows_share"] = mix["mixed_rows_share"]
    return out


def _stats(prefix: str, x) -> dict:
    x = np.asarray(x, dtype=np.float64)
    if not len(x):
        return {}
    return {
        f"{prefix}/mean": float(x.mean()),
        f"{prefix}/std": float(x.std()),
        f"{prefix}/min": float(x.min()),
        f"{prefix}/max": float(x.max()),
    }


class RunStopped(RuntimeError):
    """The run cannot go on usefully (most episodes end in env faults); the message says why."""


def group_has_signal(batch, advantages, tol: float = 1e-8) -> np.ndarray:
    """bool [E] per episode group: some row's advantage is non-zero. Groups without signal
    (every rollout tied, GRPO/RLOO; or also no step-level differences, GiGPO) give no gradient."""
    n_eps = int(batch.traj_episode_id.max()) + 1 if batch.num_trajectories else 0
    out = np.zeros(n_eps, dtype=bool)
    nz = np.abs(np.asarray(advantages, dtype=np.float64)) > tol
    out[np.asarray(batch.episode_id)[nz]] = True
    return out


class _NoLogger:
    """The metrics logger of ranks other than 0: only rank 0 writes the run's metrics."""

    def log(self, metrics: dict, *, iteration: int, tag: str) -> None:
        pass

    def close(self) -> None:
        pass


class Trainer:
    """Owns the model(s), envs, optimizer and run directory of one training run.

    With more than one process (``torchrun``), every rank builds a ``Trainer``: rank 0 holds the
    envs, the sampler, the reference model and the run directory; the others take part in the
    update and in every collective (docs/architecture.md#where-each-rank-does-what).
    """

    def __init__(
        self, cfg: Config, *, resume: bool = False, force: bool = False, make_generator: MakeGenerator | None = None
    ) -> None:
        """``resume``: continue from the run dir's newest usable checkpoint; ``force``: allow a
        resume to change run-defining config keys (recorded in ``config_changes.jsonl``).
        ``make_generator``: ``(model, tokenizer) -> Generator`` that samples the rollouts from the
        trained ``model`` (default ``HFGenerator``; docs/extending.md, "Add a model backend")."""
        self.make_generator = make_generator
        from gigpo.train.rundir import open_run_dir, preflight

        self.cfg = cfg
        self.run_dir = cfg.run_dir
        cfg.check_trainable()  # prompting agents and the api backend are eval-only
        torch.set_num_threads(cfg.train.torch_threads)
        from gigpo.learner.precision import native_bf16

        if cfg.train.autocast == "bf16" and not native_bf16(torch.device(cfg.model.device).type):
            warnings.warn(
                f"train.autocast=bf16 on {cfg.model.device}, which has no native bfloat16 matmuls (a CPU "
                "without AVX512): the update runs many times slower than in float32; set train.autocast=auto",
                stacklevel=2,
            )
        preflight(cfg)  # a bad model path, device or env option fails before the run dir changes
        self.dist = Dist.from_env(cfg.train.distributed, cfg.model.device, cfg.train.dist_timeout_min)
        if self.dist.enabled:  # features that run in one trainer process only
            from gigpo.train.config import ConfigError

            if cfg.rollout.backend == "server":
                raise ConfigError(
                    "rollout.backend=server runs in one trainer process only; launch it without torchrun "
                    "(or use rollout.backend=hf)"
                )
            if cfg.needs_critic():
                raise ConfigError(
                    f"algorithm.estimator={cfg.algorithm.estimator!r} trains a critic, which runs in one process "
                    "only; launch it without torchrun (or pick a critic-free estimator: gigpo, grpo, rloo)"
                )
        _seed_all(cfg.seed)
        # A new run never appends to or overwrites an old one: the old one is kept, renamed.
        self._lock = open_run_dir(self.run_dir, resume=resume) if self.dist.is_main else None
        try:
            self.dist.barrier()
            self._setup(resume, force)
        except BaseException:
            self.close()
            raise

    def _setup(self, resume: bool, force: bool) -> None:
        from gigpo.envs import make_tasks
        from gigpo.policy.generate import HFGenerator
        from gigpo.policy.load import load_policy
        from gigpo.train.rundir import resume_changes

        cfg, main = self.cfg, self.dist.is_main
        if resume and main:
            resume_changes(self.run_dir, cfg, force=force)
        # The original config.yaml stays as the run was started.
        if main:
            save_config(cfg, self.run_dir / ("config.resumed.yaml" if resume else "config.yaml"))
        model_path = cfg.model.name_or_path
        # Wall seconds per phase of the run (printed at the end and written to phases.json).
        self.phase_times: dict[str, float] = {}
        t0 = time.perf_counter()
        if not resume:
            from gigpo.policy.load import resolve_path

            # builds `tiny` when not cached (rank 0 first; the others then find it in the cache)
            self._main_first(lambda: resolve_path(model_path, cfg.model.cache_dir or None))
            self.phase_times["model_build"] = time.perf_counter() - t0
        if cfg.sft.enabled:
            from gigpo.train.sft import ensure_sft_model

            t0 = time.perf_counter()
            model_path = self._main_first(lambda: ensure_sft_model(cfg, progress=cfg.log.progress and main))
            self.phase_times["sft"] = time.perf_counter() - t0
        self.model_path = model_path
        self.start_hash = model_hash(model_path) if Path(model_path).is_dir() else ""
        if self.start_hash and main:
            print(f"start model: {model_path} (weights sha256 {self.start_hash[:16]})", flush=True)
        kw = load_kwargs(cfg, device=self.dist.device)
        lora = {} if cfg.model.lora else None
        self.model, self.tokenizer = load_policy(model_path, lora=lora, **kw)
        # The model rank 0 samples, computes log-probs with and saves: the trained one itself, or
        # under fsdp (where each rank holds a shard) a full copy refreshed from the shards.
        self.full_model = self.model
        if self.dist.sharded:
            self.full_model = load_policy(model_path, lora=lora, **kw)[0] if main else None
        self._full_stale = self.dist.sharded  # the full copy lags the shards
        self.ref_model = None
        if cfg.train.use_kl and main:  # frozen reference = the starting policy (docs/algorithm.md#loss)
            self.ref_model, _ = load_policy(model_path, **kw)
            self.ref_model.eval().requires_grad_(False)
        self.agent = build_agent(cfg, self.tokenizer)
        e = cfg.env
        self.train_pool = make_tasks(e.family, "train", n=e.train_tasks or None, seed=e.task_seed, **e.task_kwargs)
        # Validation tasks (best-model selection) come after the held-out ones in the eval split's
        # fixed order, so the two sets are disjoint and the held-out eval stays unbiased.
        g = cfg.guard
        n_val = g.val_tasks if g.val_every else 0
        if e.eval_tasks:
            pool = make_tasks(e.family, "eval", n=e.eval_tasks + n_val, seed=e.task_seed, **e.task_kwargs)
            self.eval_pool, self.val_pool = pool[: e.eval_tasks], pool[e.eval_tasks :]
        else:
            pool = make_tasks(e.family, "eval", n=None, seed=e.task_seed, **e.task_kwargs)
            self.eval_pool, self.val_pool = (pool[:-n_val], pool[-n_val:]) if n_val else (pool, [])
        self.watchdog = Watchdog(g, select_by_val=bool(g.val_every))
        self.stop_reason: str | None = None
        self.envs = grouped_envs(e, e.group_size) if main else None
        self.eval_envs = grouped_envs(e, 1) if main else None
        self.critic = self.critic_updater = None
        shared = cfg.needs_critic() and cfg.critic.shared_backbone
        if shared:  # a value head on the policy, trained by the policy's update (critic.shared_backbone)
            from gigpo.learner.critic import SharedCritic

            self.critic = SharedCritic(self.model, seed=cfg.seed)
        elif cfg.needs_critic():  # PPO with a learned critic, initialised from the start policy as verl does
            from gigpo.policy.load import load_critic
            from gigpo.learner.critic import CriticUpdater

            self.critic = load_critic(model_path, **kw)
            self.critic_updater = CriticUpdater(
                self.critic, cfg.critic, cfg.train, pad_token_id=self.tokenizer.pad_token_id
            )
        self.updater = PolicyUpdater(
            self.model,
            cfg.train,
            pad_token_id=self.tokenizer.pad_token_id,
            temperature=cfg.rollout.temperature,
            dist=self.dist,
            value_head=self.critic if shared else None,
            vf_coef=cfg.critic.vf_coef,
            cliprange_value=cfg.critic.cliprange_value,
        )
        self.iteration = 0  # iterations completed
        self.selection = "best by validation"  # how model/ was chosen (summary.json)
        found = load_latest(self.run_dir) if resume else None  # falls back past a corrupt newest one
        if resume and found is None:
            from gigpo.train.checkpoint import CheckpointError

            raise CheckpointError(f"--resume: no checkpoint in {str(self.run_dir / 'checkpoints')!r}")
        if found is not None:
            path, state = found
            check_world(state.get("world"), self.dist, path)
            self.dist.load_full_model_state(self.model, state["model"])
            self._full_stale = self.dist.sharded
            self.updater.load_state_dict(state["updater"])
            self.updater.set_lr(cfg.train.lr)  # a resume may change train.lr
            if self.critic is not None and "critic" in state:
                self.critic.load_state_dict(state["critic"])
                if self.critic_updater is not None:  # a shared head's optimizer state is the updater's
                    self.critic_updater.load_state_dict(state["critic_updater"])
                    self.critic_updater.set_lr(cfg.critic.lr)
            self.iteration = state["iteration"]
            if "guard" in state:
                self.watchdog.load_state_dict(state["guard"]["watchdog"])
                self.stop_reason = state["guard"]["stop_reason"]
            set_rng_state(state["rng"])
        # Version of the weights in self.model: +1 at every change (update, rollback, best-model
        # load). A generator with ``sync_weights`` (rollout.backend=server) is brought to it before
        # each rollout, and the update checks that its rows were sampled at it.
        self.policy_version = 0
        self.sync_seconds = 0.0
        self.server = None
        self.generator = None
        if not main:
            pass  # rank 0 rolls out
        elif self.make_generator is None and cfg.rollout.backend == "server":
            from gigpo.train.serving import ServerBackend

            self.server = ServerBackend(cfg, self.model, self.tokenizer, self.run_dir / "serving")
            self.generator = self.server.generator
        else:
            self.generator = (self.make_generator or HFGenerator)(self.full_model, self.tokenizer)
        self.logger: MetricsLogger | _NoLogger = (
            MetricsLogger(
                self.run_dir,
                resume_after=self.iteration if resume else None,
                tensorboard=cfg.log.tensorboard,
                wandb_project=cfg.log.wandb_project,
                config=cfg,
            )
            if main
            else _NoLogger()
        )

    # ------------------------------------------------------------------ ranks
    def _main_first(self, fn):
        """``fn()`` on rank 0, then on the other ranks (which find what rank 0 built or cached)."""
        out = fn() if self.dist.is_main else None
        self.dist.barrier()
        return out if self.dist.is_main else fn()

    def _on_main(self, fn):
        """``fn()`` run by rank 0 with the current weights; its result on every rank."""
        self._sync_full_model()
        return self.dist.broadcast(fn() if self.dist.is_main else None)

    def _sync_full_model(self) -> None:
        """Under fsdp, copy the shards into rank 0's full model when the weights have changed
        (a collective: every rank calls it)."""
        if self._full_stale:
            state = self.dist.full_model_state(self.model)
            if self.full_model is not None:
                self.full_model.load_state_dict(state)
            self._full_stale = False

    def _load_model(self, state: dict) -> None:
        """Load a checkpoint's (full) model state on every rank."""
        self.dist.load_full_model_state(self.model, state)
        self._full_stale = self.dist.sharded

    # ------------------------------------------------------------------ pieces
    def sample_tasks(self, iteration: int, round_: int = 0, k: int | None = None):
        """``k`` (default ``tasks_per_iter``) train tasks for ``iteration``'s rollout round
        ``round_`` (a pure function of (seed, iteration, round); round 0 is the iteration's batch,
        later rounds are dynamic sampling's)."""
        stream = 1 if round_ == 0 else 100 + round_
        rng = np.random.default_rng(iteration_seed(self.cfg.seed, iteration, stream))
        n, k = len(self.train_pool), k or self.cfg.env.tasks_per_iter
        idx = rng.choice(n, size=k, replace=n < k)
        return [self.train_pool[i] for i in idx]

    def _params(self, temperature: float, seed: int):
        from gigpo.policy.base import SamplingParams

        r = self.cfg.rollout
        return SamplingParams(temperature=temperature, top_p=r.top_p, max_new_tokens=r.max_response_tokens, seed=seed)

    def anchors(self, batch):
        """The rows' anchors under ``algorithm.anchor`` (docs/algorithm.md#anchor-definitions).

        Built on the batch that is trained on, after faulted episodes are left out, so the
        ``context-k`` fallback sees the groups the estimator sees.
        """
        from gigpo.advantages import step_anchors

        return step_anchors(
            self.cfg.algorithm.anchor,
            episode_ids=batch.episode_id,
            traj_ids=batch.traj_id,
            anchors=batch.anchor,
            actions=batch.action,
            state_anchors=batch.state_anchor,
        )

    def values(self, batch) -> list[np.ndarray]:
        """The critic's value of every response token of ``batch``'s rows (per-row float32 arrays)."""
        from gigpo.learner.critic import batched_values

        t = self.cfg.train
        return batched_values(
            self.critic,
            batch.prompt_ids,
            batch.response_ids,
            pad_token_id=self.tokenizer.pad_token_id,
            token_budget=t.micro_token_budget,
            autocast=t.autocast,
            pad_multiple=t.pad_multiple,
        )

    def advantages(self, batch, anchors=None, values=None):
        """Returns, penalty and estimator for ``batch``; returns (AdvantageResult, step_returns, scores).

        ``anchors``: the rows' anchors when already built (``self.anchors(batch)``); ``values``:
        the critic's token values when already computed (``self.values(batch)``; estimators
        with a critic only)."""
        from gigpo.advantages import (
            apply_invalid_action_penalty,
            compute_advantages,
            discounted_returns,
            episode_scores,
            runtime_inputs,
        )

        a = self.cfg.algorithm
        options = a.estimator_options()
        if self.critic is not None:
            values = self.values(batch) if values is None else values
            options |= {"gamma": self.cfg.critic.gamma, "lam": self.cfg.critic.lam}
        returns = discounted_returns(batch.reward, batch.traj_id, a.gamma)
        scores = episode_scores(batch.reward, batch.traj_id)
        scores, step_returns = apply_invalid_action_penalty(scores, returns, batch.valid, a.invalid_action_penalty)
        # Estimators that build their own step returns (graphgpo) subtract the same penalty there.
        penalties = None
        if "penalties" in runtime_inputs(a.estimator):
            penalties = np.where(np.asarray(batch.valid, bool), 0.0, float(a.invalid_action_penalty or 0.0))
        res = compute_advantages(
            a.estimator,
            scores=scores,
            step_returns=step_returns,
            episode_ids=batch.episode_id,
            traj_ids=batch.traj_id,
            anchors=self.anchors(batch) if anchors is None else anchors,
            values=values,
            penalties=penalties,
            **options,
        )
        return res, step_returns, scores

    def sync_generator(self) -> None:
        """Bring a generator that samples elsewhere (``sync_weights``) to ``self.model``'s weights."""
        sync = getattr(self.generator, "sync_weights", None)
        if sync is not None and getattr(self.generator, "policy_version", None) != self.policy_version:
            self.sync_seconds += sync(self.model, self.policy_version)

    def _rollout_round(self, it: int, round_: int, k: int):
        from gigpo.rollout import rollout

        cfg = self.cfg
        self.sync_generator()
        tasks = self.sample_tasks(it, round_, k)
        seed = iteration_seed(cfg.seed, it, 2 if round_ == 0 else 200 + round_)
        self.full_model.eval()  # no dropout while sampling, whatever the generator (the update sets train mode)
        batch = rollout(
            self.envs, tasks, self.generator, self.tokenizer, self.agent, self._params(cfg.rollout.temperature, seed)
        )
        errors = [r.error for r in self.envs.results() if r.failed and r.error]
        return batch, errors

    def collect(self, it: int):
        """The iteration's rollouts: (everything sampled, the batch to train on, counters).

        Rank 0 rolls out (``_collect``) and every rank gets the same batches.
        """
        return self._on_main(lambda: self._collect(it))

    def _collect(self, it: int):
        """``collect`` on one process.

        Episodes that ended in an env fault (exception, timeout, dead worker) are left out of the
        trained batch and of their group's statistics: a fault is not the policy's failure. With
        ``train.dynamic_sampling``, groups without signal are dropped and more tasks are rolled
        out (at most ``dynamic_sampling_rounds`` more rounds) until ``tasks_per_iter`` groups have
        signal; extra groups beyond that are dropped, as in DAPO.
        """
        cfg = self.cfg
        want = cfg.env.tasks_per_iter
        sampled, kept, errors = [], [], []
        n_groups = n_signal = 0
        round_, k = 0, want
        while True:
            batch, errs = self._rollout_round(it, round_, k)
            sampled.append(batch)
            errors += errs
            clean = select_trajectories(batch, ~batch.traj_failed)
            n_groups += k
            if not cfg.train.dynamic_sampling:
                kept.append(clean)
                break
            res, _, _ = self.advantages(clean) if clean.num_rows else (None, None, None)
            sig = group_has_signal(clean, res.advantages) if res is not None else np.zeros(0, bool)
            n_signal += int(sig.sum())
            if sig.any():
                kept.append(select_trajectories(clean, sig[clean.traj_episode_id]))
            have = sum(int(b.traj_episode_id.max()) + 1 for b in kept if b.num_trajectories)
            if have >= want or round_ >= cfg.train.dynamic_sampling_rounds:
                break
            round_ += 1
            rate = max(n_signal / n_groups, 0.25)
            k = min(want, int(np.ceil((want - have) / rate)))
        every = concat_batches(sampled)
        n_failed = int(every.traj_failed.sum())
        if n_failed and n_failed * 2 > every.num_trajectories:
            first = errors[0] if errors else "no error message"
            raise RunStopped(
                f"{n_failed} of {every.num_trajectories} episodes in iteration {it} ended in env "
                f"faults (first: {first}); fix the env (env.kwargs, env.executor, timeouts) and "
                f"resume with --resume {self.run_dir}"
            )
        train = concat_batches(kept) if kept else select_trajectories(every, np.zeros(every.num_trajectories, bool))
        if cfg.train.dynamic_sampling and train.num_trajectories:
            eps = np.arange(int(train.traj_episode_id.max()) + 1)
            train = select_trajectories(train, (eps < want)[train.traj_episode_id])
        counters = {
            "train/rollout_rounds": round_ + 1,
            "train/groups_sampled": n_groups,
            "train/groups_trained": int(train.traj_episode_id.max()) + 1 if train.num_trajectories else 0,
            "train/episodes_faulted": n_failed,
        }
        if cfg.train.dynamic_sampling:
            counters["train/groups_without_signal"] = n_groups - n_signal
        return every, train, counters

    def save(self, it: int, best: bool = False) -> None:
        """Checkpoint after iteration ``it``; rank 0 writes it (under fsdp every rank gathers)."""
        state = {
            "model": self.dist.full_model_state(self.model),
            "updater": self.updater.state_dict(),
            **(
                {"critic": self.critic.state_dict()}
                | ({"critic_updater": self.critic_updater.state_dict()} if self.critic_updater is not None else {})
                if self.critic is not None
                else {}
            ),
            "sampler": {"iteration": it, "pool_size": len(self.train_pool)},
            "guard": {"watchdog": self.watchdog.state_dict(), "stop_reason": self.stop_reason},
            "world": self.dist.world,  # a resume must run on as many processes
            "distributed": self.dist.mode,
        }
        if self.dist.is_main:
            save_checkpoint(self.run_dir, it, state, best=best)
        self.dist.barrier()  # no rank reads a checkpoint (rollback) before it is complete

    def _pin_best(self, iteration: int) -> None:
        """Pin the checkpoint after ``iteration`` as best when it was kept (``log.save_every`` > 1
        leaves some iterations without one; the best is then the best checkpointed one)."""
        d = self.run_dir / "checkpoints" / f"iter_{iteration:06d}"
        if d.is_dir():
            pin_best(self.run_dir, d.name)
        else:
            pinned = best_checkpoint(self.run_dir)
            self.watchdog.best_iteration = int(pinned.name[len("iter_") :]) if pinned is not None else None

    def _roll_back(self, it: int, reason: str) -> dict:
        """Restore the best checkpoint, lower the lr; returns the event logged with tag ``guard``."""
        best = load_checkpoint(best_checkpoint(self.run_dir))
        self._load_model(best["model"])
        self.policy_version += 1
        self.updater.roll_back(best["updater"], self.cfg.guard.lr_factor)
        if self.critic is not None and "critic" in best:  # the critic goes back with its policy
            self.critic.load_state_dict(best["critic"])
            if self.critic_updater is not None:
                self.critic_updater.load_state_dict(best["critic_updater"])
        self.watchdog.rolled_back()
        ev = {
            "event": "rollback",
            "reason": reason,
            "to_iteration": int(best["iteration"]),
            "rollbacks": self.watchdog.rollbacks,
            "lr": self.updater.optimizer.param_groups[0]["lr"],
        }
        if self.watchdog.exhausted:
            self.stop_reason = f"{self.watchdog.rollbacks} rollbacks (guard.max_rollbacks); kept the best model"
            ev["stop"] = self.stop_reason
        print_main = print if self.dist.is_main else lambda *a, **k: None
        print_main(
            f"guard: iteration {it}: {reason}; rolled back to iteration {ev['to_iteration']}, lr now "
            f"{ev['lr']:.3g}" + (f"; stopping: {self.stop_reason}" if "stop" in ev else ""),
            flush=True,
        )
        return ev

    def train_iteration(self) -> dict:
        from gigpo.rollout import rollout_metrics, write_trajectories_jsonl

        cfg, it = self.cfg, self.iteration + 1
        _seed_all(iteration_seed(cfg.seed, it, 0))
        times = {}
        t_it = t0 = time.perf_counter()
        self.sync_seconds = 0.0
        every, batch, counters = self.collect(it)
        times["time/rollout"] = time.perf_counter() - t0
        _debug_kill(it, "after_rollout")
        t0 = time.perf_counter()
        anchors = self.anchors(batch)
        times["time/anchor"] = time.perf_counter() - t0
        values = None
        if self.critic is not None:
            t1 = time.perf_counter()
            values = self.values(batch)
            times["time/values"] = time.perf_counter() - t1
        res, step_returns, scores = self.advantages(batch, anchors, values)
        times["time/advantage"] = time.perf_counter() - t0
        m = {f"rollout/{k}": v for k, v in rollout_metrics(every).items()}
        m["rollout/entropy_est"] = _entropy_estimate(every)
        events = []
        # The rollout measured the policy after iteration it-1: guard it before updating on it.
        improved, reason = self.watchdog.observe_train(it - 1, m.get("rollout/success", 0.0), m["rollout/entropy_est"])
        if improved:
            if self.dist.is_main:
                self._pin_best(it - 1)
            self.watchdog.best_iteration = self.dist.broadcast(self.watchdog.best_iteration)
        upd, n_rows, crit = {}, 0, {}
        skipped = {"time/old_logprob": 0.0, "time/ref_logprob": 0.0, "time/update": 0.0}
        if reason:
            events.append(self._roll_back(it, reason))
            times.update(skipped | ({"time/critic_update": 0.0} if self.critic_updater is not None else {}))
        else:
            if self.critic_updater is not None:
                crit = self._update_critic(batch, res, values, it, times)
            if it <= cfg.critic.warmup_iterations and self.critic is not None:
                times.update(skipped)  # critic warm-up: the policy is left unchanged
            else:
                upd, n_rows = self._update(batch, res, it, times, values)
                # A shared value head learns in the policy's update: its loss is the critic's metric.
                crit |= {k: upd.pop(k) for k in ("value_loss", "vf_clipfrac") if k in upd}
        _debug_kill(it, "after_update")
        best_now = False
        # The last iteration is validated too, so the final model is always a candidate.
        val_due = cfg.guard.val_every and (it % cfg.guard.val_every == 0 or it == cfg.train.iterations)
        if val_due and not self.stop_reason:
            vm = self.validate()
            m.update(vm)
            best_now, reason = self.watchdog.observe_val(it, vm["val/success"])
            if reason:
                events.append(self._roll_back(it, reason))
        if hasattr(self.generator, "sync_weights"):
            times["time/weight_sync"] = self.sync_seconds
        times["time/iteration"] = time.perf_counter() - t_it
        resp_len = batch.response_lengths()
        m.update({f"actor/{k}": v for k, v in upd.items()})
        if self.critic is not None:
            m.update(self._critic_metrics(values, res) | {f"critic/{k}": v for k, v in crit.items()})
        m.update(_stats("return", step_returns) | _stats("score", scores) | _stats("advantage", res.advantages))
        m.update(_stats("advantage_episode", res.episode_advantages) | _stats("advantage_step", res.step_advantages))
        m.update(step_group_metrics(res.step_groups))
        m.update(anchor_metrics(batch, anchors, cfg.algorithm.anchor))
        m.update(counters)
        m["train/rows_updated"] = n_rows
        m["guard/rollbacks"] = self.watchdog.rollbacks
        if self.server is not None:
            m["rollout/server_restarts"] = self.server.restarts
        m["guard/lr_scale"] = self.updater.lr_scale
        m.update(
            {
                "tokens/response": int(resp_len.sum()),
                "tokens/prompt": int(sum(len(p) for p in batch.prompt_ids)),
                "tokens/response_mean": float(resp_len.mean()) if len(resp_len) else 0.0,
            }
        )
        m.update(times)
        m["system/rss_gb"] = rss_gb()
        if self.dist.device.startswith("cuda"):  # the largest over the ranks
            m["system/gpu_peak_gb"] = self.dist.max_int(torch.cuda.max_memory_allocated() >> 20) / 1024
        self.iteration = it
        if cfg.log.trajectories_every and it % cfg.log.trajectories_every == 0 and self.dist.is_main:
            write_trajectories_jsonl(
                batch,
                self.run_dir / "trajectories" / f"iter_{it:06d}.jsonl",
                advantages={
                    "A": res.advantages,
                    "A_E": res.episode_advantages,
                    "A_S": res.step_advantages,
                    "step_group": res.step_groups,
                    "step_return": step_returns,
                },
            )
        # Log first, then checkpoint: a kill in between re-runs the iteration on resume, and the
        # logger drops lines past the checkpoint, so no iteration's record is lost or doubled.
        self.logger.log(m, iteration=it, tag="train")
        for ev in events:
            self.logger.log(ev, iteration=it, tag="guard")
        _debug_kill(it, "after_log")
        if it % cfg.log.save_every == 0 or it == cfg.train.iterations or events or best_now or self.stop_reason:
            self.save(it, best=best_now)
        return m

    def _update_critic(self, batch, res, values, it: int, times: dict) -> dict:
        """One critic update on ``batch`` towards the estimator's token returns; returns its metrics."""
        t0 = time.perf_counter()
        out = self.critic_updater.update(
            batch.prompt_ids, batch.response_ids, values, res.token_returns, seed=iteration_seed(self.cfg.seed, it, 4)
        )
        times["time/critic_update"] = time.perf_counter() - t0
        return out

    @staticmethod
    def _critic_metrics(values, res) -> dict:
        """``critic/values_mean`` and ``critic/explained_variance`` of the values the advantages used."""
        from gigpo.learner.critic import explained_variance

        toks = [np.asarray(v, np.float64) for v in values if len(v)]
        out = {"critic/values_mean": float(np.concatenate(toks).mean()) if toks else 0.0}
        ev = explained_variance(values, res.token_returns)
        if np.isfinite(ev):  # no variance in the returns: the metric is left out, never NaN
            out["critic/explained_variance"] = ev
        return out

    def _update(self, batch, res, it: int, times: dict, values=None) -> tuple[dict, int]:
        """Old / reference log-probs and the policy update on ``batch``; returns (metrics, rows).
        ``values``: the critic's token values, the value targets' clip centre under
        ``critic.shared_backbone`` (the head is trained in this update)."""
        cfg = self.cfg
        stale = {v for vs in batch.meta.get("traj_policy_version") or [] for v in vs if v != self.policy_version}
        if stale:
            raise RuntimeError(
                f"iteration {it}: rows sampled by policy version(s) {sorted(stale, key=str)}, but the "
                f"model is at version {self.policy_version}: the weight sync did not reach the sampler"
            )
        prompts, responses = batch.prompt_ids, batch.response_ids
        adv_rows, old_sampled = res.advantages, list(batch.logprobs)
        allowed, token_adv = batch.allowed, res.token_advantages
        if cfg.train.skip_zero_advantage_rows:
            # Rows with A = 0 give -A * ratio = 0: no gradient, only a smaller token mean. Leaving
            # them out skips their forward/backward (config validation ensures no KL/entropy term).
            keep = np.flatnonzero(np.abs(np.asarray(res.advantages)) > 1e-8)
            prompts, responses = [prompts[i] for i in keep], [responses[i] for i in keep]
            adv_rows, old_sampled = np.asarray(res.advantages)[keep], [old_sampled[i] for i in keep]
            allowed = [allowed[i] for i in keep] if allowed is not None else None
            token_adv = [token_adv[i] for i in keep] if token_adv is not None else None
        lp_kw = dict(
            pad_token_id=self.tokenizer.pad_token_id,
            temperature=cfg.rollout.temperature,
            token_budget=cfg.train.micro_token_budget,
            allowed=allowed,
            autocast=cfg.train.autocast,
            pad_multiple=cfg.train.pad_multiple,
        )
        t0 = time.perf_counter()
        # Rank 0 computes the old and reference log-probs of every row, as one process does.
        old = (
            old_sampled
            if cfg.rollout.reuse_sampling_logprobs
            else self._on_main(lambda: batched_logprobs(self.full_model, prompts, responses, **lp_kw))
        )
        times["time/old_logprob"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        ref = (
            self._on_main(lambda: batched_logprobs(self.ref_model, prompts, responses, **lp_kw))
            if cfg.train.use_kl
            else None
        )
        times["time/ref_logprob"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        planted = _debug_lr(it)
        for g in self.updater.optimizer.param_groups if planted else ():
            g["lr"] = planted  # the update's scheduler step restores the configured lr after it
        upd = (
            self.updater.update(
                prompts,
                responses,
                adv_rows,
                old,
                ref,
                seed=iteration_seed(cfg.seed, it, 3),
                allowed=allowed,
                token_advantages=token_adv,
                **({"old_values": values, "returns": res.token_returns} if self.updater.value_head is not None else {}),
            )
            if len(prompts)
            else {}
        )
        self._full_stale = self.dist.sharded
        self.policy_version += bool(len(prompts))
        times["time/update"] = time.perf_counter() - t0
        return upd, len(prompts)

    def _eval_rollout(self, pool, seed: int) -> tuple[dict, float]:
        """One rollout per task of ``pool`` at the eval temperature: (rollout metrics, seconds).
        Rank 0 runs it; every rank gets the result."""
        from gigpo.rollout import eval_rollout

        def run() -> tuple[dict, float]:
            t0 = time.perf_counter()
            self.full_model.eval()
            self.sync_generator()
            _, m = eval_rollout(
                self.eval_envs,
                pool,
                self.generator,
                self.tokenizer,
                self.agent,
                self._params(self.cfg.rollout.eval_temperature, seed),
            )
            return m, time.perf_counter() - t0

        return self._on_main(run)

    def validate(self) -> dict:
        """Success on the validation tasks (best-model selection); returns ``val/*`` metrics."""
        m, secs = self._eval_rollout(self.val_pool, iteration_seed(self.cfg.seed, 0, 8))
        out = {f"val/{k}": v for k, v in m.items() if k in ("success", "score", "episode_length", "num_trajectories")}
        out["time/val"] = secs
        return out

    def evaluate(self, tag: str = "eval", **extra) -> dict:
        """One rollout per held-out task at the eval temperature; logs and returns ``eval/*``."""
        # The same sampling seeds at every evaluation, as for validation: a model scores the same
        # each time, and before/after compare on common random numbers (paired, less noise).
        m, secs = self._eval_rollout(self.eval_pool, iteration_seed(self.cfg.seed, 0, 9))
        out = {f"eval/{k}": v for k, v in m.items()}
        out["time/eval"] = secs
        out.update(extra)
        self.logger.log(out, iteration=self.iteration, tag=tag)
        return out

    def run(self) -> dict:
        """Train to ``train.iterations`` (evaluating as configured); returns before/after eval.

        With best-model selection (``guard.val_every``) the model delivered in ``model/`` and
        evaluated as ``eval_final`` is the best by validation success (the starting model
        included); the last one is saved as ``model_last/`` and evaluated as ``eval_last``.
        """
        from gigpo.train.logging import print_eval_comparison, print_model_table

        cfg, result, pt = self.cfg, {}, self.phase_times
        main = self.dist.is_main
        say = print if main else lambda *a, **k: None  # rank 0 speaks for the run
        if self.iteration >= cfg.train.iterations and (self.run_dir / "summary.json").exists():
            say(
                f"the run in {self.run_dir} already finished at iteration {self.iteration}; to train on, "
                f"resume with a larger train.iterations",
                flush=True,
            )
            return json.loads((self.run_dir / "summary.json").read_text())
        if cfg.log.eval_before and self.iteration == 0:
            result["before"] = self.evaluate("eval_before")
            pt["eval_before"] = result["before"]["time/eval"]
            if main:
                _print_eval_line("before training", result["before"])
        if self.iteration == 0 and best_checkpoint(self.run_dir) is None:
            # The starting model is the first candidate for best and the first rollback target.
            if cfg.guard.val_every:
                vm = self.validate()
                self.watchdog.observe_val(0, vm["val/success"])
                self.logger.log(vm, iteration=0, tag="val")
                say(
                    f"validation before training: success {vm['val/success']:.3f} over {len(self.val_pool)} tasks",
                    flush=True,
                )
            self.save(0, best=True)
        t0 = time.perf_counter()
        while self.iteration < cfg.train.iterations and not self.stop_reason:
            m = self.train_iteration()
            say(iteration_summary(self.iteration, cfg.train.iterations, m), flush=True)
            if (
                cfg.log.eval_every
                and self.iteration % cfg.log.eval_every == 0
                and self.iteration < cfg.train.iterations
            ):
                self.evaluate()
        pt["train"] = time.perf_counter() - t0
        last_it, best_it = self.iteration, self.watchdog.best_iteration
        models = {"model": last_it}
        g = cfg.guard
        if (
            g.val_every
            and best_it is not None
            and best_it != last_it
            and not self.stop_reason
            and self.watchdog.deliver_last(last_it, g.select_margin_se, len(self.val_pool))
        ):
            # the last model validates as well as the best (within guard.select_margin_se): deliver it
            say(
                f"validation: the last model ({self.watchdog.last_val[1]:.3f}) is within "
                f"{g.select_margin_se:g} standard errors of the best (iteration {best_it}, "
                f"{self.watchdog.best_val:.3f}); model/ is the last",
                flush=True,
            )
            self.selection = f"last, within guard.select_margin_se of the best (iteration {best_it})"
            self.watchdog.best_iteration = best_it = last_it
        if cfg.guard.val_every and best_it is not None and best_it != last_it:
            result["last"] = self.evaluate("eval_last", **{"eval/model_iteration": last_it})
            self.save_model("model_last")
            self._load_model(load_checkpoint(best_checkpoint(self.run_dir))["model"])
            self.policy_version += 1
            models = {"model": best_it, "model_last": last_it}
        result["after"] = self.evaluate("eval_final", **{"eval/model_iteration": models["model"]})
        pt["eval_after"] = result["after"]["time/eval"]
        self.logger.close()
        path = self.save_model("model")
        if not main:
            return result
        if "before" in result:
            print_eval_comparison(result["before"], result["after"])
        print_model_table(
            models,
            result,
            best_val=self.watchdog.best_val if cfg.guard.val_every else None,
            rollbacks=self.watchdog.rollbacks,
            stop_reason=self.stop_reason,
        )
        write_json(self.run_dir / "phases.json", pt)
        print("wall seconds per phase: " + ", ".join(f"{k} {v:.0f}" for k, v in pt.items()), flush=True)
        if "model_last" not in models and (self.run_dir / "model_last").exists():
            import shutil

            shutil.rmtree(self.run_dir / "model_last")
        self.write_summary(result, models)
        print(f"trained model: {path} (iteration {models['model']})", flush=True)
        self.write_report()
        return result

    def write_summary(self, result: dict, models: dict) -> Path:
        """``summary.json``: start and final held-out success, which iteration each saved model is
        from, guard events, the start model's weights hash, wall time per phase."""
        g = lambda k: (result.get(k) or {}).get("eval/success")  # noqa: E731
        before = g("before")
        if before is None:  # a resumed run evaluated its start in an earlier process
            lines = [json.loads(x) for x in (self.run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
            before = next((x.get("eval/success") for x in lines if x.get("tag") == "eval_before"), None)
        out = {
            "start_model": str(self.model_path),
            "start_model_sha256": self.start_hash,
            "success_before": before,
            "success_final": g("after"),
            "success_last": g("last"),
            "models": models,
            "selection": self.selection if self.cfg.guard.val_every else "last (guard.val_every=0)",
            "best_val_success": (
                self.watchdog.best_val if self.cfg.guard.val_every and self.watchdog.best_val > float("-inf") else None
            ),
            "rollbacks": self.watchdog.rollbacks,
            "stop_reason": self.stop_reason,
            "iterations": self.iteration,
            "phases": self.phase_times,
        }
        write_json(self.run_dir / "summary.json", out)
        return self.run_dir / "summary.json"

    def save_model(self, name: str = "model") -> Path:
        """The trained policy as a Hugging Face directory ``run_dir/<name>`` (model + tokenizer), so
        ``gigpo eval model.name_or_path=<run_dir>/model`` or ``from_pretrained`` can load it.
        Written to a temporary directory, then swapped in for any previous copy
        (``replace_dir_atomic``). With LoRA this holds the adapter (peft's ``save_pretrained``).
        Rank 0 writes it; every rank calls this (under fsdp the weights are gathered first)."""
        from gigpo.policy.cache import replace_dir_atomic

        def write(d: Path) -> None:
            self.full_model.save_pretrained(d)
            self.tokenizer.save_pretrained(d)

        self._sync_full_model()
        path = replace_dir_atomic(self.run_dir / name, write) if self.dist.is_main else self.run_dir / name
        self.dist.barrier()
        return path

    def write_report(self):
        """``gigpo.report.write_report(run_dir)``; a failure only warns (the run itself is done)."""
        try:
            from gigpo.report import write_report

            path = write_report(self.run_dir)
        except Exception as e:  # noqa: BLE001 - the report is a convenience, never fatal
            warnings.warn(f"report not written for {self.run_dir}: {type(e).__name__}: {e}", stacklevel=2)
            return None
        print(f"report: {path}", flush=True)
        return path

    def close(self) -> None:
        for e in (getattr(self, "envs", None), getattr(self, "eval_envs", None)):
            getattr(e, "close", lambda: None)()
        server = getattr(self, "server", None)
        if server is not None:
            server.close()  # stops a vLLM server the run started
            self.server = None
        lock = getattr(self, "_lock", None)
        if lock is not None:
            lock.release()
        dist = getattr(self, "dist", None)
        if dist is not None:
            dist.close()


def _print_eval_line(label: str, m: dict) -> None:
    n = m.get("eval/num_trajectories", 0)
    print(
        f"held-out eval {label}: success {m.get('eval/success', 0):.3f} over {n} tasks ({m.get('time/eval', 0):.0f}s)",
        flush=True,
    )


def _entropy_estimate(batch) -> float:
    """Mean -log p of the sampled response tokens: a sample estimate of the policy's per-token
    entropy at the rollout temperature, free from the sampler's log-probs."""
    lps = [np.asarray(x, dtype=np.float64) for x in batch.logprobs if len(x)]
    return float(-np.concatenate(lps).mean()) if lps else 0.0


def rss_gb() -> float:
    """This process's resident memory (GiB): current on Linux, the peak elsewhere."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**30
    except (OSError, ValueError, IndexError):
        import resource
        import sys

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
        return peak / (2**30 if sys.platform == "darwin" else 2**20)


def write_json(path: Path, obj) -> None:
    Path(path).write_text(json.dumps(obj, indent=2, default=float))

"""The training loop: each iteration runs named phases (docs/algorithm.md#iteration):

  collect  ``tasks_per_iter`` train tasks x ``group_size`` rollouts, faulted episodes set aside,
           dynamic sampling (``gigpo.train.collect``);
  credit   anchors, discounted returns (paper Eq. 5), the invalid-action penalty and the
           estimator's advantages; the critic's values first where the estimator has one
           (``gigpo.train.credit``);
  guard    the collapse watchdog reads the rollout; a collapse rolls back instead of updating
           (``gigpo.train.guards``);
  update   old and reference log-probs, then the policy (and critic) update (``gigpo.learner``);
  validate best-model selection every ``guard.val_every`` iterations;
  record   the iteration's metrics (``gigpo.train.metrics``), trajectories, log, checkpoint.

Everything random is drawn from named per-iteration streams (``gigpo.train.seeds``), so
``--resume`` continues exactly. Under ``torchrun`` (more than one process) rank 0 rolls out,
evaluates and writes the run directory; every rank runs the update on its share of the rows
(``gigpo.learner.distributed``).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import torch

from gigpo.learner.distributed import Dist
from gigpo.policy.base import MakeGenerator
from gigpo.train import build, factories, seeds
from gigpo.train.checkpoint import (
    best_checkpoint,
    check_world,
    load_latest,
    save_checkpoint,
    set_rng_state,
)
from gigpo.train.collect import Collector
from gigpo.train.config import Config, save_config
from gigpo.train.credit import Credit, batch_credit, critic_values, row_anchors, write_trajectories
from gigpo.train.learn import SKIPPED, learn
from gigpo.train.evaluator import Evaluator
from gigpo.train.faults import hooks_from_env
from gigpo.train.guards import Watchdog, model_hash, pin_best_after, roll_back
from gigpo.train.logging import iteration_summary
from gigpo.train.models import load_models
from gigpo.train.metrics import PhaseTimer, iteration_metrics, rollout_phase_metrics
from gigpo.train.progress import LEGEND, RunProgress, eval_line, no_signal_warning
from gigpo.train.selection import finish_run, logged_line


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
        from gigpo.train.checks import check_run
        from gigpo.train.rundir import open_run_dir, resume_changes

        self.cfg, self.run_dir, self.make_generator = cfg, cfg.run_dir, make_generator
        # Every check of the config against this machine and launch, before the run dir changes.
        check_run(cfg, world_size=int(os.environ.get("WORLD_SIZE", "1")))
        torch.set_num_threads(cfg.train.torch_threads)
        self.dist = Dist.from_env(cfg.train.distributed, cfg.model.device, cfg.train.dist_timeout_min)
        seeds.seed_all(cfg.seed)
        if resume and self.dist.is_main:  # a refused change must leave the run dir untouched
            resume_changes(self.run_dir, cfg, force=force, record=False)
        # A new run never appends to or overwrites an old one: the old one is kept, renamed.
        self._lock = open_run_dir(self.run_dir, resume=resume) if self.dist.is_main else None
        self._say(f"run directory: {self.run_dir}")
        try:
            self.dist.barrier()
            self._setup(resume, force)
        except BaseException:
            if self._lock is not None and not resume:
                from gigpo.train.rundir import undo_fresh_start

                lock, self._lock = self._lock, None
                if undo_fresh_start(self.run_dir, lock):
                    kept = "; the previous run it set aside is back in it" if lock.set_aside else ""
                    self._say(f"run directory {self.run_dir} removed: the run failed before it began{kept}")
            self.close()
            raise

    def _setup(self, resume: bool, force: bool) -> None:
        from gigpo.train.rundir import resume_changes

        cfg, main = self.cfg, self.dist.is_main
        if resume and main:
            resume_changes(self.run_dir, cfg, force=force)
        if main and not resume:  # config.yaml stays as the run was started
            save_config(cfg, self.run_dir / "config.yaml")
        self.phase_times: dict[str, float] = {}  # wall seconds per phase of the run (phases.json)
        self.model_path = build.start_model(cfg, self._main_first, self.phase_times, build_it=not resume, main=main)
        self.start_hash = model_hash(self.model_path) if Path(self.model_path).is_dir() else ""
        if self.start_hash and main:
            print(f"start model: {self.model_path} (weights sha256 {self.start_hash[:16]})", flush=True)
        self.models = m = load_models(cfg, self.model_path, self.dist)
        self.model, self.tokenizer, self.full_model, self.ref_model = m.model, m.tokenizer, m.full_model, m.ref_model
        self.critic, self.critic_updater, self.updater = m.critic, m.critic_updater, m.updater
        self.agent = factories.build_agent(cfg, self.tokenizer)
        self.train_pool, self.eval_pool, self.val_pool = factories.task_pools(cfg)
        self.watchdog = Watchdog(cfg.guard, select_by_val=bool(cfg.guard.val_every))
        self.stop_reason: str | None = None
        self.envs = factories.grouped_envs(cfg.env, cfg.env.group_size) if main else None
        self.eval_envs = factories.grouped_envs(cfg.env, 1) if main else None
        self.iteration = 0  # iterations completed
        self.pipeline = None  # train.off_policy_steps: the rollouts in flight (gigpo.train.offpolicy)
        self._pipeline_state: dict | None = None
        if resume:
            self._restore()
        self.sync_seconds = 0.0
        self.generator, self.server = None, None  # rank 0 rolls out
        if main:
            self.generator, self.server = build.build_generator(cfg, m, self.run_dir, self.make_generator)
        self.collector = Collector(
            cfg, self.train_pool, self.envs, self.agent, self.tokenizer, self._advantages, self.run_dir
        )
        if main and cfg.train.off_policy_steps:
            self.pipeline = build.off_policy_pipeline(cfg, m, self, self._pipeline_state)
        self.evaluator = Evaluator(cfg, self.eval_envs, self.agent, self.tokenizer, self._sampler)
        self.logger = build.build_logger(cfg, self.run_dir, resume_after=self.iteration if resume else None, main=main)
        self.hooks = hooks_from_env()  # planted faults for the reliability tests; none in a normal run
        self.progress: RunProgress | None = None  # the display while run() runs
        if resume and main:  # written once the resumed run is set up: a failed resume changes nothing
            save_config(cfg, self.run_dir / "config.resumed.yaml")

    def _restore(self) -> None:
        """Continue from the newest usable checkpoint (falling back past a corrupt newest one)."""
        from gigpo.train.checkpoint import CheckpointError

        cfg, found = self.cfg, load_latest(self.run_dir)
        if found is None:
            raise CheckpointError(f"--resume: no checkpoint in {str(self.run_dir / 'checkpoints')!r}")
        path, state = found
        check_world(state.get("world"), self.dist, path)
        self.models.resume(state, cfg)
        self.iteration = state["iteration"]
        self._say(f"resumed from iteration {self.iteration} ({path.name})")
        if "guard" in state:
            self.watchdog.load_state_dict(state["guard"]["watchdog"])
            self.stop_reason = state["guard"]["stop_reason"]
        set_rng_state(state["rng"])
        self._pipeline_state = state.get("off_policy")

    # ------------------------------------------------------------------ ranks
    def _main_first(self, fn):
        """``fn()`` on rank 0, then on the other ranks (which find what rank 0 built or cached)."""
        out = fn() if self.dist.is_main else None
        self.dist.barrier()
        return out if self.dist.is_main else fn()

    def _on_main(self, fn):
        """``fn()`` run by rank 0 with the current weights; its result on every rank."""
        self.models.sync_full_model()
        return self.dist.broadcast(fn() if self.dist.is_main else None)

    def _phase_done(self, phase: str, it: int) -> None:
        for hook in self.hooks:
            hook(self, it, phase)

    # ------------------------------------------------------------------ the iteration
    def train_iteration(self) -> dict:
        """One iteration: collect -> credit -> guard -> update -> validate -> record."""
        cfg, it = self.cfg, self.iteration + 1
        seeds.seed_all(seeds.iteration_seed(cfg.seed, it, seeds.ITERATION))
        timer, events = PhaseTimer(), []
        self.sync_seconds, t_it = 0.0, time.perf_counter()
        with timer("rollout"):
            every, batch, counters = self.collect(it)
        self._phase_done("after_rollout", it)
        with timer("advantage"):
            credit = self.credit(batch, timer)
        m = rollout_phase_metrics(every)
        reason = self._guard_rollout(it, m, counters.get("train/staleness", 0))
        upd: dict = {}
        crit: dict = {}
        n_rows = 0
        if reason:  # the rollout measured a collapse: back to the best model instead of updating on it
            events.append(self._roll_back(it, reason))
            timer.skip(*SKIPPED, *(("critic_update",) if self.critic_updater is not None else ()))
        else:
            hook = lambda: self._phase_done("before_update", it)  # noqa: E731
            upd, crit, n_rows = learn(
                cfg, self.models, batch, credit, it, timer, on_main=self._on_main, before_update=hook
            )
        self._phase_done("after_update", it)
        best_now = self._validate_due(it, m, events)
        if hasattr(self.generator, "sync_weights"):
            timer.record("weight_sync", self.sync_seconds)
        timer.record("iteration", time.perf_counter() - t_it)
        m |= iteration_metrics(self, batch, credit, upd, crit, n_rows, counters, timer)
        self.iteration = it
        self._record(it, m, events, batch, credit, best_now)
        return m

    def collect(self, it: int):
        """The iteration's rollouts: (everything sampled, the batch to train on, counters). Rank 0
        rolls out (``gigpo.train.collect.Collector``, or the off-policy ``Pipeline``, which also
        submits a later iteration's) and every rank gets the same batches."""
        if self.dist.is_main and self.pipeline is not None:
            p = self.pipeline
            out = self._on_main(lambda: p.collect(it, self.full_model, self.models.version))
            self.sync_seconds += p.take_sync_seconds()
            return out
        return self._on_main(lambda: self.collector.collect(self._sampler(), it))

    def credit(self, batch, timer: PhaseTimer | None = None) -> Credit:
        """Anchors, the critic's values (estimators with a critic) and the advantages of ``batch``."""
        timer = timer or PhaseTimer()
        with timer("anchor"):
            anchors = row_anchors(self.cfg, batch)
        values = None
        if self.critic is not None:
            with timer("values"):
                values = critic_values(self.cfg, self.critic, batch, self.tokenizer.pad_token_id)
        return batch_credit(self.cfg, batch, anchors, values)

    def _advantages(self, batch) -> np.ndarray:
        """The rows' advantages: dynamic sampling's signal test."""
        return self.credit(batch).result.advantages

    def _guard_rollout(self, it: int, m: dict, staleness: int = 0) -> str | None:
        """Feed the rollout (which measured the policy after iteration it-1, or ``staleness``
        updates before it) to the watchdog before updating on it; returns a rollback reason or None."""
        measured = it - 1 - int(staleness)
        improved, reason = self.watchdog.observe_train(
            measured, m.get("rollout/success", 0.0), m["rollout/entropy_est"]
        )
        if improved:
            if self.dist.is_main:
                pin_best_after(self.run_dir, self.watchdog, measured)
            self.watchdog.best_iteration = self.dist.broadcast(self.watchdog.best_iteration)
        return reason

    def _validate_due(self, it: int, m: dict, events: list) -> bool:
        """Validate when due (every ``guard.val_every`` iterations and the last, so the final model is
        always a candidate); returns whether this iteration is the new best. A validation far below
        the best rolls back."""
        g = self.cfg.guard
        if not g.val_every or self.stop_reason or (it % g.val_every and it != self.cfg.train.iterations):
            return False
        vm = self.validate()
        m.update(vm)
        best_now, reason = self.watchdog.observe_val(it, vm["val/success"])
        if reason:
            events.append(self._roll_back(it, reason))
        return best_now

    def _record(self, it: int, m: dict, events: list, batch, credit: Credit, best_now: bool) -> None:
        """Trajectories, the metrics line, guard events, the checkpoint."""
        cfg = self.cfg
        if cfg.log.trajectories_every and it % cfg.log.trajectories_every == 0 and self.dist.is_main:
            write_trajectories(batch, credit, self.run_dir / "trajectories" / f"iter_{it:06d}.jsonl")
        # Log first, then checkpoint: a kill in between re-runs the iteration on resume, and the
        # logger drops lines past the checkpoint, so no iteration's record is lost or doubled.
        self.logger.log(m, iteration=it, tag="train")
        for ev in events:
            self.logger.log(ev, iteration=it, tag="guard")
        self._phase_done("after_log", it)
        if it % cfg.log.save_every == 0 or it == cfg.train.iterations or events or best_now or self.stop_reason:
            self.save(it, best=best_now)

    def _roll_back(self, it: int, reason: str) -> dict:
        ev = roll_back(self.run_dir, self.models, self.watchdog, self.cfg.guard.lr_factor, reason)
        if self.pipeline is not None:
            self.pipeline.drain()  # rollouts of the rejected policy are not trained on
        self.stop_reason = ev.get("stop", self.stop_reason)
        stop = f"; stopping: {ev['stop']}" if "stop" in ev else ""
        to, lr = ev["to_iteration"], ev["lr"]
        self._say(f"guard: iteration {it}: {reason}; rolled back to iteration {to}, lr now {lr:.3g}{stop}")
        return ev

    # ------------------------------------------------------------------ evaluation
    def sync_generator(self) -> None:
        """Bring a generator that samples elsewhere (``sync_weights``) to ``self.model``'s weights."""
        sync = getattr(self.generator, "sync_weights", None)
        if sync is not None and getattr(self.generator, "policy_version", None) != self.models.version:
            self.sync_seconds += sync(self.model, self.models.version)

    def _sampler(self):
        """The generator, synced to the current weights, the model in eval mode (rank 0)."""
        if self.pipeline is not None:
            self.pipeline.wait()  # the server backend's server is free of a collect in flight
        self.full_model.eval()  # no dropout while sampling, whatever the generator (the update sets train mode)
        self.sync_generator()
        return self.generator

    def _episodes(self, label: str, pool):
        return self.progress.episodes(label, len(pool)) if self.progress is not None else None

    def validate(self) -> dict:
        """Success on the validation tasks (best-model selection); returns ``val/*`` metrics."""
        out = self._on_main(
            lambda: self.evaluator.validation(self.val_pool, self._episodes("validation", self.val_pool))
        )
        if self.progress is not None:
            self.progress.spent(out["time/val"], validation=True)
        return out

    def evaluate(self, tag: str = "eval", **extra) -> dict:
        """One rollout per held-out task at the eval temperature; logs and returns ``eval/*``."""
        progress = self._episodes("held-out eval", self.eval_pool)
        out = self._on_main(lambda: self.evaluator.heldout(self.eval_pool, progress)) | extra
        self.logger.log(out, iteration=self.iteration, tag=tag)
        if self.progress is not None:
            self.progress.spent(out["time/eval"])
        return out

    # ------------------------------------------------------------------ the run
    def _say(self, msg: str) -> None:
        if self.dist.is_main:  # rank 0 speaks for the run
            print(msg, flush=True)

    def run(self) -> dict:
        """Train to ``train.iterations`` (evaluating as configured); returns before/after eval.

        With best-model selection (``guard.val_every``) the model delivered in ``model/`` and
        evaluated as ``eval_final`` is chosen by ``gigpo.train.selection``; the other candidate
        (the last) is saved as ``model_last/`` and evaluated as ``eval_last``.
        """
        cfg, pt = self.cfg, self.phase_times
        if self.iteration >= cfg.train.iterations and (self.run_dir / "summary.json").exists():
            self._say(
                f"the run in {self.run_dir} already finished at iteration {self.iteration}; to train on, "
                f"resume with a larger train.iterations"
            )
            return json.loads((self.run_dir / "summary.json").read_text())
        show = cfg.log.progress and self.dist.is_main
        self.progress = progress = RunProgress(cfg.train.iterations, self.iteration, enabled=show)
        try:
            return self._run(progress, pt)
        finally:
            progress.close()

    def _run(self, progress: RunProgress, pt: dict) -> dict:
        result: dict = {}
        cfg = self.cfg
        self._phase_done("before_run", self.iteration)
        # Rank 0's answer for all: a rank that looked after rank 0 wrote checkpoint 0 below would skip
        # the save's barrier and wait in the iteration's first collective for ever.
        started = self.dist.broadcast(best_checkpoint(self.run_dir) is not None)  # 0 follows eval_before
        if started and cfg.log.eval_before:  # a resumed run evaluated its start in an earlier process
            before = logged_line(self.run_dir, "eval_before")
            if before is not None:
                result["before"] = before
        elif cfg.log.eval_before and self.iteration == 0:
            self._say(f"held-out eval before training: {len(self.eval_pool)} tasks ...")
            result["before"] = self.evaluate("eval_before")
            pt["eval_before"] = result["before"]["time/eval"]
            self._say(eval_line("before training", result["before"]))
        if self.iteration == 0 and not started:
            # The starting model is the first candidate for best and the first rollback target.
            if cfg.guard.val_every:
                vm = self.validate()
                self.watchdog.observe_val(0, vm["val/success"])
                self.logger.log(vm, iteration=0, tag="val")
                n = len(self.val_pool)
                self._say(f"validation before training: success {vm['val/success']:.3f} over {n} tasks")
            self.save(0, best=True)
        # The ETA counts the loop's iterations, the validations due and the eval after the loop,
        # timed as the ones before it (a resumed run's from its log).
        if progress.val_seconds is None:  # resumed: the validation before training is in the log
            secs = (logged_line(self.run_dir, "val") or {}).get("time/val")
            if secs:
                progress.spent(secs, validation=True)
        ev = (result.get("before") or {}).get("time/eval")
        progress.plan(val_every=cfg.guard.val_every, eval_every=cfg.log.eval_every, eval_seconds=ev)
        progress.begin()
        t0 = time.perf_counter()
        self._say(LEGEND)
        while self.iteration < cfg.train.iterations and not self.stop_reason:
            m = self.train_iteration()
            self._say(iteration_summary(self.iteration, cfg.train.iterations, m, eta=progress.iteration_done()))
            if m.get("train/no_signal"):
                self._say(no_signal_warning(self.iteration, cfg.train))
            every = cfg.log.eval_every
            if every and self.iteration % every == 0 and self.iteration < cfg.train.iterations:
                self.evaluate()
        pt["train"] = time.perf_counter() - t0
        return finish_run(self, result)

    # ------------------------------------------------------------------ run directory
    def save(self, it: int, best: bool = False) -> None:
        """Checkpoint after iteration ``it``; rank 0 writes it (under fsdp every rank gathers)."""
        state = self.models.state_dict() | {
            "sampler": {"iteration": it, "pool_size": len(self.train_pool)},
            "guard": {"watchdog": self.watchdog.state_dict(), "stop_reason": self.stop_reason},
            "world": self.dist.world,  # a resume must run on as many processes
            "distributed": self.dist.mode,
        }
        if self.pipeline is not None:
            state["off_policy"] = self.pipeline.state_dict()
        if self.dist.is_main:
            save_checkpoint(self.run_dir, it, state, best=best)
        self.dist.barrier()  # no rank reads a checkpoint (rollback) before it is complete

    def save_model(self, name: str = "model") -> Path:
        """The trained policy as a Hugging Face directory ``run_dir/<name>`` (``RunModels.save_pretrained``)."""
        return self.models.save_pretrained(self.run_dir / name, self.dist)

    def close(self) -> None:
        # the sampler process, the envs, a vLLM server the run started, the run dir's lock, the group
        for name in ("pipeline", "envs", "eval_envs", "server"):
            obj = getattr(self, name, None)
            if obj is not None:
                obj.close()
                setattr(self, name, None)
        for name, stop in (("_lock", "release"), ("dist", "close")):
            if getattr(self, name, None) is not None:
                getattr(getattr(self, name), stop)()

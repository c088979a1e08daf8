"""The training loop: rollout -> returns -> penalty -> advantages -> update, with runs on disk.

One iteration (GIGPO_SPEC section 3):
  1. sample ``tasks_per_iter`` train tasks (deterministic in (seed, iteration));
  2. rollout ``group_size`` episodes per task -> StepBatch (one row per agent step);
  3. discounted returns per trajectory (gamma, paper Eq. 5), episode scores, invalid-action
     penalty (spec 3.6);
  4. advantages through the estimator registry (one scalar per row);
  5. old log-probs (recomputed, or the sampler's), reference log-probs (once), policy update.

Everything random is derived from (seed, iteration), so ``--resume`` continues exactly.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from pathlib import Path

import numpy as np
import torch

from gigpo.train.checkpoint import load_latest, save_checkpoint, set_rng_state
from gigpo.train.config import Config, build_agent, save_config
from gigpo.train.logging import MetricsLogger, iteration_summary
from gigpo.train.update import PolicyUpdater, batched_logprobs


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
    out = {"step_groups/num_groups": st["num_groups"],
           "step_groups/share_rows_in_size_gt1": st["share_rows_in_groups_gt1"],
           "step_groups/mean_size": st["mean_group_size"],
           "step_groups/max_size": st["max_group_size"]}
    for lo, hi, name in HIST_BINS:
        out[f"step_groups/hist_{name}"] = int(sum(c for size, c in st["size_hist"].items() if lo <= size <= hi))
    return out


def _stats(prefix: str, x) -> dict:
    x = np.asarray(x, dtype=np.float64)
    if not len(x):
        return {}
    return {f"{prefix}/mean": float(x.mean()), f"{prefix}/std": float(x.std()),
            f"{prefix}/min": float(x.min()), f"{prefix}/max": float(x.max())}


class Trainer:
    """Owns the model(s), envs, optimizer and run directory of one training run."""

    def __init__(self, cfg: Config, *, resume: bool = False, force: bool = False) -> None:
        """``resume``: continue from the run dir's newest usable checkpoint; ``force``: allow a
        resume to change run-defining config keys (recorded in ``config_changes.jsonl``)."""
        from gigpo.train.rundir import open_run_dir, preflight

        self.cfg = cfg
        self.run_dir = cfg.run_dir
        torch.set_num_threads(cfg.train.torch_threads)
        preflight(cfg)  # a bad model path, device or env option fails before the run dir changes
        _seed_all(cfg.seed)
        # A new run never appends to or overwrites an old one: the old one is kept, renamed.
        self._lock = open_run_dir(self.run_dir, resume=resume)
        try:
            self._setup(resume, force)
        except BaseException:
            self.close()
            raise

    def _setup(self, resume: bool, force: bool) -> None:
        from gigpo.envs import make_tasks
        from gigpo.envs.manager import GroupedEnvs
        from gigpo.policy.generate import HFGenerator
        from gigpo.policy.load import load_policy
        from gigpo.train.rundir import resume_changes

        cfg = self.cfg
        if resume:
            resume_changes(self.run_dir, cfg, force=force)
        # The original config.yaml stays as the run was started.
        save_config(cfg, self.run_dir / ("config.resumed.yaml" if resume else "config.yaml"))
        model_path = cfg.model.name_or_path
        # Wall seconds per phase of the run (printed at the end and written to phases.json).
        self.phase_times: dict[str, float] = {}
        t0 = time.perf_counter()
        if not resume:
            from gigpo.policy.load import resolve_path

            resolve_path(model_path, cfg.model.cache_dir or None)  # builds `tiny` when not cached
            self.phase_times["model_build"] = time.perf_counter() - t0
        if cfg.sft.enabled:
            from gigpo.train.sft import ensure_sft_model

            t0 = time.perf_counter()
            model_path = ensure_sft_model(cfg, progress=cfg.log.progress)
            self.phase_times["sft"] = time.perf_counter() - t0
        self.model_path = model_path
        kw = dict(device=cfg.model.device, dtype=cfg.model.dtype, cache_dir=cfg.model.cache_dir or None,
                  seed=cfg.seed)
        self.model, self.tokenizer = load_policy(model_path, lora={} if cfg.model.lora else None, **kw)
        self.ref_model = None
        if cfg.train.use_kl:  # frozen reference = the starting policy (spec 5)
            self.ref_model, _ = load_policy(model_path, **kw)
            self.ref_model.eval().requires_grad_(False)
        self.generator = HFGenerator(self.model, self.tokenizer)
        self.agent = build_agent(cfg, self.tokenizer)
        e = cfg.env
        self.train_pool = make_tasks(e.family, "train", n=e.train_tasks or None, seed=e.task_seed, **e.task_kwargs)
        self.eval_pool = make_tasks(e.family, "eval", n=e.eval_tasks or None, seed=e.task_seed, **e.task_kwargs)
        step_timeout, reset_timeout = e.timeouts()
        self.envs = GroupedEnvs(e.family, group_size=e.group_size, max_steps=e.max_steps,
                                env_kwargs=e.kwargs, executor=e.executor,
                                step_timeout=step_timeout, reset_timeout=reset_timeout)
        self.eval_envs = GroupedEnvs(e.family, group_size=1, max_steps=e.max_steps,
                                     env_kwargs=e.kwargs, executor=e.executor,
                                     step_timeout=step_timeout, reset_timeout=reset_timeout)
        self.updater = PolicyUpdater(self.model, cfg.train, pad_token_id=self.tokenizer.pad_token_id,
                                     temperature=cfg.rollout.temperature)
        self.iteration = 0  # iterations completed
        found = load_latest(self.run_dir) if resume else None  # falls back past a corrupt newest one
        if resume and found is None:
            from gigpo.train.checkpoint import CheckpointError

            raise CheckpointError(f"--resume: no checkpoint in {str(self.run_dir / 'checkpoints')!r}")
        if found is not None:
            _, state = found
            self.model.load_state_dict(state["model"])
            self.updater.load_state_dict(state["updater"])
            self.updater.set_lr(cfg.train.lr)  # a resume may change train.lr
            self.iteration = state["iteration"]
            set_rng_state(state["rng"])
        self.logger = MetricsLogger(self.run_dir, resume_after=self.iteration if resume else None,
                                    tensorboard=cfg.log.tensorboard, wandb_project=cfg.log.wandb_project,
                                    config=cfg)

    # ------------------------------------------------------------------ pieces
    def sample_tasks(self, iteration: int):
        """``tasks_per_iter`` train tasks for ``iteration`` (a pure function of (seed, iteration))."""
        rng = np.random.default_rng(iteration_seed(self.cfg.seed, iteration, 1))
        n, k = len(self.train_pool), self.cfg.env.tasks_per_iter
        idx = rng.choice(n, size=k, replace=n < k)
        return [self.train_pool[i] for i in idx]

    def _params(self, temperature: float, seed: int):
        from gigpo.policy.base import SamplingParams

        r = self.cfg.rollout
        return SamplingParams(temperature=temperature, top_p=r.top_p, max_new_tokens=r.max_response_tokens, seed=seed)

    def advantages(self, batch):
        """Returns, penalty and estimator for ``batch``; returns (AdvantageResult, step_returns, scores)."""
        from gigpo.advantages import (apply_invalid_action_penalty, compute_advantages,
                                      discounted_returns, episode_scores, estimator_options)

        a = self.cfg.algorithm
        returns = discounted_returns(batch.reward, batch.traj_id, a.gamma)
        scores = episode_scores(batch.reward, batch.traj_id)
        scores, step_returns = apply_invalid_action_penalty(scores, returns, batch.valid, a.invalid_action_penalty)
        wanted = {"mode": a.mode, "step_weight": a.step_advantage_w, "epsilon": a.epsilon,
                  "similarity_threshold": a.similarity_thresh if a.enable_similarity else None,
                  "normalize_std": a.mode == "mean_std_norm"}
        allowed = estimator_options(a.estimator)
        opts = {k: v for k, v in wanted.items() if k in allowed}
        res = compute_advantages(a.estimator, scores=scores, step_returns=step_returns,
                                 episode_ids=batch.episode_id, traj_ids=batch.traj_id,
                                 anchors=batch.anchor, **opts)
        return res, step_returns, scores

    def train_iteration(self) -> dict:
        from gigpo.rollout import rollout, rollout_metrics, write_trajectories_jsonl

        cfg, it = self.cfg, self.iteration + 1
        _seed_all(iteration_seed(cfg.seed, it, 0))
        times = {}
        t_it = t0 = time.perf_counter()
        tasks = self.sample_tasks(it)
        self.model.eval()
        batch = rollout(self.envs, tasks, self.generator, self.tokenizer, self.agent,
                        self._params(cfg.rollout.temperature, iteration_seed(cfg.seed, it, 2)))
        times["time/rollout"] = time.perf_counter() - t0
        _debug_kill(it, "after_rollout")
        t0 = time.perf_counter()
        res, step_returns, scores = self.advantages(batch)
        times["time/advantage"] = time.perf_counter() - t0
        prompts, responses = batch.prompt_ids, batch.response_ids
        adv_rows, old_sampled = res.advantages, list(batch.logprobs)
        allowed = batch.allowed
        if cfg.train.skip_zero_advantage_rows:
            # Rows with A = 0 give -A * ratio = 0: no gradient, only a smaller token mean. Leaving
            # them out skips their forward/backward (config validation ensures no KL/entropy term).
            keep = np.flatnonzero(np.abs(np.asarray(res.advantages)) > 1e-8)
            prompts, responses = [prompts[i] for i in keep], [responses[i] for i in keep]
            adv_rows, old_sampled = np.asarray(res.advantages)[keep], [old_sampled[i] for i in keep]
            allowed = [allowed[i] for i in keep] if allowed is not None else None
        lp_kw = dict(pad_token_id=self.tokenizer.pad_token_id, temperature=cfg.rollout.temperature,
                     token_budget=cfg.train.micro_token_budget, allowed=allowed, autocast=cfg.train.autocast)
        t0 = time.perf_counter()
        old = (old_sampled if cfg.rollout.reuse_sampling_logprobs
               else batched_logprobs(self.model, prompts, responses, **lp_kw))
        times["time/old_logprob"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        ref = batched_logprobs(self.ref_model, prompts, responses, **lp_kw) if self.ref_model is not None else None
        times["time/ref_logprob"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        upd = self.updater.update(prompts, responses, adv_rows, old, ref, seed=iteration_seed(cfg.seed, it, 3),
                                  allowed=allowed) if len(prompts) else {}
        times["time/update"] = time.perf_counter() - t0
        times["time/iteration"] = time.perf_counter() - t_it
        _debug_kill(it, "after_update")
        resp_len = batch.response_lengths()
        m = {f"rollout/{k}": v for k, v in rollout_metrics(batch).items()}
        m.update({f"actor/{k}": v for k, v in upd.items()})
        m.update(_stats("return", step_returns) | _stats("score", scores) | _stats("advantage", res.advantages))
        m.update(_stats("advantage_episode", res.episode_advantages) | _stats("advantage_step", res.step_advantages))
        m.update(step_group_metrics(res.step_groups))
        m["train/rows_updated"] = len(prompts)
        m.update({"tokens/response": int(resp_len.sum()), "tokens/prompt": int(sum(len(p) for p in prompts)),
                  "tokens/response_mean": float(resp_len.mean()) if len(resp_len) else 0.0})
        m.update(times)
        self.iteration = it
        if cfg.log.trajectories_every and it % cfg.log.trajectories_every == 0:
            write_trajectories_jsonl(batch, self.run_dir / "trajectories" / f"iter_{it:06d}.jsonl",
                                     advantages={"A": res.advantages, "A_E": res.episode_advantages,
                                                 "A_S": res.step_advantages, "step_group": res.step_groups,
                                                 "step_return": step_returns})
        if it % cfg.log.save_every == 0 or it == cfg.train.iterations:
            save_checkpoint(self.run_dir, it, {"model": self.model.state_dict(),
                                               "updater": self.updater.state_dict(),
                                               "sampler": {"iteration": it, "pool_size": len(self.train_pool)}})
        self.logger.log(m, iteration=it, tag="train")
        return m

    def evaluate(self, tag: str = "eval") -> dict:
        """One rollout per held-out task at the eval temperature; logs and returns ``eval/*``."""
        from gigpo.rollout import eval_rollout

        cfg = self.cfg
        t0 = time.perf_counter()
        self.model.eval()
        _, m = eval_rollout(self.eval_envs, self.eval_pool, self.generator, self.tokenizer, self.agent,
                            self._params(cfg.rollout.eval_temperature, iteration_seed(cfg.seed, self.iteration, 9)))
        out = {f"eval/{k}": v for k, v in m.items()}
        out["time/eval"] = time.perf_counter() - t0
        self.logger.log(out, iteration=self.iteration, tag=tag)
        return out

    def run(self) -> dict:
        """Train to ``train.iterations`` (evaluating as configured); returns before/after eval."""
        from gigpo.train.logging import print_eval_comparison

        cfg, result, pt = self.cfg, {}, self.phase_times
        if cfg.log.eval_before and self.iteration == 0:
            result["before"] = self.evaluate("eval_before")
            pt["eval_before"] = result["before"]["time/eval"]
            _print_eval_line("before training", result["before"])
        t0 = time.perf_counter()
        while self.iteration < cfg.train.iterations:
            m = self.train_iteration()
            print(iteration_summary(self.iteration, cfg.train.iterations, m), flush=True)
            if cfg.log.eval_every and self.iteration % cfg.log.eval_every == 0 and self.iteration < cfg.train.iterations:
                self.evaluate()
        pt["train"] = time.perf_counter() - t0
        result["after"] = self.evaluate("eval_final")
        pt["eval_after"] = result["after"]["time/eval"]
        if "before" in result:
            print_eval_comparison(result["before"], result["after"])
        self.logger.close()
        write_json(self.run_dir / "phases.json", pt)
        print("wall seconds per phase: " + ", ".join(f"{k} {v:.0f}" for k, v in pt.items()), flush=True)
        print(f"trained model: {self.save_model()}", flush=True)
        self.write_report()
        return result

    def save_model(self) -> Path:
        """The trained policy as a Hugging Face directory ``run_dir/model`` (model + tokenizer), so
        ``gigpo eval model.name_or_path=<run_dir>/model`` or ``from_pretrained`` can load it.
        Written to a temporary directory, then swapped in for any previous copy
        (``replace_dir_atomic``). With LoRA this holds the adapter (peft's ``save_pretrained``)."""
        from gigpo.policy.cache import replace_dir_atomic

        def write(d: Path) -> None:
            self.model.save_pretrained(d)
            self.tokenizer.save_pretrained(d)

        return replace_dir_atomic(self.run_dir / "model", write)

    def write_report(self):
        """``gigpo.report.write_report(run_dir)``; a failure only warns (the run itself is done)."""
        import warnings

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
        lock = getattr(self, "_lock", None)
        if lock is not None:
            lock.release()


def _print_eval_line(label: str, m: dict) -> None:
    n = m.get("eval/num_trajectories", 0)
    print(f"held-out eval {label}: success {m.get('eval/success', 0):.3f} over {n} tasks "
          f"({m.get('time/eval', 0):.0f}s)", flush=True)


def write_json(path: Path, obj) -> None:
    Path(path).write_text(json.dumps(obj, indent=2, default=float))

"""Guards against a run that destroys its model: the collapse watchdog.

``Watchdog`` is a small state machine fed once per iteration with training success (and the
rollout's entropy estimate) and, when best-model selection is on, with validation success. It
answers whether the best point moved and, on a collapse, why to roll back. The trainer then
restores the checkpoint pinned as best (``gigpo.train.checkpoint.pin_best``: the model and its
optimizer state), scales the learning rate by ``guard.lr_factor`` and goes on; after
``guard.max_rollbacks`` it stops early. Its state is part of every checkpoint, so ``--resume``
continues it exactly. docs/training.md explains the defaults; research/results.md has the
measurements behind them.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from gigpo.train.checkpoint import best_checkpoint, load_checkpoint, pin_best

EMA_WEIGHT = 0.5  # weight of the newest iteration in the running mean of training success


class Watchdog:
    """Collapse detection over training success / entropy (per iteration) and validation success.

    ``best`` is what the rollback target was chosen by: validation success when best-model
    selection is on (``select_by_val``), else the running mean of training success.
    """

    def __init__(self, cfg, *, select_by_val: bool) -> None:
        self.cfg = cfg
        self.select_by_val = select_by_val
        self.ema: float | None = None
        self.best_ema = float("-inf")
        self.best_val = float("-inf")
        self.best_iteration: int | None = None  # iteration of checkpoints/best
        self.start_val: float | None = None  # validation success of the starting model
        self.last_val: tuple[int, float] | None = None  # (iteration, success) of the newest validation
        self.bad = 0  # consecutive iterations with a training-side collapse signal
        self.rollbacks = 0

    # -- state
    def state_dict(self) -> dict:
        keys = ("ema", "best_ema", "best_val", "best_iteration", "start_val", "last_val", "bad", "rollbacks")
        return {k: getattr(self, k) for k in keys}

    def load_state_dict(self, state: dict) -> None:
        for k, v in state.items():
            setattr(self, k, v)

    # -- signals
    def observe_train(self, iteration: int, success: float, entropy: float | None) -> tuple[bool, str | None]:
        """Feed one iteration's training success; returns (new best?, rollback reason or None).
        "new best" is only reported when selection is by the running mean (no validation)."""
        self.ema = success if self.ema is None else EMA_WEIGHT * success + (1 - EMA_WEIGHT) * self.ema
        improved = False
        if self.ema > self.best_ema:
            self.best_ema = self.ema
            if not self.select_by_val:
                self.best_iteration, improved = iteration, True
        c = self.cfg
        signals = []
        if success < self.best_ema - c.train_drop:
            signals.append(
                f"training success {success:.2f} is more than {c.train_drop:g} below the best "
                f"running mean {self.best_ema:.2f}"
            )
        if c.entropy_floor > 0 and entropy is not None and entropy < c.entropy_floor:
            signals.append(f"entropy {entropy:.3f} is below guard.entropy_floor {c.entropy_floor:g}")
        self.bad = self.bad + 1 if signals else 0
        if c.watchdog and self.bad >= c.patience and self.best_iteration is not None:
            return improved, f"{'; '.join(signals)} for {self.bad} iterations"
        return improved, None

    def observe_val(self, iteration: int, success: float) -> tuple[bool, str | None]:
        """Feed a validation result; returns (new best?, rollback reason or None)."""
        if self.start_val is None:
            self.start_val = success
        self.last_val = (iteration, success)
        if success > self.best_val:
            self.best_val, self.best_iteration = success, iteration
            return True, None
        if self.cfg.watchdog and success < self.best_val - self.cfg.val_drop:
            return False, (
                f"validation success {success:.2f} is more than {self.cfg.val_drop:g} below the "
                f"best {self.best_val:.2f} (iteration {self.best_iteration})"
            )
        return False, None

    def deliver_last(self, last_iteration: int, margin_se: float, val_tasks: int) -> bool:
        """Deliver the last model rather than the best-by-validation one?

        Yes when the last iteration was validated and its success is within ``margin_se``
        binomial standard errors of the best's (``sqrt(p (1 - p) / val_tasks)`` at the best's
        ``p``; the start is one of the candidates): among models that validation cannot tell
        apart, the most trained one. 0 = strict best. The best of several noisy validations is
        a lucky draw, which is why the rule compares against it with a margin rather than
        against the start: a run whose last model validates below a lucky start by less than
        the margin still delivers its last model.
        """
        if margin_se <= 0 or self.last_val is None or self.last_val[0] != last_iteration:
            return False
        p, last = self.best_val, self.last_val[1]
        se = (max(p * (1 - p), 0.0) / max(val_tasks, 1)) ** 0.5
        return last >= p - margin_se * se - 1e-12

    def rolled_back(self) -> None:
        """Restart the training-side signals from the restored model's level."""
        self.rollbacks += 1
        self.bad = 0
        self.ema = self.best_ema if self.best_ema > float("-inf") else None

    @property
    def exhausted(self) -> bool:
        return self.rollbacks >= self.cfg.max_rollbacks


def pin_best_after(run_dir: Path, watchdog: Watchdog, iteration: int) -> None:
    """Pin the checkpoint after ``iteration`` as best when it was kept (``log.save_every`` > 1
    leaves some iterations without one; the best is then the best checkpointed one)."""
    d = Path(run_dir) / "checkpoints" / f"iter_{iteration:06d}"
    if d.is_dir():
        pin_best(run_dir, d.name)
    else:
        pinned = best_checkpoint(run_dir)
        watchdog.best_iteration = int(pinned.name[len("iter_") :]) if pinned is not None else None


def roll_back(run_dir: Path, models, watchdog: Watchdog, lr_factor: float, reason: str) -> dict:
    """Restore the best checkpoint into ``models`` (a ``gigpo.train.models.RunModels``) and lower the
    lr; returns the event logged with tag ``guard`` (with ``stop`` when rollbacks are exhausted)."""
    pinned = best_checkpoint(run_dir)
    assert pinned is not None, "a run pins its start as best before its first iteration"
    best = load_checkpoint(pinned)
    models.roll_back(best, lr_factor)
    watchdog.rolled_back()
    ev = {
        "event": "rollback",
        "reason": reason,
        "to_iteration": int(best["iteration"]),
        "rollbacks": watchdog.rollbacks,
        "lr": models.updater.optimizer.param_groups[0]["lr"],
    }
    if watchdog.exhausted:
        ev["stop"] = f"{watchdog.rollbacks} rollbacks (guard.max_rollbacks); kept the best model"
    return ev


def model_hash(path) -> str:
    """sha256 over a model directory's weight files (names and bytes, sorted): names the exact
    weights a run started from, e.g. the SFT build, in its log and summary."""
    h = hashlib.sha256()
    files = sorted(p for p in Path(path).iterdir() if p.suffix in (".safetensors", ".bin", ".pt") and p.is_file())
    if not files:
        return ""
    for p in files:
        h.update(p.name.encode())
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()

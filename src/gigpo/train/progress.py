"""What a run shows while it works: a progress display of the whole run with an ETA, and of the
evaluation in progress; the legend of the iteration line.

The display is rich's (``log.progress``); the iteration lines are printed above it and carry the
ETA too, so a log redirected to a file has it.
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Callable

LEGEND = (
    "iteration line: success / score = training rollouts' success rate and mean episode score, "
    "len = steps per episode, invalid = share of invalid actions, kl = KL to the reference "
    "(train.use_kl), ent = policy entropy, clip = share of clipped tokens, gnorm = gradient norm, "
    "rows = agent steps rolled out; then wall seconds (docs/metrics.md)"
)


def eval_line(label: str, m: dict) -> str:
    n, secs = m.get("eval/num_trajectories", 0), m.get("time/eval", 0)
    return f"held-out eval {label}: success {m.get('eval/success', 0):.3f} over {n} tasks ({secs:.0f}s)"


def no_signal_warning(iteration: int, train=None) -> str:
    """With ``train``'s KL or entropy term on, the update still moved the policy (toward the
    reference or a higher entropy, not toward any reward)."""
    regularised = train is not None and (train.use_kl and train.kl_coef > 0 or train.entropy_coef > 0)
    effect = (
        "so only the KL/entropy terms moved the policy, not any reward"
        if regularised
        else "so the update left the policy unchanged"
    )
    return (
        f"warning: iteration {iteration} trained on no signal: every advantage is 0 (all rollouts of each "
        f"task scored alike), {effect}; if this repeats, the model cannot "
        "solve or fail these tasks differently (docs/training.md#no-signal)"
    )


def eta_text(seconds: float) -> str:
    """``1h05m``, ``12m30s``, ``40s``."""
    s = max(int(round(seconds)), 0)
    if s >= 3600:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


class RunProgress:
    """Iterations done of ``total`` with elapsed time and an ETA to the run's end, and a bar for an
    evaluation while one runs.

    The ETA is the mean iteration time of this process's loop (from ``begin``; the evaluation and
    validation before training are not iterations; an iteration over 4x the median, a run
    suspended and continued, is left out) times the iterations left, plus the
    validations still due (``plan``: every ``val_every`` iterations and the last) at the last
    validation's time, plus the held-out evaluation after the loop at the time the one before
    training took. Time spent in validations and evaluations inside the loop (``spent``) is counted
    there, not in the iterations' mean.

    ``enabled=False`` keeps the ETA arithmetic and shows nothing; the display also stays off unless
    stdout and stderr are both terminals (a redirected log gets the iteration lines, not bars).
    """

    def __init__(self, total: int, done: int, *, enabled: bool) -> None:
        self.total, self.done = total, done
        self.t0 = time.perf_counter()
        self.aside = 0.0  # seconds of the current iteration spent in validations and evaluations
        self.times: list[float] = []  # each iteration's seconds in this process, evaluations aside
        self.val_every, self.eval_every = 0, 0
        self.val_seconds: float | None = None  # a validation's time, the last measured
        self.end_seconds: float | None = None  # a held-out evaluation's time
        self._p = self._run = None
        if enabled and sys.stdout.isatty() and sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._p = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.fields[eta]}"),
                console=Console(stderr=True),
                transient=True,
            )
            self._p.start()
            self._run = self._p.add_task("training", total=total, completed=done, eta="")

    def plan(self, *, val_every: int = 0, eval_every: int = 0, eval_seconds: float | None = None) -> None:
        """What the ETA adds to the iterations: a validation every ``val_every`` iterations (and
        after the last), a held-out evaluation every ``eval_every`` iterations before the last and
        one after the loop, each taking ``eval_seconds`` (None: not known, not counted)."""
        self.val_every, self.eval_every, self.end_seconds = val_every, eval_every, eval_seconds

    def begin(self) -> None:
        """The training loop starts now: iteration times count from here."""
        self.t0, self.aside, self.times = time.perf_counter(), 0.0, []

    def spent(self, seconds: float, *, validation: bool = False) -> None:
        """``seconds`` of the loop went to an evaluation (a validation: its time is the next ones')."""
        self.aside += seconds
        if validation:
            self.val_seconds = seconds

    def due(self, every: int, *, last: bool) -> int:
        """How many iterations after ``done`` are multiples of ``every`` (with ``last``: and the last)."""
        if not every or self.done >= self.total:
            return 0
        its = {i for i in range(self.done + 1, self.total + 1) if i % every == 0}
        return len(its | {self.total} if last else its - {self.total})

    def eta(self) -> float | None:
        """Seconds to the run's end (see the class); None before the first iteration."""
        if not self.times:
            return None
        mid = statistics.median(self.times)
        typical = [t for t in self.times if t <= 4 * mid]
        per = sum(typical) / len(typical)
        evals = self.due(self.eval_every, last=False) + 1
        return (
            per * (self.total - self.done)
            + self.due(self.val_every, last=True) * (self.val_seconds or 0.0)
            + evals * (self.end_seconds or 0.0)
        )

    def iteration_done(self) -> str:
        """Advance by one iteration; returns the ETA text for the iteration line."""
        self.done += 1
        now = time.perf_counter()
        self.times.append(max(now - self.t0 - self.aside, 0.0))
        self.t0, self.aside = now, 0.0
        left = self.eta()
        text = f"eta {eta_text(left)}" if left is not None and self.done < self.total else ""
        if self._p is not None and self._run is not None:
            self._p.update(self._run, completed=self.done, eta=text)
        return text

    def episodes(self, label: str, total: int) -> Callable[[int, int], None] | None:
        """A ``progress(done, total)`` callback for ``gigpo.rollout.rollout`` showing ``label``."""
        bars = self._p
        if bars is None:
            return None
        task = bars.add_task(label, total=total, eta="")

        def update(done: int, n: int) -> None:
            bars.update(task, completed=done, total=n, visible=done < n)

        return update

    def close(self) -> None:
        if self._p is not None:
            self._p.stop()
            self._p = None

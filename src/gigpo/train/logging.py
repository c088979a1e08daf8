"""Metric sinks (metrics.jsonl always, TensorBoard when installed, W&B when configured) and the
one-line console summaries. Metric names are defined in docs/metrics.md.

TensorBoard is a main dependency (``pip install gigpo`` brings it); W&B is the ``wandb`` extra.
``check_loggers`` says before a run starts whether the configured sinks can work.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import sys
import warnings
from pathlib import Path

# Said once per process: "TensorBoard is not installed" (the pre-run check and the logger both ask).
_SAID: set[str] = set()


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken or half-removed package
        return False


def say_once(key: str, msg: str) -> None:
    if key not in _SAID:
        _SAID.add(key)
        print(f"gigpo: {msg}", file=sys.stderr, flush=True)


def _no_tensorboard(why: str = "it is not installed") -> str:
    return (
        f"log.tensorboard: TensorBoard logging is off because {why}; metrics go to metrics.jsonl only "
        "(pip install 'tensorboard>=2.14,<3', or set log.tensorboard=false to silence this)"
    )


def check_loggers(log_cfg) -> list[str]:
    """Check that the metric sinks ``log_cfg`` (a ``LogConfig``) asks for can work, before a run.

    Raises ``gigpo.train.config.ConfigError`` when ``log.wandb_project`` is set but ``wandb`` is
    not installed (a run asked for W&B must not go on without it). Returns notes on sinks that
    are silently reduced instead (``log.tensorboard`` on without TensorBoard installed: the run
    still logs metrics.jsonl); the caller prints them. Imports nothing heavy (``find_spec`` only).
    """
    from gigpo.train.config import ConfigError

    project = getattr(log_cfg, "wandb_project", "") or ""
    if project and not _installed("wandb"):
        raise ConfigError(
            f"log.wandb_project={project!r} needs Weights & Biases, which is not installed: "
            "pip install 'gigpo[wandb]' (or pip install wandb), or set log.wandb_project='' to log without it"
        )
    notes = []
    if getattr(log_cfg, "tensorboard", False) and not _installed("tensorboard"):
        notes.append(_no_tensorboard())
    return notes


def tb_tag(tag: str, key: str) -> str:
    """The TensorBoard / W&B name of metric ``key`` on a line tagged ``tag``.

    Train lines keep their names (``rollout/success``). Other lines are grouped under their tag
    without repeating it: ``eval/success`` on an ``eval_before`` line is ``eval_before/success``,
    on an ``eval`` line ``eval/success``; ``val/success`` on a ``val`` line stays
    ``val/success``; a key of another family gets the tag in front (``guard/lr``,
    ``eval_before/time/eval``).
    """
    if tag == "train":
        return key
    head, sep, rest = key.partition("/")
    if head == tag:
        return key
    if sep and tag.startswith(head + "_"):  # eval_before / eval_final / eval_last with eval/* keys
        return f"{tag}/{rest}"
    return f"{tag}/{key}"


# Tags a run may log more than once at one iteration (several guard events); every other tag
# (train, eval, eval_before, eval_final, eval_last, val) is one line per iteration at most.
_REPEATABLE = frozenset({"guard"})


def _key(record: dict) -> tuple | None:
    """The (tag, iteration) a line must be the only one of, or None for a repeatable tag."""
    tag = record.get("tag")
    return None if tag in _REPEATABLE else (tag, record.get("iteration", 0))


def _lines_up_to(path: Path, last_iteration: int | None) -> tuple[list[str], int, set]:
    """The lines of iterations <= ``last_iteration`` (all when None), the last of each (tag,
    iteration) only; how many lines were not a JSON record; the (tag, iteration) keys kept."""
    records, torn = [], 0
    for raw in path.read_bytes().splitlines():
        if not raw.strip():
            continue
        try:
            line = raw.decode("utf-8")
            rec = json.loads(line)
            it = rec.get("iteration", 0)
            if not isinstance(it, int):
                raise ValueError(it)
        except (ValueError, AttributeError):  # torn mid-line or mid-character, or not a record
            torn += 1
            continue
        if last_iteration is None or it <= last_iteration:
            records.append((_key(rec), line))
    last = {k: i for i, (k, _) in enumerate(records) if k is not None}
    keep = [line for i, (k, line) in enumerate(records) if k is None or last[k] == i]
    return keep, torn, set(last)


def _rewrite(path: Path, lines: list[str]) -> None:
    """Replace ``path`` by ``lines`` atomically (a kill leaves the old or the new file)."""
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("".join(ln + "\n" for ln in lines))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class MetricsLogger:
    """Appends one flushed JSON line per call to ``<run_dir>/metrics.jsonl``.

    Each line: ``{"iteration": int, "tag": "train" | "eval" | "eval_before" | "eval_final", ...}``.
    ``resume_after=k`` drops lines of iterations > k first (a run killed after logging but before
    its checkpoint would otherwise log that iteration twice). No (tag, iteration) is ever in the
    file twice, except for ``guard`` lines: a line logged again at its iteration (a resumed run
    re-evaluating ``eval_before`` at 0, or ``eval_final`` after a kill before ``summary.json``)
    replaces the old one (the file is rewritten atomically; this is rare).
    """

    def __init__(
        self,
        run_dir,
        *,
        resume_after: int | None = None,
        tensorboard: bool = True,
        wandb_project: str = "",
        config=None,
    ) -> None:
        from types import SimpleNamespace

        # Before anything is written: a run configured for W&B without wandb is a ConfigError.
        for note in check_loggers(SimpleNamespace(tensorboard=tensorboard, wandb_project=wandb_project)):
            say_once("tensorboard", note)
        self.path = Path(run_dir) / "metrics.jsonl"
        self._keys: set = set()  # the (tag, iteration) of the file's non-repeatable lines
        if resume_after is not None and self.path.exists():
            keep, torn, self._keys = _lines_up_to(self.path, resume_after)
            if torn:
                warnings.warn(
                    f"{self.path}: dropped {torn} unparsable line(s) (a write cut short by a kill); "
                    "the iterations after the checkpoint are logged again",
                    stacklevel=2,
                )
            _rewrite(self.path, keep)
        elif resume_after is None and self.path.exists():
            self.path.unlink()  # a fresh run in an old dir starts a fresh log
        self._f = open(self.path, "a", encoding="utf-8")
        self._tb = None
        if tensorboard and _installed("tensorboard"):
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(str(Path(run_dir) / "tensorboard"))
            except Exception as e:  # installed but broken (e.g. a protobuf it cannot load): jsonl only
                say_once("tensorboard", _no_tensorboard(f"it failed to load ({type(e).__name__}: {e})"))
                self._tb = None
        self._wandb = None
        if wandb_project:
            import wandb  # configured explicitly: a missing package is an error worth seeing

            import dataclasses

            self._wandb = wandb.init(
                project=wandb_project,
                name=Path(run_dir).name,
                config=dataclasses.asdict(config) if config is not None else None,
            )

    def log(self, metrics: dict, *, iteration: int, tag: str) -> None:
        line = {"iteration": iteration, "tag": tag}
        line.update({k: v for k, v in ((k, _plain(v)) for k, v in metrics.items()) if v is not _DROP})
        key = _key(line)
        if key in self._keys:  # logged again (a resume redoing it): the new line replaces the old
            self._f.close()
            keep = [
                ln
                for ln in _lines_up_to(self.path, None)[0]
                if _key(json.loads(ln)) != key  # only whole records survive _lines_up_to
            ]
            _rewrite(self.path, keep + [json.dumps(line)])
            self._f = open(self.path, "a", encoding="utf-8")
        else:
            self._f.write(json.dumps(line) + "\n")
            self._f.flush()
            os.fsync(self._f.fileno())
        if key is not None:
            self._keys.add(key)
        scalars = {k: v for k, v in line.items() if isinstance(v, (int, float)) and k != "iteration"}
        if self._tb is not None:
            for k, v in scalars.items():
                self._tb.add_scalar(tb_tag(tag, k), v, iteration)
            self._tb.flush()
        if self._wandb is not None:
            self._wandb.log({tb_tag(tag, k): v for k, v in scalars.items()}, step=iteration)

    def close(self) -> None:
        self._f.close()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()


_DROP = object()


def _plain(v):
    """A JSON-ready value; non-finite floats become ``_DROP`` (the metric is absent that line).

    Writing them as the strings "nan"/"inf" (as before) made a metric change type between lines,
    so readers and exact-resume comparisons had to special-case it; absent is well-defined.
    """
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return _DROP
    return v


def _opt(v, digits: int) -> str:
    """``v`` formatted, or "-" when the metric is absent (e.g. no KL term, no entropy bonus)."""
    return "-" if v is None else f"{v:.{digits}f}"


def iteration_summary(it: int, total: int, m: dict, eta: str = "") -> str:
    """One console line per iteration (its legend: ``gigpo.train.progress.LEGEND``)."""
    g = m.get
    return (
        f"iter {it}/{total}  success {g('rollout/success', 0):.3f}  score {g('rollout/score', 0):.3f}  "
        f"len {g('rollout/episode_length', 0):.1f}  invalid {g('rollout/invalid_action_rate', 0):.2f}  "
        f"kl {_opt(g('actor/kl'), 4)}  ent {_opt(g('actor/entropy'), 3)}  clip {g('actor/clipfrac', 0):.3f}  "
        f"gnorm {g('actor/grad_norm', 0):.3f}  rows {g('rollout/num_steps', 0)}  "
        f"{g('time/iteration', 0):.1f}s (rollout {g('time/rollout', 0):.1f}s, update {g('time/update', 0):.1f}s)"
        + (f"  {eta}" if eta else "")
    )


def print_eval_comparison(before: dict, after: dict) -> None:
    """Success (overall and per task type) and score before vs after training, as a table."""
    from rich.console import Console
    from rich.table import Table

    keys = sorted(
        k
        for k in set(before) | set(after)
        if k.startswith("eval/success")
        or k in ("eval/score", "eval/episode_length", "eval/invalid_action_rate", "eval/tool_calls_per_question")
    )
    from gigpo.train.evaluator import paired_change

    t = Table(title="held-out evaluation: before vs after training")
    for c in ("metric", "before", "after", "change"):
        t.add_column(c)
    paired = paired_change(before, after)
    for k in keys:
        b, a = before.get(k), after.get(k)
        fmt = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
        change = "-" if a is None or b is None else f"{a - b:+.3f}"
        if k == "eval/success" and paired is not None:
            change += f" ± {paired[1]:.3f}"
        t.add_row(k[len("eval/") :], fmt(b), fmt(a), change)
    Console().print(t)
    if paired is not None:
        n = len(after["eval/won_per_task"])
        print(
            f"± is the paired standard error over the {n} tasks; a change inside two of them is not "
            f"told apart from evaluation noise (a larger env.eval_tasks narrows it)",
            flush=True,
        )


def print_model_table(
    models: dict, result: dict, *, val: dict | None = None, rollbacks: int = 0, stop_reason: str | None = None
) -> None:
    """Which iteration each saved model dir comes from, with its held-out success and, where it was
    validated, its own validation success (``val``: iteration -> validation success)."""
    from rich.console import Console
    from rich.table import Table

    t = Table(title="saved models")
    for c in ("dir", "iteration", "held-out success", "note"):
        t.add_column(c)
    after, last = result.get("after") or {}, result.get("last") or {}
    val = val or {}

    def note(kind: str, it: int) -> str:
        return kind + (f" (validation success {val[it]:.3f})" if it in val else "")

    kind = "best by validation" if "model_last" in models else "last"
    t.add_row(
        "model/", str(models["model"]), f"{after.get('eval/success', float('nan')):.3f}", note(kind, models["model"])
    )
    if "model_last" in models:
        it = models["model_last"]
        t.add_row("model_last/", str(it), f"{last.get('eval/success', float('nan')):.3f}", note("last", it))
    Console().print(t)
    if rollbacks:
        print(
            f"guard: {rollbacks} rollback(s)" + (f"; stopped early: {stop_reason}" if stop_reason else ""), flush=True
        )

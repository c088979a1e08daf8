"""The end of a run: which model is delivered in ``model/``, and ``summary.json``.

With best-model selection (``guard.val_every``) the candidates are the start and every validated
iteration. The last model is delivered when its validation is within ``guard.select_margin_se``
standard errors of the best's (``Watchdog.deliver_last``), else the best; the other one is kept
as ``model_last/``. Without validation the last model is delivered.
"""

from __future__ import annotations

import json
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Delivery:
    iteration: int  # the iteration whose model is delivered in model/
    selection: str  # how it was chosen (summary.json)
    note: str | None = None  # printed when the last model replaces a better-validated one


def choose_delivered(watchdog, guard, last_it: int, n_val: int, stop_reason: str | None) -> Delivery:
    """The model to deliver; sets ``watchdog.best_iteration`` to it when the last one is chosen."""
    best_it = watchdog.best_iteration
    if not guard.val_every:
        return Delivery(last_it, "last (guard.val_every=0)")
    if best_it is None:
        return Delivery(last_it, "best by validation")
    if best_it != last_it and not stop_reason and watchdog.deliver_last(last_it, guard.select_margin_se, n_val):
        watchdog.best_iteration = last_it
        return Delivery(
            last_it,
            f"last, within guard.select_margin_se of the best (iteration {best_it})",
            f"validation: the last model ({watchdog.last_val[1]:.3f}) is within {guard.select_margin_se:g} "
            f"standard errors of the best (iteration {best_it}, {watchdog.best_val:.3f}); model/ is the last",
        )
    return Delivery(best_it, "best by validation")


def logged_line(run_dir: Path, tag: str) -> dict | None:
    """The first ``metrics.jsonl`` line tagged ``tag`` (a resumed run's start was evaluated earlier)."""
    path = Path(run_dir) / "metrics.jsonl"
    for line in path.read_text().splitlines() if path.exists() else ():
        if line.strip():
            x = json.loads(line)
            if x.get("tag") == tag:
                return x
    return None


def write_summary(run_dir: Path, trainer, result: dict, models: dict, selection: str) -> Path:
    """``summary.json``: start and final held-out success, which iteration each saved model is
    from, guard events, the start model's weights hash, wall time per phase."""
    from gigpo.train.evaluator import paired_change

    g = lambda k: (result.get(k) or {}).get("eval/success")  # noqa: E731
    before_m = result.get("before") or logged_line(run_dir, "eval_before") or {}
    before = before_m.get("eval/success")
    wd, val = trainer.watchdog, trainer.cfg.guard.val_every
    paired = paired_change(before_m, result.get("after") or {})
    out = {
        "start_model": str(trainer.model_path),
        "start_model_sha256": trainer.start_hash,
        "success_before": before,
        "success_final": g("after"),
        "success_last": g("last"),
        # paired standard error of success_final - success_before over the held-out tasks
        "success_change_se": paired[1] if paired else None,
        "models": models,
        "selection": selection,
        "best_val_success": wd.best_val if val and wd.best_val > float("-inf") else None,
        "rollbacks": wd.rollbacks,
        "stop_reason": trainer.stop_reason,
        "iterations": trainer.iteration,
        "phases": trainer.phase_times,
    }
    return write_json(Path(run_dir) / "summary.json", out)


def write_json(path: Path, obj) -> Path:
    Path(path).write_text(json.dumps(obj, indent=2, default=float))
    return Path(path)


def finish_run(trainer, result: dict) -> dict:
    """The end of ``Trainer.run``: deliver the chosen model (the best validated one or the last),
    evaluate it (and the last, when another is delivered, as ``eval_last`` in ``model_last/``),
    then the summary, phases and report."""
    from gigpo.train.checkpoint import best_checkpoint, load_checkpoint

    cfg, pt, last_it = trainer.cfg, trainer.phase_times, trainer.iteration
    chosen = choose_delivered(trainer.watchdog, cfg.guard, last_it, len(trainer.val_pool), trainer.stop_reason)
    if chosen.note:
        trainer._say(chosen.note)
    models = {"model": last_it}
    if chosen.iteration != last_it:
        result["last"] = trainer.evaluate("eval_last", **{"eval/model_iteration": last_it})
        trainer.save_model("model_last")
        best = best_checkpoint(trainer.run_dir)
        assert best is not None, "validation pinned the delivered model's checkpoint as best"
        trainer.models.load_weights(load_checkpoint(best)["model"])
        trainer.models.changed()
        models = {"model": chosen.iteration, "model_last": last_it}
    result["after"] = trainer.evaluate("eval_final", **{"eval/model_iteration": models["model"]})
    pt["eval_after"] = result["after"]["time/eval"]
    trainer.logger.close()
    path = trainer.save_model("model")
    if trainer.dist.is_main:
        write_run_end(trainer, result, models, chosen.selection, path)
    return result


def write_run_end(trainer, result: dict, models: dict, selection: str, model_path: Path) -> None:
    """Rank 0's end of a run: the before/after and saved-models tables, ``phases.json``,
    ``summary.json`` and the report (``model_last/`` removed when the last model is delivered)."""
    from gigpo.train.logging import print_eval_comparison, print_model_table

    run_dir, pt, wd = trainer.run_dir, trainer.phase_times, trainer.watchdog
    if "before" in result:
        print_eval_comparison(result["before"], result["after"])
    print_model_table(
        models, result, val=model_val(wd, models), rollbacks=wd.rollbacks, stop_reason=trainer.stop_reason
    )
    write_json(run_dir / "phases.json", pt)
    print("wall seconds per phase: " + ", ".join(f"{k} {v:.0f}" for k, v in pt.items()), flush=True)
    if "model_last" not in models and (run_dir / "model_last").exists():
        shutil.rmtree(run_dir / "model_last")
    write_summary(run_dir, trainer, result, models, selection)
    print(f"trained model: {model_path} (iteration {models['model']})", flush=True)
    write_report(run_dir)


def model_val(watchdog, models: dict) -> dict:
    """Validation success of each saved model that was validated: the best's and the last's, each
    its own (iteration -> success)."""
    out = {}
    if watchdog.best_iteration is not None and watchdog.best_val > float("-inf"):
        out[watchdog.best_iteration] = watchdog.best_val
    if watchdog.last_val is not None:
        it, success = watchdog.last_val
        out[int(it)] = success
    return {it: v for it, v in out.items() if it in models.values()}


def write_report(run_dir: Path) -> Path | None:
    """``gigpo.report.write_report(run_dir)``; a failure only warns (the run itself is done)."""
    try:
        from gigpo.report import write_report as write

        path = write(run_dir)
    except Exception as e:  # noqa: BLE001 - the report is a convenience, never fatal
        warnings.warn(f"report not written for {run_dir}: {type(e).__name__}: {e}", stacklevel=2)
        return None
    print(f"report: {path}", flush=True)
    return path

"""The ``gigpo`` command: ``train``, ``eval``, ``sft``, ``serve``, ``list`` (and ``report`` when
``gigpo.report`` exists).

    gigpo train [--config FILE] [--resume RUN_DIR] [key=value ...]
    gigpo eval  RUN_DIR [--out FILE] [key=value ...]      held-out evaluation of a run's delivered model
    gigpo eval  [--config FILE] [--out FILE] [key=value ...]  ... or of model.name_or_path
    gigpo sft   [--config FILE] [--out DIR] [key=value ...]
    gigpo serve [--config FILE] [--port N] [key=value ...]   a vLLM server for rollout.backend=server
    gigpo report RUN_DIR ...                             (dispatched to gigpo.report.main)
    gigpo list [families|estimators]                     env families and advantage estimators
    gigpo --version

Every ``key=value`` is a dotted config key (``algorithm.estimator=grpo train.lr=1e-5``); the full
list with types, defaults, ranges and descriptions, by section, is in each command's ``--help``
(one section: ``--help-section env``). ``--print-config`` prints the resolved config as YAML and
exits (the file ``--config`` reads back to the same config).

A user error (bad config, model path or checkpoint, a locked run dir, a full or read-only disk,
Ctrl-C) ends with one ``gigpo: ...`` line saying what to do; exit codes: 2 usage/config error,
1 runtime error, 130 interrupted. ``GIGPO_TRACEBACK=1`` shows the traceback instead.

``torchrun --nproc-per-node N -m gigpo.cli train ...`` trains on N processes
(``gigpo.learner.distributed``); each rank prefixes its error lines with ``[rank R]``.
"""

from __future__ import annotations

import argparse
import errno
import importlib.util
import os
import sys
import textwrap
from pathlib import Path

HELP_WIDTH = 100


class UsageError(Exception):
    """The command line itself is wrong (exit code 2)."""


# The run dir of the command in progress, for messages that tell the user how to resume.
_RUN_DIR: list[Path] = []


def _parser(cmd: str, desc: str) -> argparse.ArgumentParser:
    from gigpo.train.config import Config, help_text
    from gigpo.train.configtree import section_names

    p = argparse.ArgumentParser(
        prog=f"gigpo {cmd}",
        description=textwrap.fill(desc, HELP_WIDTH),
        formatter_class=lambda prog: argparse.RawDescriptionHelpFormatter(prog, width=HELP_WIDTH),
        epilog="config keys by section, set with key=value (one section: --help-section SECTION):\n\n" + help_text(),
    )
    p.add_argument("--config", help="YAML config file (see configs/)")
    p.add_argument(
        "--help-section",
        metavar="SECTION",
        help=f"show the config keys of one section and exit: {', '.join(section_names(Config))}",
    )
    p.add_argument(
        "--print-config", action="store_true", help="print the resolved config (YAML, readable by --config) and exit"
    )
    p.add_argument("overrides", nargs="*", metavar="key=value", help="dotted config overrides")
    return p


def _parse(p: argparse.ArgumentParser, argv):
    """The parsed arguments, or None when ``--help-section`` was answered. Options may come
    before, between or after the ``key=value`` overrides."""
    args = p.parse_intermixed_args(argv)
    if args.help_section is None:
        return args
    from gigpo.train.config import help_text

    print(help_text(args.help_section))
    return None


def _load(args):
    from gigpo.train.config import load_config

    return load_config(args.config, args.overrides)


def _print_config(cfg) -> int:
    from gigpo.train.config import config_yaml

    print(config_yaml(cfg), end="")
    return 0


def _threads(cfg) -> None:
    import torch

    os.environ.setdefault("OMP_NUM_THREADS", str(cfg.train.torch_threads))
    torch.set_num_threads(cfg.train.torch_threads)
    if not (cfg.log.progress and sys.stderr.isatty()):
        # transformers' "Loading weights" bars would fill a redirected stderr (a log file)
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()


def _dry_run(cfg, *, resume: bool) -> int:
    """``gigpo train --dry-run``: the run's checks, then the plan; nothing is written."""
    from gigpo.train.checks import check_run
    from gigpo.train.estimate import estimate_lines

    check_run(cfg, world_size=int(os.environ.get("WORLD_SIZE", "1")))
    e, t, g, a = cfg.env, cfg.train, cfg.guard, cfg.algorithm
    options = ", ".join(f"{k}={v}" for k, v in a.estimator_options().items()) or "defaults"
    episodes = t.iterations * e.tasks_per_iter * e.group_size
    n_val = (t.iterations // g.val_every + 1) * g.val_tasks if g.val_every else 0
    evals = e.eval_tasks * (1 + int(cfg.log.eval_before)) if e.eval_tasks else "every eval-split task, twice"
    sft = f", warm-started by SFT on {cfg.sft.episodes} expert episodes" if cfg.sft.enabled else ""
    lines = [
        f"run directory: {cfg.run_dir}" + (" (resumed)" if resume else " (a new run; an existing one is set aside)"),
        f"model: {cfg.model.name_or_path} on {cfg.model.device}{sft}",
        f"env: {e.family}, {e.tasks_per_iter} tasks x {e.group_size} rollouts an iteration, "
        f"at most {e.max_steps} steps",
        f"algorithm: {a.estimator} ({options}), anchor {a.anchor}",
        f"rollouts: {cfg.rollout.backend} backend; update: lr {t.lr}, autocast {t.autocast}",
        f"work: {t.iterations} iterations = {episodes} training episodes"
        + (" (more with dynamic sampling's extra rounds)" if t.dynamic_sampling else "")
        + f"; {evals} held-out and {n_val} validation episodes",
        *estimate_lines(cfg, resume=resume, n_val=n_val),
        "checks passed (config, model, device, env); nothing was written",
    ]
    print("\n".join(lines))
    return 0


def cmd_train(argv) -> int:
    p = _parser("train", "Train a policy with an advantage estimator (gigpo list estimators) on a text environment.")
    p.add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="continue the run in RUN_DIR from its last checkpoint "
        "(its config is used; key=value overrides still apply, except to run-defining keys)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="with --resume: allow changing run-defining keys "
        "(env.*, algorithm.estimator/mode, model.name_or_path, seed, sft.*); recorded in "
        "RUN_DIR/config_changes.jsonl (model.lora can never change: the checkpoint holds one kind of model)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="check everything a run checks before it starts (config, model, device, env, tasks), print "
        "what would run, how much work it is and how long it should take (from a like run's timings in "
        "output_dir), and exit without writing anything",
    )
    args = _parse(p, argv)
    if args is None:
        return 0
    if args.force and not args.resume:
        raise UsageError("--force only applies with --resume RUN_DIR")
    if args.resume:
        if args.config:
            raise UsageError("give either --config or --resume (a resumed run uses its own config.yaml)")
        run = Path(args.resume)
        cfg_path = next((run / n for n in ("config.resumed.yaml", "config.yaml") if (run / n).exists()), None)
        if cfg_path is None:
            raise UsageError(f"--resume {args.resume!r}: no config.yaml there; is it a run directory?")
        args.config = str(cfg_path)
        args.overrides = [f"output_dir={run.parent}", f"name={run.name}", *args.overrides]
    cfg = _load(args)
    if args.print_config:
        return _print_config(cfg)
    if args.dry_run:
        return _dry_run(cfg, resume=bool(args.resume))
    _threads(cfg)
    from gigpo.train.trainer import Trainer
    from gigpo.learner.update import TrainingDiverged

    _RUN_DIR[:] = [cfg.run_dir]
    trainer = Trainer(cfg, resume=bool(args.resume), force=args.force)
    try:
        trainer.run()
    except TrainingDiverged as e:
        print(f"gigpo: {_rank_prefix()}training stopped: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        from gigpo.train.checkpoint import latest_checkpoint

        ck = latest_checkpoint(cfg.run_dir)
        saved = (
            f" (last checkpoint: {ck.name})" if ck is not None and ck.name != f"iter_{trainer.iteration:06d}" else ""
        )
        print(
            f"\ngigpo: stopped at iteration {trainer.iteration}{saved}; resume with: gigpo train --resume "
            f"{cfg.run_dir}",
            file=sys.stderr,
        )
        return 130
    finally:
        trainer.close()
    if trainer.dist.is_main:
        print(f"run directory: {cfg.run_dir}")
    return 0


_START_ALIASES = ("tiny", "smollm2-135m")


def cmd_eval(argv) -> int:
    p = _parser(
        "eval",
        "Evaluate a model on the held-out (eval split) tasks: a run's delivered model "
        "(gigpo eval RUN_DIR: RUN_DIR/model with RUN_DIR's config; results also written to "
        "RUN_DIR/eval/<time>.json), or model.name_or_path of --config. The tasks and sampling seed are "
        "those of a run's held-out eval, so a run's model scores as its final eval did. The metrics go "
        "to stdout as JSON; the model scored is named on stderr and in the results file.",
    )
    p.usage = "gigpo eval [RUN_DIR | --config FILE] [--out FILE] [--tag TAG] [key=value ...]"
    p.add_argument("--out", metavar="FILE", help="also write the results (model, config, metrics) to FILE as JSON")
    p.add_argument("--tag", help="with RUN_DIR: the results file is RUN_DIR/eval/TAG.json (default: the date and time)")
    args = _parse(p, argv)
    if args is None:
        return 0
    run = None
    if args.overrides and "=" not in args.overrides[0] and (not args.config or Path(args.overrides[0]).is_dir()):
        run = Path(args.overrides.pop(0))
        if args.config:
            raise UsageError(f"give either RUN_DIR ({run}) or --config, not both (RUN_DIR uses its own config.yaml)")
        cfg_path = next((run / n for n in ("config.resumed.yaml", "config.yaml") if (run / n).is_file()), None)
        if cfg_path is None:
            raise UsageError(
                f"{str(run)!r} is not a run directory (no config.yaml there); give RUN_DIR or --config FILE"
            )
        if not (run / "model").is_dir():
            raise UsageError(
                f"{run} has no delivered model ({run / 'model'} does not exist: the run has not finished); "
                f"finish it with: gigpo train --resume {run}"
            )
        args.config = str(cfg_path)
        # The delivered model, not the run's start model; it is already fine-tuned, so no SFT.
        args.overrides = [f"model.name_or_path={run / 'model'}", "sft.enabled=false", *args.overrides]
    elif args.tag:
        raise UsageError("--tag names a results file in RUN_DIR/eval/; without RUN_DIR use --out FILE")
    if args.tag and (not args.tag.strip(". ") or any(c in args.tag for c in "/\\\0")):
        raise UsageError(f"--tag {args.tag!r}: give a plain name (no path separators); it names RUN_DIR/eval/TAG.json")
    cfg = _load(args)
    if args.print_config:
        return _print_config(cfg)
    _threads(cfg)
    from gigpo.train.checks import check_run

    check_run(cfg, train=False)  # model path, device, env and task counts: before anything is said or made
    # Where the results go, made before the evaluation: a bad --out must not cost an evaluation.
    out_dir = Path(args.out).parent if args.out else (run / "eval" if run is not None else None)
    if args.out and Path(args.out).is_dir():
        raise UsageError(f"--out {args.out}: is a directory; give a file name (e.g. {Path(args.out) / 'eval.json'})")
    if out_dir is not None:
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UsageError(
                f"cannot write the results under {out_dir}: {e.strerror} ({e.filename}); give --out FILE "
                "in a writable folder"
            ) from None
    import json

    from gigpo.train.evaluate import evaluate_model

    model = cfg.model.name_or_path
    overridden = any(o.startswith("model.name_or_path=") for o in args.overrides[2 if run is not None else 0 :])
    if run is not None and not overridden:
        what = f"the delivered model of {run}"
    else:
        what = f"model.name_or_path of {args.config or 'the defaults'}" + (" (overridden)" if overridden else "")
    tasks = cfg.env.eval_tasks or "all"
    print(f"gigpo eval: scoring {model} ({what}) on {tasks} {cfg.env.family} eval tasks", file=sys.stderr, flush=True)
    if run is None and cfg.sft.enabled and not overridden:
        start = "untrained start model" if model in _START_ALIASES else "start model"
        print(
            f"gigpo eval: warning: the config has sft.enabled=true, but gigpo eval does not run SFT: it scores "
            f"the {start} {model!r} as it is. To score a run's trained model: gigpo eval RUN_DIR "
            "(or model.name_or_path=RUN_DIR/model)",
            file=sys.stderr,
            flush=True,
        )
    m = evaluate_model(cfg, checked=True)
    n, failed = m.get("num_trajectories", 0), m.get("failed_rate", 0.0)
    if n and failed >= 1.0:
        print(
            f"gigpo: every one of the {n} eval episodes ended in an env fault (failed_rate 1.0), so nothing was "
            f"scored; the env errors are logged above (check env.* in {args.config or 'the config'})",
            file=sys.stderr,
        )
        return 1
    out = Path(args.out) if args.out else None
    if out is None and run is not None:
        import time

        stem = args.tag or time.strftime("%Y%m%d-%H%M%S")
        out = run / "eval" / f"{stem}.json"
        k = 1
        while out.exists() and not args.tag:
            k += 1
            out = run / "eval" / f"{stem}-{k}.json"
    print(json.dumps(m, indent=2))
    if out is not None:
        import time

        from gigpo.train.config import to_dict

        record = {
            "model": model,
            "run_dir": str(run) if run is not None else None,
            "config": args.config,
            "overrides": args.overrides,
            "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "env": {"family": cfg.env.family, "eval_tasks": cfg.env.eval_tasks, "task_seed": cfg.env.task_seed},
            "metrics": m,
            "resolved_config": to_dict(cfg),
        }
        tmp = out.with_name(f".{out.name}.tmp")
        tmp.write_text(json.dumps(record, indent=2, default=str) + "\n", encoding="utf-8")
        os.replace(tmp, out)
        print(f"gigpo eval: results written to {out}", file=sys.stderr)
    return 0


def cmd_sft(argv) -> int:
    p = _parser("sft", "Supervised warm start on expert demonstrations; saves an HF model dir.")
    p.add_argument("--out", help="output model dir (default: the cache dir keyed by the SFT config)")
    args = _parse(p, argv)
    if args is None:
        return 0
    cfg = _load(args)
    if args.print_config:
        return _print_config(cfg)
    _threads(cfg)
    from gigpo.train.sft import build_sft_dir, ensure_sft_model

    if args.out:
        out, stats = build_sft_dir(cfg, Path(args.out), progress=cfg.log.progress)
        print(f"SFT: {stats}" if stats is not None else f"SFT: {out} is already a complete model; remove it to rebuild")
        path = args.out
    else:
        path = ensure_sft_model(cfg, progress=cfg.log.progress)
    print(f"SFT model: {path}  (use model.name_or_path={path})")
    return 0


def cmd_serve(argv) -> int:
    p = _parser(
        "serve",
        "Start a vLLM server (from .venv-vllm, `make setup-vllm`) on 127.0.0.1 for the model a "
        "`gigpo train` with this config starts from; train against it with rollout.backend=server "
        "'rollout.server.urls=[http://127.0.0.1:PORT]' (docs/serving.md). Ctrl-C stops it.",
    )
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; rollout.server.port overrides)")
    args = _parse(p, argv)
    if args is None:
        return 0
    cfg = _load(args)
    if args.print_config:
        return _print_config(cfg)
    from gigpo.train.serving import serve

    return serve(cfg, port=args.port)


def _cmd_list(argv) -> int:
    """``gigpo list [families|estimators]``: what ``env.family`` and ``algorithm.estimator`` take."""
    p = argparse.ArgumentParser(
        prog="gigpo list",
        description="List the env families (built-in and installed plug-ins, entry point group "
        "gigpo.families) and the advantage estimators with their options.",
    )
    p.add_argument("what", nargs="?", choices=("families", "estimators"), help="only one of the two lists")
    args = p.parse_args(argv)
    if args.what != "estimators":
        import warnings

        from gigpo.envs import broken_plugins, families, family_origin

        with warnings.catch_warnings():  # a broken plug-in is listed below instead
            warnings.simplefilter("ignore", RuntimeWarning)
            specs, broken = families(), broken_plugins()
        print("env families (env.family):")
        w = max(map(len, specs))
        for name, spec in specs.items():
            origin = family_origin(name)
            kind = origin if origin == "built-in" else f"plug-in, {origin}"
            print(f"  {name:<{w}}  {kind}\n  {'':<{w}}  module {spec.module}: {spec.system_prompt}")
        for name, err in broken.items():
            print(f"  {name:<{w}}  plug-in, BROKEN (not loaded): {err}")
    if args.what is None:
        print()
    if args.what != "families":
        from gigpo.advantages import ALIASES, ESTIMATORS, estimator_options, needs_values

        print(
            "advantage estimators (algorithm.estimator; the shared options are keys algorithm.<option>, "
            "the others algorithm.options.<option>):"
        )
        w = max(map(len, ESTIMATORS))
        for name in ESTIMATORS:
            opts = " ".join(f"{k}={v!r}" for k, v in estimator_options(name).items()) or "(no options)"
            also = [a for a, n in ALIASES.items() if n == name]
            notes = f"  [alias {', '.join(also)}]" if also else ""
            notes += "  [learned critic]" if needs_values(name) else ""
            print(f"  {name:<{w}}  {opts}{notes}")
    return 0


def _usage() -> str:
    """The top-level help; the estimator and family names come from their registries."""
    from gigpo.advantages import ESTIMATORS
    from gigpo.envs import builtin_families

    return (
        "usage: gigpo {train,eval,sft,serve,report,list} ...\n"
        f"  train   train a policy (estimators: {', '.join(ESTIMATORS)};\n"
        f"          env families: {', '.join(builtin_families())}, and plug-ins)\n"
        "  eval    evaluate a model on held-out tasks\n"
        "  sft     supervised warm start on expert demonstrations\n"
        "  serve   start a vLLM server for a config's model (rollout.backend=server)\n"
        "  report  summarise a run directory\n"
        "  list    the env families (built-in and installed plug-ins) and estimators with their options\n"
        "Run 'gigpo <command> --help' for options and every config key; 'gigpo --version' for the version."
    )


COMMANDS = {"train": cmd_train, "eval": cmd_eval, "sft": cmd_sft, "serve": cmd_serve, "list": _cmd_list}


def _plain_warnings() -> None:
    """gigpo's own warnings (a plug-in skipped, say) print as their one line, without Python's
    ``file:line: Category:`` prefix and the echoed source line."""
    import warnings

    shown = warnings.showwarning
    if getattr(shown, "gigpo", False):
        return

    def show(message, category, filename, lineno, file=None, line=None):
        if str(message).startswith("gigpo:"):
            print(message, file=file or sys.stderr)
        else:
            shown(message, category, filename, lineno, file, line)

    show.gigpo = True  # type: ignore[attr-defined]
    warnings.showwarning = show


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    _plain_warnings()
    usage = _usage()
    if not argv:
        print(usage, file=sys.stderr)
        return 2
    if argv[0] in ("-h", "--help"):
        print(usage)
        return 0
    if argv[0] in ("-V", "--version"):
        from gigpo import __version__

        print(f"gigpo {__version__}")
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd == "report":
        if importlib.util.find_spec("gigpo.report") is None:
            sys.exit("gigpo: 'report' is not available in this installation (no gigpo.report module)")
        from gigpo import report

        return report.main(rest) or 0
    if cmd not in COMMANDS:
        import difflib

        close = difflib.get_close_matches(cmd, [*COMMANDS, "report"], n=1)
        print(
            f"gigpo: unknown command {cmd!r}." + (f" Did you mean {close[0]!r}?" if close else "") + "\n" + usage,
            file=sys.stderr,
        )
        return 2
    if os.environ.get("GIGPO_TRACEBACK"):
        return COMMANDS[cmd](rest) or 0
    try:
        code = COMMANDS[cmd](rest) or 0
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        return code
    except BrokenPipeError:  # `gigpo list | head`: the reader has all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's flush is quiet
        return 141  # as a shell reports a SIGPIPE'd command
    except BaseException as e:  # noqa: BLE001 - _user_error re-raises what it does not know
        code, msg = _user_error(e)
        print(f"gigpo: {_rank_prefix()}{msg}", file=sys.stderr)
        return code


def _rank_prefix() -> str:
    """``[rank N] `` in a job of more than one process (torchrun), where every rank reports its
    own errors; '' otherwise."""
    return f"[rank {os.environ.get('RANK', '?')}] " if int(os.environ.get("WORLD_SIZE", "1")) > 1 else ""


def _user_error(e: BaseException) -> tuple[int, str]:
    """(exit code, one line) for an error the user can fix; re-raises anything else."""
    import yaml

    from gigpo.train.checkpoint import CheckpointError
    from gigpo.train.collect import RunStopped
    from gigpo.train.config import ConfigError
    from gigpo.train.rundir import RunDirLocked
    from gigpo.train.build import TinyCorpusError
    from gigpo.train.sft import SFTError

    from gigpo.train.checkpoint import latest_checkpoint

    try:  # the run dir itself may be what failed (ENOTDIR, ENAMETOOLONG): no hint then
        resumable = bool(_RUN_DIR) and latest_checkpoint(_RUN_DIR[0]) is not None
    except OSError:
        resumable = False
    resume = f"; then continue with: gigpo train --resume {_RUN_DIR[0]}" if resumable else ""
    if isinstance(e, KeyboardInterrupt):
        return 130, "interrupted" + (f" (resume with: gigpo train --resume {_RUN_DIR[0]})" if resumable else "")
    if isinstance(e, UsageError):
        return 2, str(e)
    if isinstance(e, ConfigError):
        return 2, f"config error: {e}"
    if isinstance(e, yaml.YAMLError):
        return 2, f"config file is not valid YAML: {' '.join(str(e).split())}"
    if isinstance(e, CheckpointError):
        return 1, f"checkpoint error: {e}"
    if isinstance(e, (RunDirLocked, SFTError, RunStopped, TinyCorpusError)):
        return 1, str(e)
    from gigpo.train.serving import LaunchError, ServerError

    if isinstance(e, (ServerError, LaunchError)):
        return 1, f"{e}{resume}"
    if (isinstance(e, OSError) and e.errno == errno.ENOSPC) or "No space left on device (os error 28)" in str(e):
        # the second: safetensors' SafetensorError from a writer gigpo.policy.cache does not wrap
        return 1, f"disk full while writing {getattr(e, 'filename', None) or 'the run'}: free some space{resume}"
    if isinstance(e, OSError) and e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        what = "read-only file system" if e.errno == errno.EROFS else "permission denied"
        return 1, (
            f"cannot write {e.filename or 'the output'} ({what}): choose a writable output_dir=... "
            "(or fix the permissions)"
        )
    if isinstance(e, OSError) and e.errno in (errno.ENOTDIR, errno.ENAMETOOLONG):
        what = "a part of it is a file, not a directory" if e.errno == errno.ENOTDIR else "the name is too long"
        return 2, f"cannot create {e.filename or 'the output'} ({what}): choose another output_dir=... or name=..."
    torch = sys.modules.get("torch")  # loaded by then when it ran out of device memory
    # torch's CPU allocator raises a plain RuntimeError ("DefaultCPUAllocator: can't allocate memory")
    cpu_oom = isinstance(e, RuntimeError) and "can't allocate memory" in str(e)
    if isinstance(e, MemoryError) or cpu_oom or (torch is not None and isinstance(e, torch.OutOfMemoryError)):
        return 1, (
            f"out of memory ({type(e).__name__}): lower env.tasks_per_iter, env.group_size or "
            f"rollout.max_response_tokens, or use a smaller model{resume}"
        )
    if isinstance(e, FileNotFoundError):
        return 2, str(e)
    raise e


if __name__ == "__main__":
    sys.exit(main())

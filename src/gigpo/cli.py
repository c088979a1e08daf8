"""The ``gigpo`` command: ``train``, ``eval``, ``sft`` (and ``report`` when ``gigpo.report`` exists).

    gigpo train [--config FILE] [--resume RUN_DIR] [key=value ...]
    gigpo eval  [--config FILE] [key=value ...]          held-out evaluation of model.name_or_path
    gigpo sft   [--config FILE] [--out DIR] [key=value ...]
    gigpo report RUN_DIR ...                             (dispatched to gigpo.report.main)

Every ``key=value`` is a dotted config key (``algorithm.estimator=grpo train.lr=1e-5``); the full
list with types, defaults and descriptions is in each command's ``--help``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path


def _parser(cmd: str, desc: str) -> argparse.ArgumentParser:
    from gigpo.train.config import help_text

    p = argparse.ArgumentParser(prog=f"gigpo {cmd}", description=desc,
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="config keys (set with key=value):\n" + help_text())
    p.add_argument("--config", help="YAML config file (see configs/)")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="dotted config overrides")
    return p


def _load(args):
    from gigpo.train.config import ConfigError, load_config

    try:
        return load_config(args.config, args.overrides)
    except ConfigError as e:
        sys.exit(f"gigpo: config error: {e}")


def _threads(cfg) -> None:
    import torch

    os.environ.setdefault("OMP_NUM_THREADS", str(cfg.train.torch_threads))
    torch.set_num_threads(cfg.train.torch_threads)


def cmd_train(argv) -> int:
    p = _parser("train", "Train a policy with GiGPO (or GRPO/RLOO) on a text environment.")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its last checkpoint "
                   "(its config.yaml is used; key=value overrides still apply)")
    args = p.parse_args(argv)
    if args.resume:
        if args.config:
            sys.exit("gigpo: give either --config or --resume (a resumed run uses its own config.yaml)")
        cfg_path = Path(args.resume) / "config.yaml"
        if not cfg_path.exists():
            sys.exit(f"gigpo: --resume {args.resume!r}: no config.yaml there; is it a run directory?")
        args.config = str(cfg_path)
        run = Path(args.resume)
        args.overrides = [f"output_dir={run.parent}", f"name={run.name}", *args.overrides]
    cfg = _load(args)
    _threads(cfg)
    from gigpo.train.trainer import Trainer
    from gigpo.train.update import TrainingDiverged

    trainer = Trainer(cfg, resume=bool(args.resume))
    try:
        trainer.run()
    except TrainingDiverged as e:
        sys.exit(f"gigpo: training stopped: {e}")
    finally:
        trainer.close()
    print(f"run directory: {cfg.run_dir}")
    return 0


def cmd_eval(argv) -> int:
    p = _parser("eval", "Evaluate model.name_or_path on the held-out (eval split) tasks.")
    args = p.parse_args(argv)
    cfg = _load(args)
    _threads(cfg)
    import json

    from gigpo.envs import make_tasks
    from gigpo.envs.manager import GroupedEnvs
    from gigpo.policy.base import SamplingParams
    from gigpo.policy.generate import HFGenerator
    from gigpo.policy.load import load_policy
    from gigpo.rollout import eval_rollout
    from gigpo.train.config import build_agent

    model, tok = load_policy(cfg.model.name_or_path, device=cfg.model.device, dtype=cfg.model.dtype,
                             cache_dir=cfg.model.cache_dir or None, seed=cfg.seed)
    e = cfg.env
    tasks = make_tasks(e.family, "eval", n=e.eval_tasks or None, seed=e.task_seed, **e.task_kwargs)
    envs = GroupedEnvs(e.family, group_size=1, max_steps=e.max_steps, env_kwargs=e.kwargs, executor=e.executor)
    agent = build_agent(cfg, tok)
    params = SamplingParams(temperature=cfg.rollout.eval_temperature, top_p=cfg.rollout.top_p,
                            max_new_tokens=cfg.rollout.max_response_tokens, seed=cfg.seed)
    _, m = eval_rollout(envs, tasks, HFGenerator(model, tok), tok, agent, params)
    print(json.dumps(m, indent=2))
    return 0


def cmd_sft(argv) -> int:
    p = _parser("sft", "Supervised warm start on expert demonstrations; saves an HF model dir.")
    p.add_argument("--out", help="output model dir (default: the cache dir keyed by the SFT config)")
    args = p.parse_args(argv)
    cfg = _load(args)
    _threads(cfg)
    from gigpo.train.sft import ensure_sft_model, run_sft

    if args.out:
        stats = run_sft(cfg, Path(args.out), progress=cfg.log.progress)
        print(f"SFT: {stats}")
        path = args.out
    else:
        path = ensure_sft_model(cfg, progress=cfg.log.progress)
    print(f"SFT model: {path}  (use model.name_or_path={path})")
    return 0


COMMANDS = {"train": cmd_train, "eval": cmd_eval, "sft": cmd_sft}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    usage = ("usage: gigpo {train,eval,sft,report} ...\n"
             "  train   train a policy (GiGPO / GRPO / RLOO)\n"
             "  eval    evaluate a model on held-out tasks\n"
             "  sft     supervised warm start on expert demonstrations\n"
             "  report  summarise a run directory\n"
             "Run 'gigpo <command> --help' for options.")
    if not argv or argv[0] in ("-h", "--help"):
        print(usage)
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
        sys.exit(f"gigpo: unknown command {cmd!r}." + (f" Did you mean {close[0]!r}?" if close else "") + "\n" + usage)
    return COMMANDS[cmd](rest) or 0


if __name__ == "__main__":
    sys.exit(main())

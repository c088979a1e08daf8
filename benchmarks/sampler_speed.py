"""Episodes per second of an iteration's rollout, the plain decode loop against the sampler's fast path.

One config's training rollout (its env, agent, sampling settings and tasks per iteration, e.g. 32
rooms x 8 rollouts for the reference's Sokoban budget), sampled by ``HFGenerator`` twice per
repeat, alternating: ``share_prompts=False, preallocate=False`` (the plain loop: every prompt
prefilled, the KV cache grown by concatenation) and the defaults (each distinct prompt prefilled
once, the cache written in place). Same seed, so both sample the same episodes: the script checks
that every row's tokens agree and prints the largest log-prob difference. With
``rollout.jump_forward=true`` a third variant, the fast path that also writes each response's
forced tail without the model (``HFGenerator(jump_forward=True)``; the other two sample it token
by token), samples other episodes of the same distribution. Prints episodes/s, env steps/s and
generated tokens/s of each, the speed-up, and the share of rows whose prompt was a repeat within
its step's batch.

    OMP_NUM_THREADS=1 python benchmarks/sampler_speed.py --config configs/sokoban_tiny.yaml \\
        --model DIR env.tasks_per_iter=32

``--model``: the policy to sample with (an SFT start is what a run samples with; default the
config's ``model.name_or_path``). Overrides (``key=value``) apply to the config.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from gigpo.policy import HFGenerator, load_policy  # noqa: E402
from gigpo.rollout import rollout  # noqa: E402
from gigpo.train.config import load_config  # noqa: E402
from gigpo.train.factories import build_agent, grouped_envs, load_kwargs, task_pools  # noqa: E402
from gigpo.train.collect import sampling_params  # noqa: E402


def cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def repeated_share(batch) -> float:
    """Share of rows whose prompt already occurred in the same step's batch."""
    seen, rep = set(), 0
    for t, ids in zip(batch.step.tolist(), batch.prompt_ids):
        key = (t, ids.tobytes())
        rep += key in seen
        seen.add(key)
    return rep / max(batch.num_rows, 1)


def rollout_setup(args):
    """``(cfg, model, tokenizer, agent, tasks, sampling params)`` of one training iteration's rollout
    of ``args.config`` with ``args.overrides``, sampled by ``args.model`` when given."""
    cfg = load_config(args.config, args.overrides + ([f"model.name_or_path={args.model}"] if args.model else []))
    torch.set_num_threads(cfg.train.torch_threads)
    model, tok = load_policy(cfg.model.name_or_path, **load_kwargs(cfg))
    model.eval()
    agent = build_agent(cfg, tok)
    tasks = task_pools(cfg)[0][: cfg.env.tasks_per_iter]
    return cfg, model, tok, agent, tasks, sampling_params(cfg, cfg.rollout.temperature, cfg.seed)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="configs/sokoban_tiny.yaml")
    ap.add_argument("--model", default="", help="policy to sample with (default: the config's model)")
    ap.add_argument("--repeats", type=int, default=2, help="rollouts per variant (the best is kept)")
    ap.add_argument("overrides", nargs="*", help="config overrides, e.g. env.tasks_per_iter=32")
    args = ap.parse_args(argv)
    cfg, model, tok, agent, tasks, params = rollout_setup(args)
    variants = {
        "plain loop": HFGenerator(model, tok, share_prompts=False, preallocate=False, jump_forward=False),
        "shared prompts + preallocated cache": HFGenerator(model, tok, jump_forward=False),
    }
    if cfg.rollout.jump_forward:
        variants["... + jump-forward"] = HFGenerator(model, tok)
    best: dict[str, float] = {}
    batches: dict = {}
    with grouped_envs(cfg.env, cfg.env.group_size) as envs:
        rollout(envs, tasks[:1], variants["plain loop"], tok, agent, params, max_steps=1)  # build envs, warm up
        for _ in range(args.repeats):
            for name, gen in variants.items():
                t0 = time.perf_counter()
                batches[name] = rollout(envs, tasks, gen, tok, agent, params)
                best[name] = min(best.get(name, float("inf")), time.perf_counter() - t0)
    a, b = list(batches.values())[:2]
    same = a.num_rows == b.num_rows and all(np.array_equal(x, y) for x, y in zip(a.response_ids, b.response_ids))
    dlp = max((float(np.abs(x - y).max(initial=0)) for x, y in zip(a.logprobs, b.logprobs)), default=0.0)
    episodes = len(tasks) * cfg.env.group_size
    print(
        f"{cpu_model()}, torch {torch.__version__}, {torch.get_num_threads()} thread(s); {args.config}: "
        f"{len(tasks)} tasks x {cfg.env.group_size} rollouts, up to {cfg.env.max_steps} steps, "
        f"{a.num_rows} env steps, {a.meta['generated_tokens']} tokens, "
        f"{100 * repeated_share(a):.0f} % of rows with a prompt repeated in their step's batch"
    )
    print(f"same episodes: {'yes' if same else 'NO'} (largest log-prob difference {dlp:.1e})")
    print("| sampler | rollout | episodes/s | env steps/s | tokens/s | speed-up |")
    print("|---|---|---|---|---|---|")
    base = best["plain loop"]
    for name, secs in best.items():
        tokens = batches[name].meta["generated_tokens"]
        print(
            f"| {name} | {secs:.1f} s | {episodes / secs:.2f} | {batches[name].num_rows / secs:.1f} | "
            f"{tokens / secs:.0f} | {base / secs:.2f}x |"
        )
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())

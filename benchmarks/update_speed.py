"""Seconds of one iteration's policy update, rows shuffled against rows kept by prompt with shared prefixes.

Rolls out one training iteration of a config (e.g. 32 rooms x 8 rollouts, the reference's Sokoban
budget), computes its advantages as training does, then runs the update on those rows from the
same weights once per variant:

- ``shuffled``: ``train.mini_batch_order=shuffled``, every row one pass (the plain update);
- ``by_prompt``: rows of a prompt in one mini-batch, still one pass per row;
- ``by_prompt + share_prefix``: the same mini-batches, each shared prompt prefix run once;
- ``... + eager``: and ``train.update_attention=eager``.

The last three take the same optimizer steps on the same rows: the script prints the largest
difference of their losses and of their weights after the update. Prints seconds, rows per second
the speed-up over ``shuffled``, and the episodes per second of an iteration (the rollout's
seconds plus the update's).

    OMP_NUM_THREADS=1 python benchmarks/update_speed.py --model SFT_DIR env.tasks_per_iter=32

``--model``: the policy (an SFT start: a from-scratch model's rollouts end at once). Overrides
(``key=value``) apply to the config.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from sampler_speed import cpu_model, rollout_setup  # noqa: E402

from gigpo.learner.update import PolicyUpdater  # noqa: E402
from gigpo.policy import HFGenerator  # noqa: E402
from gigpo.rollout import rollout  # noqa: E402
from gigpo.train.credit import batch_credit, update_rows  # noqa: E402
from gigpo.train.factories import grouped_envs  # noqa: E402

VARIANTS = {
    "shuffled": {"mini_batch_order": "shuffled", "share_prefix": False},
    "by_prompt": {"mini_batch_order": "by_prompt", "share_prefix": False},
    "by_prompt + share_prefix": {"mini_batch_order": "by_prompt", "share_prefix": True},
    "by_prompt + share_prefix + eager": {
        "mini_batch_order": "by_prompt",
        "share_prefix": True,
        "update_attention": "eager",
    },
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="configs/sokoban_tiny.yaml")
    ap.add_argument("--model", default="", help="policy to roll out and update (default: the config's model)")
    ap.add_argument("overrides", nargs="*", help="config overrides, e.g. env.tasks_per_iter=32")
    args = ap.parse_args(argv)
    cfg, model, tok, agent, tasks, params = rollout_setup(args)
    with grouped_envs(cfg.env, cfg.env.group_size) as envs:
        t0 = time.perf_counter()
        batch = rollout(envs, tasks, HFGenerator(model, tok), tok, agent, params)
        t_roll = time.perf_counter() - t0
    rows = update_rows(batch, batch_credit(cfg, batch).result, cfg.train.skip_zero_advantage_rows)
    prompts = {np.asarray(p).tobytes() for p in rows.prompts}
    start = copy.deepcopy(model.state_dict())
    secs, outs, weights = {}, {}, {}
    for name, over in VARIANTS.items():
        model.load_state_dict(start)
        train = dataclasses.replace(cfg.train, **over)
        up = PolicyUpdater(model, train, pad_token_id=tok.pad_token_id, temperature=params.temperature)
        t0 = time.perf_counter()
        r = rows
        outs[name] = up.update(r.prompts, r.responses, r.advantages, r.sampled_logprobs, allowed=r.allowed)
        secs[name] = time.perf_counter() - t0
        weights[name] = [p.detach().clone() for p in model.parameters()]
    a, b = outs["by_prompt"], outs["by_prompt + share_prefix"]
    dw = max(float((x - y).abs().max()) for x, y in zip(weights["by_prompt"], weights["by_prompt + share_prefix"]))
    print(
        f"{cpu_model()}, torch {torch.__version__}, {torch.get_num_threads()} thread(s); {args.config}: "
        f"{len(tasks)} tasks x {cfg.env.group_size} rollouts, rollout {t_roll:.1f} s; {len(rows)} update rows, "
        f"{a['distinct_rows']} after merging repeats, {len(prompts)} distinct prompts, "
        f"{a['optimizer_steps']} optimizer steps"
    )
    print(
        f"by_prompt with and without shared prefixes: loss differs by {abs(a['loss'] - b['loss']):.1e}, "
        f"weights after the update by at most {dw:.1e}"
    )
    episodes = len(tasks) * cfg.env.group_size
    print("| update | seconds | rows/s | speed-up | iteration (rollout + update) episodes/s |")
    print("|---|---|---|---|---|")
    for name, s in secs.items():
        it = t_roll + s
        print(f"| {name} | {s:.1f} | {len(rows) / s:.0f} | {secs['shuffled'] / s:.2f}x | {episodes / it:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

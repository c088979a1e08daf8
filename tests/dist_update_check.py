"""One policy update of `tiny` on N processes against the same update on one process.

Launched by tests/test_distributed.py as ``torchrun --nproc-per-node 2 tests/dist_update_check.py
OUT.json MODE[,MODE...] AGG[,AGG...]``. For each (mode, loss_agg_mode): every rank loads the same
`tiny`, runs ``PolicyUpdater.update`` (two optimizer steps of several micro-batches each) on the
same synthetic rows under ``Dist`` (DDP or FSDP2), then rank 0 runs the same update on a fresh
model in one process and writes both results (parameter difference, metrics, world size) to
OUT.json.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import torch
import torch.distributed as dist_

from gigpo.policy.load import load_policy
from gigpo.train.config import TrainConfig
from gigpo.learner.distributed import Dist
from gigpo.learner.update import PolicyUpdater, batched_logprobs

ROWS = 14  # not a multiple of the world size, so ranks hold unequal shares


def batch(tokenizer, model):
    rng = np.random.default_rng(0)
    vocab = len(tokenizer)
    prompts = [rng.integers(5, vocab, size=int(rng.integers(8, 40))) for _ in range(ROWS)]
    responses = [rng.integers(5, vocab, size=int(rng.integers(2, 14))) for _ in range(ROWS)]
    adv = rng.normal(size=ROWS).astype(np.float32)
    lp = batched_logprobs(
        model, prompts, responses, pad_token_id=tokenizer.pad_token_id, temperature=1.0, token_budget=4096
    )
    # Old log-probs a little off the current policy, so ratios differ from 1 and some clip.
    old = [x + rng.normal(scale=0.3, size=len(x)).astype(np.float32) for x in lp]
    ref = [x + rng.normal(scale=0.1, size=len(x)).astype(np.float32) for x in lp]
    return prompts, responses, adv, old, ref


def update(dist: Dist, agg: str):
    torch.manual_seed(0)
    model, tok = load_policy("tiny", device="cpu", dtype="float32", seed=0)
    rows = batch(tok, model)
    cfg = TrainConfig(
        lr=1e-3,
        mini_batch_rows=7,  # two optimizer steps
        micro_token_budget=96,  # several micro-batches per step, a different split per rank
        pad_multiple=1,
        loss_agg_mode=agg,
        entropy_coef=0.01,
        kl_coef=0.1,
    )
    up = PolicyUpdater(model, cfg, pad_token_id=tok.pad_token_id, dist=dist)
    m = up.update(*rows[:4], rows[4], seed=1)
    state = dist.full_model_state(model)
    return state, m


def main() -> None:
    out, modes, aggs = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(",")
    torch.set_num_threads(1)
    results = {}
    for mode in modes:
        dist = Dist.from_env(mode, "cpu")
        for agg in aggs:
            state, m = update(dist, agg)
            if dist.is_main:
                ref_state, ref_m = update(Dist.single(), agg)
                start, _ = load_policy("tiny", device="cpu", dtype="float32", seed=0)
                start_state = start.state_dict()
                diff = max(float((state[k] - ref_state[k]).abs().max()) for k in ref_state)
                moved = max(float((ref_state[k] - start_state[k]).abs().max()) for k in ref_state)
                results[f"{mode}/{agg}"] = {
                    "world": dist.world,
                    "backend": dist_.get_backend(),
                    "max_param_diff": diff,
                    "max_param_change": moved,
                    "metrics": m,
                    "single_metrics": ref_m,
                }
            dist.barrier()
    if dist.is_main:
        with open(out, "w") as f:
            json.dump(results, f, indent=1)
    dist_.destroy_process_group()


if __name__ == "__main__":
    main()

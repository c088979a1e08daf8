"""How far does ``train.autocast=bf16`` move the policy gradient, per advantage estimator?

Samples one real rollout batch with the config's agent, computes every estimator's advantages on
it, and for each estimator takes the PPO loss gradient of the same first mini-batch of A != 0
rows (ratio against the sampler's log-probs, as the update's first step) twice: float32 and
under bf16 autocast. Prints the cosine between the two gradients and the relative error
|g_bf16 - g_fp32| / |g_fp32|. A precision effect that is specific to one estimator (say, GiGPO's
step advantages cancelling within anchor-state groups) would show as a lower cosine for it.

    OMP_NUM_THREADS=1 python research/experiments/autocast_gradient.py --model /path/to/sft_model
    python research/experiments/autocast_gradient.py --model tiny --tasks 1 --max-steps 3      # smoke run
"""

from __future__ import annotations

import argparse
import os
import tempfile

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

# (estimator, mode) pairs; gigpo_no_step is GRPO exactly under mean_std_norm, so it is left out.
VARIANTS = [("gigpo", "mean_std_norm"), ("gigpo", "mean_norm"), ("grpo", "mean_std_norm"),
            ("rloo", "mean_std_norm"), ("gigpo_no_episode", "mean_std_norm")]


def policy_gradient(model, batch, rows, adv, *, mode: str, pad_token_id: int, temperature: float) -> torch.Tensor:
    """The flattened gradient (float64) of the PPO loss over ``rows`` under autocast ``mode``."""
    from gigpo.learner.logprobs import token_logprobs
    from gigpo.learner.loss import actor_loss
    from gigpo.learner.update import _pad, autocast_context

    model.zero_grad(set_to_none=True)
    with autocast_context(model, mode):
        lp, _, mask = token_logprobs(model, [batch.prompt_ids[i] for i in rows], [batch.response_ids[i] for i in rows],
                                     pad_token_id=pad_token_id, temperature=temperature,
                                     allowed=[batch.allowed[i] for i in rows] if batch.allowed is not None else None)
    old = _pad(batch.logprobs, rows, lp.shape[1], lp.device)  # as the update pads old log-probs
    loss, _ = actor_loss(lp, old, torch.as_tensor(adv[rows], dtype=torch.float32), mask)
    loss.backward()
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]).double()


def compare(g32: torch.Tensor, g16: torch.Tensor) -> tuple[float, float]:
    """(cosine, relative error) of the bf16 gradient against the float32 one."""
    n32 = float(g32.norm())
    if n32 == 0.0:
        return float("nan"), float("nan")
    return float(g32 @ g16) / (n32 * float(g16.norm())), float((g32 - g16).norm()) / n32


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default="configs/alfworld_tiny.yaml", help="agent, env and sampling settings")
    p.add_argument("--model", required=True, help="model dir or alias (e.g. the SFT cache dir)")
    p.add_argument("--tasks", type=int, default=4, help="training tasks in the batch (x the config's group size)")
    p.add_argument("--max-steps", type=int, default=None, help="steps per episode (default: the config's)")
    p.add_argument("--rows", type=int, default=None, help="rows per gradient (default: train.mini_batch_rows)")
    p.add_argument("--seed", type=int, default=0, help="task and sampling seed")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    args = p.parse_args(argv)

    from gigpo.rollout import rollout
    from gigpo.train.config import load_config
    from gigpo.train.collect import sample_tasks, sampling_params
    from gigpo.train.credit import batch_credit, row_anchors
    from gigpo.train.seeds import iteration_seed
    from gigpo.train.trainer import Trainer

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as out:
        over = [f"model.name_or_path={args.model}", "sft.enabled=false", f"output_dir={out}", "name=autocast",
                "train.torch_threads=1", f"env.tasks_per_iter={args.tasks}", "log.tensorboard=false",
                "log.progress=false", f"seed={args.seed}"]
        if args.max_steps:
            over.append(f"env.max_steps={args.max_steps}")
        cfg = load_config(args.config, list(args.overrides) + over)
        tr = Trainer(cfg)
        tr.model.eval()  # no dropout: both precisions see the same network
        batch = rollout(tr.envs, sample_tasks(cfg, tr.train_pool, 1), tr.generator, tr.tokenizer, tr.agent,
                        sampling_params(cfg, cfg.rollout.temperature, iteration_seed(cfg.seed, 1, 2)))
        tr.close()
        n_rows = args.rows or cfg.train.mini_batch_rows
        print(f"{args.model}: {batch.num_rows} rows from {args.tasks} tasks x {cfg.env.group_size} rollouts; "
              f"gradient over the first {n_rows} rows with A != 0")
        print(f"{'estimator':18s} {'mode':14s} {'rows':>4s} {'|g| fp32':>9s} {'cos(fp32,bf16)':>15s} {'rel err':>8s}")
        results = []
        for est, mode in VARIANTS:
            tr.cfg.algorithm.estimator, tr.cfg.algorithm.mode = est, mode
            res = batch_credit(cfg, batch).result
            adv = np.asarray(res.advantages, dtype=np.float32)
            rows = np.flatnonzero(np.abs(adv) > 1e-8)[:n_rows]
            if len(rows) == 0:
                print(f"{est:18s} {mode:14s} {0:4d}  no row with A != 0 (every group tied)")
                continue
            kw = dict(pad_token_id=tr.tokenizer.pad_token_id, temperature=cfg.rollout.temperature)
            g32 = policy_gradient(tr.model, batch, rows, adv, mode="none", **kw)
            g16 = policy_gradient(tr.model, batch, rows, adv, mode="bf16", **kw)
            cos, rel = compare(g32, g16)
            results.append({"estimator": est, "mode": mode, "rows": len(rows), "norm": float(g32.norm()),
                            "cos": cos, "rel_err": rel})
            print(f"{est:18s} {mode:14s} {len(rows):4d} {float(g32.norm()):9.4f} {cos:15.5f} {rel:8.4f}", flush=True)
    return results


if __name__ == "__main__":
    main()

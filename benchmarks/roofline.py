"""Roofline of one training iteration: each phase's measured rate beside this CPU's limit for it.

The limit is measured in the same run: the fastest of the model's own matmul shapes (MLP up and
down, LM head) at the phase's rows (2,048 for prefill and update, the batch for a decode step), at
the dtype the phase runs in (float32; bf16 too where the CPU has it natively, as
``train.autocast=auto`` picks). A phase's model FLOPs are 2 x (non-embedding parameters + the LM
head where it runs) per token, plus attention over the context; the update's forward and backward
count 3x the forward. Each model phase is timed at batch 1 and at the full batch: the fit
``time = fixed + per_row x rows`` splits a call's time into what does not grow with the batch
(Python, dispatch, cache bookkeeping) and what does (arithmetic, memory). Env steps and the
advantage have no FLOP limit; they are shown in time per step / per row.

    OMP_NUM_THREADS=1 python benchmarks/roofline.py                    # tiny and smollm2-135m
    OMP_NUM_THREADS=1 python benchmarks/roofline.py --models tiny --quick
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from env_throughput import cpu_model, run_policy  # noqa: E402

from gigpo.advantages import compute_advantages, discounted_returns, episode_scores  # noqa: E402
from gigpo.envs import make_tasks  # noqa: E402
from gigpo.envs.manager import GroupedEnvs  # noqa: E402
from gigpo.learner.logprobs import token_logprobs  # noqa: E402
from gigpo.learner.precision import native_bf16  # noqa: E402
from gigpo.policy import HFGenerator, SamplingParams, load_policy  # noqa: E402


def best_of(fn, repeats: int) -> float:
    """Fastest wall time of ``repeats`` calls (after one warm-up): the machine's capability, not
    its noise."""
    t0 = time.perf_counter()
    fn()
    if time.perf_counter() - t0 > 5.0:
        repeats = 1  # a slow call varies little; its repeats would cost minutes
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def matmul_gflops(m: int, k: int, n: int, dtype: torch.dtype, repeats: int) -> float:
    a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
    s = best_of(lambda: a @ b, repeats)
    return 2 * m * k * n / s / 1e9


class Shape:
    """The model's sizes for the FLOP count."""

    def __init__(self, model):
        c = model.config
        self.hidden, self.inter = c.hidden_size, c.intermediate_size
        self.layers, self.vocab = c.num_hidden_layers, c.vocab_size
        emb = model.get_input_embeddings().weight.numel()
        self.body = sum(p.numel() for p in model.parameters()) - emb  # tied head: not in the body
        tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
        if not tied:
            self.body -= model.get_output_embeddings().weight.numel()
        self.head = self.vocab * self.hidden

    def flops(self, tokens: float, ctx: float, head_tokens: float) -> float:
        """Forward FLOPs of ``tokens`` tokens attending over ``ctx`` on average, the LM head on
        ``head_tokens`` of them."""
        return 2 * self.body * tokens + 4 * self.layers * self.hidden * ctx * tokens + 2 * self.head * head_tokens


def fixed_and_per_row(t1: float, tb: float, b: int) -> tuple[float, float]:
    per_row = max((tb - t1) / max(b - 1, 1), 0.0)
    return max(t1 - per_row, 0.0), per_row


def prompts_of(vocab: int, b: int, length: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    # token ids away from the special ones at the start of the vocabulary
    return [rng.integers(16, vocab, length).astype(np.int64) for _ in range(b)]


def model_rows(name: str, args) -> list[list[str]]:
    model, tok = load_policy(name, device="cpu")
    model.eval()
    sh = Shape(model)
    B, P, T, R = args.batch, args.prompt, args.new, args.response
    dtypes = {"float32": torch.float32} | ({"bf16": torch.bfloat16} if native_bf16("cpu") else {})

    def limit(m: int, dtype: torch.dtype) -> float:
        # the best of the model's own matmul shapes (MLP up, MLP down, LM head) at m rows
        shapes = ((sh.hidden, sh.inter), (sh.inter, sh.hidden), (sh.hidden, sh.vocab))
        return max(matmul_gflops(m, k, n, dtype, args.repeats + 2) for k, n in shapes)

    limits = {name: limit(2048, dt) for name, dt in dtypes.items()}
    small = {name: limit(B, dt) for name, dt in dtypes.items()}
    rows = []

    def row(phase, shape, secs, flops, dtype, fixed=None, limit=None):
        limit = limit or limits[dtype]
        got = flops / secs / 1e9
        split = f"{100 * fixed / secs:.0f}% fixed" if fixed is not None else "-"
        rows.append(
            [
                name,
                phase,
                shape,
                f"{1000 * secs:.1f} ms",
                f"{got:.1f}",
                f"{limit:.0f} {dtype}",
                f"{100 * got / limit:.1f}%",
                split,
            ]
        )
        emit(rows[-1])

    # prompt prefill: one forward over the prompts, the LM head on the last position only
    def prefill(b):
        ids = torch.as_tensor(np.stack(prompts_of(sh.vocab, b, P, 0)))
        with torch.no_grad():
            model(input_ids=ids, use_cache=True, logits_to_keep=1)

    t1, tb = best_of(lambda: prefill(1), args.repeats), best_of(lambda: prefill(B), args.repeats)
    fixed, _ = fixed_and_per_row(t1, tb, B)
    row("prefill", f"{B} x {P} tokens", tb, sh.flops(B * P, P / 2, B), "float32", fixed)

    # decode: the sampler's own loop (HFGenerator), no stop token, so every row runs T steps
    gen = HFGenerator(model, tok, eos_token_ids=[sh.vocab + 7])
    params = SamplingParams(max_new_tokens=T, temperature=1.0, seed=0)

    def decode(b):
        gen.generate([p.tolist() for p in prompts_of(sh.vocab, b, P, 1)], params)

    d1 = (best_of(lambda: decode(1), args.repeats) - t1) / T
    db = (best_of(lambda: decode(B), args.repeats) - tb) / T
    fixed, _ = fixed_and_per_row(d1, db, B)
    row(
        "decode step",
        f"{B} rows, context {P}-{P + T}",
        db,
        sh.flops(B, P + T / 2, B),
        "float32",
        fixed,
        small["float32"],
    )

    # update: log-probs of prompt + response rows with the graph, then backward (3x the forward)
    responses = prompts_of(sh.vocab, B, R, 2)
    model.train()

    def fwd(b, grad, dtype):
        ctx = torch.autocast("cpu", dtype=torch.bfloat16) if dtype == "bf16" else torch.autocast("cpu", enabled=False)
        with torch.set_grad_enabled(grad), ctx:
            lp, _, mask = token_logprobs(
                model, prompts_of(sh.vocab, b, P, 3), responses[:b], pad_token_id=0, temperature=1.0
            )
            if grad:
                (lp * mask).sum().backward()
        model.zero_grad(set_to_none=True)

    f_tok = sh.flops(B * (P + R), (P + R) / 2, B * R)
    for dtype in limits:
        u1, ub = (
            best_of(lambda dtype=dtype: fwd(1, True, dtype), args.repeats),
            best_of(lambda dtype=dtype: fwd(B, True, dtype), args.repeats),
        )
        row("update fwd+bwd", f"{B} rows x {P}+{R} tokens", ub, 3 * f_tok, dtype, fixed_and_per_row(u1, ub, B)[0])
        o1, ob = (
            best_of(lambda dtype=dtype: fwd(1, False, dtype), args.repeats),
            best_of(lambda dtype=dtype: fwd(B, False, dtype), args.repeats),
        )
        row("old/prox log-probs", f"{B} rows x {P}+{R} tokens", ob, f_tok, dtype, fixed_and_per_row(o1, ob, B)[0])
    model.eval()
    return rows


def env_rows(family: str, args) -> list[list[str]]:
    tasks = make_tasks(family, "train", n=4, seed=0)
    with GroupedEnvs(family, group_size=4, max_steps=args.env_steps, executor="inline") as envs:
        envs.reset(tasks)
        steps, secs, _ = run_policy(envs, "random", random.Random(0))
    return [
        [
            "-",
            f"env step ({family})",
            "4 tasks x 4, random actions",
            f"{1000 * secs / steps:.2f} ms",
            "-",
            "-",
            "-",
            "-",
        ]
    ]


def advantage_rows(args) -> list[list[str]]:
    rng = np.random.default_rng(0)
    n_traj, steps = 32 * 8, 15  # the reference's Sokoban batch: 32 rooms x 8 rollouts, 15 steps
    traj = np.repeat(np.arange(n_traj), steps)
    task = traj // 8
    anchors = [f"{g}:{rng.integers(0, 12)}" for g in task]  # states revisited across a task's rollouts
    rewards = np.where(np.arange(len(traj)) % steps == steps - 1, 10.0 * (rng.random(len(traj)) < 0.3), -0.1)
    rewards = rewards.astype(np.float32)

    def run():
        compute_advantages(
            "gigpo",
            scores=episode_scores(rewards, traj),
            step_returns=discounted_returns(rewards, traj, 0.95),
            episode_ids=task,
            traj_ids=traj,
            anchors=anchors,
            mode="mean_norm",
        )

    s = best_of(run, args.repeats)
    return [["-", "advantage (GiGPO)", f"{n_traj} rollouts x {steps} steps", f"{1000 * s:.2f} ms", "-", "-", "-", "-"]]


HEADER = ["model", "phase", "shape", "time", "GFLOP/s", "limit GFLOP/s", "of limit", "batch-1 share"]


def emit(r: list[str]) -> None:
    print("| " + " | ".join(r) + " |", flush=True)  # row by row: a model's update takes minutes


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=["tiny", "smollm2-135m"])
    p.add_argument("--families", nargs="+", default=["sokoban", "alfworld"])
    p.add_argument("--batch", type=int, default=32, help="rows of a sampler / update call (4 tasks x 8 rollouts)")
    p.add_argument("--prompt", type=int, default=256, help="prompt tokens per row")
    p.add_argument("--new", type=int, default=16, help="decode steps timed")
    p.add_argument("--response", type=int, default=16, help="response tokens per update row")
    p.add_argument("--env-steps", type=int, default=15)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="small shapes, one repeat: a smoke run, not figures")
    args = p.parse_args(argv)
    if args.quick:
        args.batch, args.prompt, args.new, args.response, args.repeats, args.env_steps = 4, 32, 4, 4, 1, 3
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    print(
        f"# roofline: {cpu_model()}, {torch.get_num_threads()} torch thread(s), torch {torch.__version__}, "
        f"native bf16: {native_bf16('cpu')}"
    )
    print(
        "# 'batch-1 share': of the full batch's time, the part a call of one row also pays "
        "(Python, dispatch, bookkeeping) by the fit time = fixed + per_row x rows"
    )
    emit(HEADER)
    print("|" + "---|" * len(HEADER))
    for name in args.models:
        model_rows(name, args)
    for fam in args.families:
        for r in env_rows(fam, args):
            emit(r)
    for r in advantage_rows(args):
        emit(r)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Rollout throughput against bare generation on the same batch shapes.

For each model: run ``gigpo.rollout.rollout`` (B tasks x n rollouts, ALFWorld by default) and time
it end to end (env reset + prompts + generation + parsing + env steps); then replay the very same
prompt batches (one batch per rollout step, same sizes) through (a) ``HFGenerator`` alone and
(b) Hugging Face ``model.generate`` (``gigpo.policy.bare_generate``), same sampling parameters.
Prints env steps/s, generated tokens/s, the phase split, and the ratio
rollout tokens/s / bare tokens/s (goal: >= 0.8).

    python benchmarks/rollout_throughput.py --quick            # tiny only, small batch
    python benchmarks/rollout_throughput.py                    # tiny and smollm2-135m
    python benchmarks/rollout_throughput.py --family webshop --models tiny --B 4 --n 4

``--backend server`` (or ``both``) times the same rollout sampled by vLLM (``ServerGenerator``;
a server started from ``.venv-vllm``, ``make setup-vllm``, or ``--url``) and prints its tokens/s
next to ``HFGenerator``'s on the same prompt batches:

    python benchmarks/rollout_throughput.py --models tiny --backend both
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

from gigpo.agent import Agent  # noqa: E402
from gigpo.envs import make_tasks  # noqa: E402
from gigpo.envs.manager import GroupedEnvs  # noqa: E402
from gigpo.policy import HFGenerator, SamplingParams, bare_generate, load_policy  # noqa: E402
from gigpo.rollout import rollout  # noqa: E402


def machine() -> str:
    dev = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__} "
        f"({torch.get_num_threads()} threads), device {dev}"
    )


def _time_generation(fn, batches, params) -> tuple[float, int]:
    tokens, t0 = 0, time.perf_counter()
    for i, b in enumerate(batches):
        p = SamplingParams(
            temperature=params.temperature,
            top_p=params.top_p,
            max_new_tokens=params.max_new_tokens,
            seed=(params.seed or 0) + i,
        )
        tokens += sum(len(g.token_ids) for g in fn(b, p))
    return time.perf_counter() - t0, tokens


def bench_server(model_name: str, args) -> None:
    """The rollout sampled by vLLM, then the same batches through ``HFGenerator``: tokens/s of each."""
    import tempfile
    from contextlib import ExitStack
    from pathlib import Path

    from gigpo.policy.launch import VLLMServer
    from gigpo.policy.server import ServerGenerator
    from gigpo.policy.server_sync import save_for_serving

    model, tok = load_policy(model_name, device=args.device)
    agent = Agent(args.family, tok, max_prompt_tokens=args.max_prompt_tokens)
    params = SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens, seed=0)
    tasks = make_tasks(args.family, "train", n=args.B, seed=0)
    with ExitStack() as stack:
        url, start_s = args.url, 0.0
        if not url:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            d = save_for_serving(model, tok, work / "model")
            srv = VLLMServer(d, max_model_len=args.max_prompt_tokens + args.max_new_tokens)
            stack.enter_context(srv)
            url, start_s = srv.url, srv.start_seconds or 0.0
        gen = ServerGenerator(tok, [url], policy=model, concurrency=args.concurrency)
        envs = stack.enter_context(
            GroupedEnvs(args.family, group_size=args.n, max_steps=args.max_steps, executor=args.executor)
        )
        rollout(envs, tasks, gen, tok, agent, SamplingParams(max_new_tokens=2, seed=0), max_steps=1)  # warm-up
        t0 = time.perf_counter()
        batch = rollout(envs, tasks, gen, tok, agent, params)
        roll_s = time.perf_counter() - t0
        batches = [
            [batch.prompt_ids[i].tolist() for i in np.flatnonzero(batch.step == t)]
            for t in range(int(batch.step.max()) + 1)
        ]
        srv_s, srv_tok = _time_generation(gen.generate, batches, params)
        gen.close()
    hf_s, hf_tok = _time_generation(HFGenerator(model, tok).generate, batches, params)
    bare_s, bare_tok = _time_generation(lambda b, p: bare_generate(model, tok, b, p), batches, params)
    m = batch.meta
    print(
        f"\n== {model_name} on {args.family} via vLLM ({url}{f', started in {start_s:.0f} s' if start_s else ''}): "
        f"B={args.B} x n={args.n}, max_steps={args.max_steps}, max_new_tokens={args.max_new_tokens}"
    )
    print(
        f"rollout: {batch.num_rows} env steps, {m['generated_tokens']} tokens in {roll_s:.2f} s -> "
        f"{m['generated_tokens'] / roll_s:.1f} tokens/s (generate {m['time_generate_s']:.2f} s)"
    )
    print("same prompt batches, generation alone:")
    print(f"  backend server (vLLM): {srv_tok} tokens in {srv_s:.2f} s -> {srv_tok / srv_s:.1f} tokens/s")
    print(f"  backend hf (HFGenerator): {hf_tok} tokens in {hf_s:.2f} s -> {hf_tok / hf_s:.1f} tokens/s")
    print(f"  bare HF model.generate: {bare_tok} tokens in {bare_s:.2f} s -> {bare_tok / bare_s:.1f} tokens/s")
    print(
        f"  server / hf tokens/s = {(srv_tok / srv_s) / (hf_tok / hf_s):.2f}, "
        f"server / bare generate = {(srv_tok / srv_s) / (bare_tok / bare_s):.2f}"
    )


def bench(model_name: str, args) -> None:
    t0 = time.perf_counter()
    model, tok = load_policy(model_name, device=args.device)
    load_s = time.perf_counter() - t0
    gen = HFGenerator(model, tok)
    agent = Agent(args.family, tok, max_prompt_tokens=args.max_prompt_tokens)
    params = SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens, seed=0)
    tasks = make_tasks(args.family, "train", n=args.B, seed=0)
    with GroupedEnvs(args.family, group_size=args.n, max_steps=args.max_steps, executor=args.executor) as envs:
        # Warm-up on the same tasks: builds every slot's env once (training reuses them) and warms
        # the model, so the timed run measures the steady state of an iteration.
        rollout(envs, tasks, gen, tok, agent, SamplingParams(max_new_tokens=2, seed=0), max_steps=1)
        t0 = time.perf_counter()
        batch = rollout(envs, tasks, gen, tok, agent, params)
        roll_s = time.perf_counter() - t0
    m = batch.meta
    steps = batch.num_rows
    # The same prompt batches the rollout generated for, step by step.
    batches = [
        [batch.prompt_ids[i].tolist() for i in np.flatnonzero(batch.step == t)]
        for t in range(int(batch.step.max()) + 1)
    ]
    hf_s, hf_tok = _time_generation(gen.generate, batches, params)
    bare_s, bare_tok = _time_generation(lambda b, p: bare_generate(model, tok, b, p), batches, params)
    roll_tps = m["generated_tokens"] / roll_s
    bare_tps = bare_tok / bare_s
    hf_tps = hf_tok / hf_s
    plen = np.mean([len(p) for p in batch.prompt_ids])
    print(
        f"\n== {model_name} on {args.family}: B={args.B} x n={args.n}, max_steps={args.max_steps}, "
        f"max_new_tokens={args.max_new_tokens}  (load {load_s:.1f} s)"
    )
    print(
        f"rollout: {steps} env steps, {m['generated_tokens']} tokens in {roll_s:.2f} s -> "
        f"{steps / roll_s:.2f} env steps/s, {roll_tps:.1f} tokens/s; mean prompt {plen:.0f} tokens"
    )
    print(
        f"  phases: reset {m['time_reset_s']:.2f} s, prompts {m['time_prompt_s']:.2f} s, "
        f"generate {m['time_generate_s']:.2f} s, decode+parse+env {m['time_env_s']:.2f} s"
    )
    print(f"HFGenerator alone, same batches: {hf_tok} tokens in {hf_s:.2f} s -> {hf_tps:.1f} tokens/s")
    print(f"bare model.generate, same batches: {bare_tok} tokens in {bare_s:.2f} s -> {bare_tps:.1f} tokens/s")
    ratio = roll_tps / bare_tps
    loop_tps = m["generated_tokens"] / (roll_s - m["time_reset_s"])
    print(
        f"ratio rollout/bare tokens/s = {ratio:.2f} ({'meets' if ratio >= 0.8 else 'BELOW'} the 0.80 goal); "
        f"rollout/HFGenerator = {roll_tps / hf_tps:.2f}; without env reset: rollout/bare = {loop_tps / bare_tps:.2f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny only, B=2 x n=2, 3 steps, 16 new tokens")
    ap.add_argument("--models", nargs="+", default=["tiny", "smollm2-135m"], help="models to bench")
    ap.add_argument("--family", default="alfworld", help="env family (alfworld, webshop, search)")
    ap.add_argument("--B", type=int, default=4, help="tasks per batch")
    ap.add_argument("--n", type=int, default=4, help="rollouts per task (group size)")
    ap.add_argument("--max-steps", type=int, default=5, help="env steps per episode")
    ap.add_argument("--max-new-tokens", type=int, default=48, help="response length cap")
    ap.add_argument("--max-prompt-tokens", type=int, default=2048, help="prompt length cap")
    ap.add_argument("--executor", default="inline", help="env executor: inline, thread, process")
    ap.add_argument("--device", default="auto", help="auto, cpu, cuda")
    ap.add_argument("--backend", default="hf", choices=("hf", "server", "both"), help="who samples")
    ap.add_argument("--url", default="", help="--backend server: a running server ('' = start vLLM)")
    ap.add_argument("--concurrency", type=int, default=16, help="--backend server: requests in flight")
    args = ap.parse_args()
    if args.quick:
        args.models, args.B, args.n, args.max_steps, args.max_new_tokens = ["tiny"], 2, 2, 3, 16
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    print("machine:", machine())
    for name in args.models:
        if args.backend in ("hf", "both"):
            bench(name, args)
        if args.backend in ("server", "both"):
            bench_server(name, args)


if __name__ == "__main__":
    main()

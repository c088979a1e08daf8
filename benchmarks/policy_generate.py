"""Generation speed: ``HFGenerator`` (own KV-cache loop) vs Hugging Face ``model.generate``.

Same left-padded batch (B chat prompts of varied length), same sampling parameters (temperature 1,
top-p 1, EOS stops a row), measured in the same run, alternating the two and keeping the best of
``--repeats``. ``bare_generate`` is timed with and without keeping its per-step scores (the
log-probs HFGenerator always returns). Prints generated tokens/s.

    OMP_NUM_THREADS=1 python benchmarks/policy_generate.py                  # tiny and smollm2-135m
    python benchmarks/policy_generate.py --models tiny --B 16 --new 64 --device cuda
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

from gigpo.policy import HFGenerator, SamplingParams, bare_generate, load_policy  # noqa: E402

TEXTS = [
    "Your task is to: put a clean mug in coffeemachine. Describe your plan step by step.",
    "Write a short story about a robot that learns to cook.",
    "i need a long sleeve shirt in blue, price lower than 40.00 dollars. What should I search for?",
    "Explain why the sky is blue.",
]


def timed(fn) -> tuple[float, int]:
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    gens = fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - t0, sum(len(g.token_ids) for g in gens)


def bench(name: str, args) -> None:
    t0 = time.perf_counter()
    model, tok = load_policy(name, device=args.device)
    load_s = time.perf_counter() - t0
    prompts = [
        tok.apply_chat_template(
            [{"role": "user", "content": TEXTS[i % len(TEXTS)] + " " * (i % 3) + "Please answer." * (i % 5)}],
            add_generation_prompt=True,
        )["input_ids"]
        for i in range(args.B)
    ]
    gen = HFGenerator(model, tok)
    runs = {
        "HFGenerator": lambda s: gen.generate(prompts, SamplingParams(max_new_tokens=args.new, seed=s)),
        "model.generate + logprobs": lambda s: bare_generate(
            model, tok, prompts, SamplingParams(max_new_tokens=args.new, seed=s)
        ),
        "model.generate": lambda s: bare_generate(
            model, tok, prompts, SamplingParams(max_new_tokens=args.new, seed=s), with_logprobs=False
        ),
    }
    runs["HFGenerator"](0)  # warm-up (allocators, kernels)
    best = {k: (float("inf"), 0) for k in runs}
    for r in range(args.repeats):
        for k, fn in runs.items():
            s, n = timed(lambda fn=fn, r=r: fn(r))
            if n / s > best[k][1] / best[k][0] if best[k][1] else True:
                best[k] = (s, n)
    nparams = sum(p.numel() for p in model.parameters())
    print(
        f"{name}: {nparams / 1e6:.1f}M params, vocab {len(tok)}, load {load_s:.1f}s, "
        f"B={args.B} x {args.new} new tokens, prompt lens {min(map(len, prompts))}-{max(map(len, prompts))}, "
        f"device {next(model.parameters()).device}, threads {torch.get_num_threads()}"
    )
    base = best["model.generate"][1] / best["model.generate"][0]
    for k, (s, n) in best.items():
        print(f"  {k:28s} {n:5d} tokens in {s:6.2f}s = {n / s:8.1f} tok/s  ({n / s / base:.2f}x model.generate)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=["tiny", "smollm2-135m"])
    ap.add_argument("--B", type=int, default=16)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--device", default="auto")
    args = ap.parse_args()
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    for name in args.models:
        bench(name, args)


if __name__ == "__main__":
    main()

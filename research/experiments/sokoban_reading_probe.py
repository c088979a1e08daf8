"""Can a model learn to read a Sokoban grid? A supervised probe on states of generated rooms.

Each row is one state of a training room (its start, or a few random non-deadlocking moves
from it) with the optimal solver's next move as the target. Every ``--eval-every`` steps it
prints, on states of held-out rooms, the share whose most probable move (under the action mask)
is an optimal one (several moves can be; a random mover's share is printed at step 0 for
reference) and the share of moves that would leave the grid unchanged.

``--format``: ``full`` renders the state with the agent's own prompt (what the rollout shows);
``grid`` only the grid in the env's style; ``coords`` the grid plus a line naming the rows and
columns of the player, the box and the target.

    OMP_NUM_THREADS=1 python research/experiments/sokoban_reading_probe.py --format full --steps 600
    python research/experiments/sokoban_reading_probe.py --steps 2 --eval-rows 8 --eval-every 1   # smoke run
"""

from __future__ import annotations

import argparse
import os
import random
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

from gigpo.envs.sokoban import make_tasks  # noqa: E402
from gigpo.envs.sokoban.env import INSTRUCTION  # noqa: E402
from gigpo.envs.sokoban.room import ACTIONS, parse_level  # noqa: E402
from gigpo.envs.sokoban.solver import is_corner_deadlock, solve  # noqa: E402


def _move(level, player, boxes, a):
    d = level.delta(a)
    nxt = player + d
    if nxt not in level.floor:
        return player, boxes
    if nxt in boxes:
        beyond = nxt + d
        if beyond not in level.floor or beyond in boxes:
            return player, boxes
        return nxt, (boxes - {nxt}) | {beyond}
    return nxt, boxes


def states(task, rng: random.Random, n: int, max_walk: int = 6):
    """Up to ``n`` (level, player, boxes, target move, optimal moves) of one room."""
    level = parse_level(task.data["room"])
    out = []
    for _ in range(n * 3):
        player, boxes = level.player, level.boxes
        for _ in range(rng.randint(0, max_walk)):
            p2, b2 = _move(level, player, boxes, rng.choice(ACTIONS))
            if not is_corner_deadlock(level, b2) and b2 != level.targets:
                player, boxes = p2, b2
        plan = solve(level, player, boxes)
        if not plan:
            continue
        opt = set()
        for a in ACTIONS:
            p2, b2 = _move(level, player, boxes, a)
            if (p2, b2) == (player, boxes):
                continue
            rest = solve(level, p2, b2)
            if rest is not None and len(rest) == len(plan) - 1:
                opt.add(a)
        out.append((level, player, boxes, plan[0], frozenset(opt)))
        if len(out) == n:
            break
    return out


def _rc(level, i):
    return f"row {i // level.width + 1}, column {i % level.width + 1}"


def render_text(state, fmt: str, style: str) -> str:
    level, player, boxes = state[:3]
    grid = level.render(player, boxes, style)
    if fmt == "coords":
        (box,), (target,) = sorted(boxes), sorted(level.targets)
        grid += f"\nPlayer: {_rc(level, player)}. Box: {_rc(level, box)}. Target: {_rc(level, target)}."
    return grid


def row(state, agent, tok, fmt: str, style: str):
    from gigpo.agent import format_expert_response

    text = render_text(state, fmt, style)
    ids = agent._encode(text)[1] if fmt == "grid" else list(agent.build_prompt(INSTRUCTION, observation=text).ids)
    resp_text = format_expert_response("sokoban", state[3], think="empty")
    resp = list(tok(resp_text, add_special_tokens=False)["input_ids"]) + [tok.eos_token_id]
    allowed = agent.action_constraint(list(ACTIONS)).positions(resp, [tok.eos_token_id])
    return ids, resp, allowed


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default="configs/sokoban_tiny.yaml", help="agent settings (prompt format, mask)")
    p.add_argument("--model", default="tiny", help="model dir or alias to start from")
    p.add_argument("--format", choices=("full", "grid", "coords"), default="full")
    p.add_argument("--style", default="verl-agent", help="grid style (verl-agent or compact)")
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--eval-rows", type=int, default=200, help="held-out states")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    args = p.parse_args(argv)

    import torch

    from gigpo.agent import format_expert_response
    from gigpo.policy import load_policy
    from gigpo.learner.logprobs import token_logprobs
    from gigpo.train.factories import build_agent
    from gigpo.train.config import load_config

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    cfg = load_config(args.config, args.overrides)
    model, tok = load_policy(args.model, device="cpu", dtype="float32", seed=args.seed)
    agent = build_agent(cfg, tok)
    rng = random.Random(args.seed)
    held_rng = random.Random(10_000 + args.seed)
    held_states = [s for t in make_tasks("eval", n=args.eval_rows // 2, seed=0) for s in states(t, held_rng, 2)]
    held = [row(s, agent, tok, args.format, args.style) for s in held_states]
    train_tasks = make_tasks("train", n=1000, seed=0)
    # candidate responses for scoring: one per move
    cands = [
        list(tok(format_expert_response("sokoban", a, think="empty"), add_special_tokens=False)["input_ids"])
        + [tok.eos_token_id]
        for a in ACTIONS
    ]

    def logp(rows):
        lp, _, m = token_logprobs(model, [r[0] for r in rows], [r[1] for r in rows],
                                  pad_token_id=tok.pad_token_id, allowed=[r[2] for r in rows])
        return (lp * m).sum(1)

    def evaluate() -> str:
        model.eval()
        with torch.no_grad():
            scores = []
            for c in cands:
                allowed = agent.action_constraint(list(ACTIONS)).positions(c, [tok.eos_token_id])
                lp, _, m = token_logprobs(model, [r[0] for r in held], [c] * len(held),
                                          pad_token_id=tok.pad_token_id, allowed=[allowed] * len(held))
                scores.append((lp * m).sum(1))
            best = torch.stack(scores, 1).argmax(1).tolist()
        model.train()
        acc = sum(ACTIONS[b] in s[4] for b, s in zip(best, held_states)) / len(held_states)
        still = sum(_move(s[0], s[1], s[2], ACTIONS[b]) == (s[1], s[2]) for b, s in zip(best, held_states))
        return f"optimal move {acc:.2f}  unchanged-grid moves {still / len(held_states):.2f}"

    rand_opt = sum(len(s[4]) for s in held_states) / (4 * len(held_states))
    tokens = sum(len(r[0]) for r in held) / len(held)
    print(f"sokoban reading probe: {args.model}, format {args.format}/{args.style}, ~{tokens:.0f} prompt tokens, "
          f"lr {args.lr}, batch {args.batch}; {len(held)} held-out states, random mover's optimal share "
          f"{rand_opt:.2f}")
    print(f"step 0: {evaluate()}", flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / max(args.warmup, 1)))
    t0, loss_sum = time.time(), 0.0
    for step in range(1, args.steps + 1):
        batch = [row(s, agent, tok, args.format, args.style)
                 for s in (states(rng.choice(train_tasks), rng, 1) for _ in range(args.batch)) for s in s]
        loss = -logp(batch).mean()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        loss_sum += float(loss.detach())
        if step % args.eval_every == 0 or step == args.steps:
            n = step % args.eval_every or args.eval_every
            print(f"step {step}: loss {loss_sum / n:.3f}  {evaluate()}  ({time.time() - t0:.0f} s)", flush=True)
            loss_sum = 0.0


if __name__ == "__main__":
    main()

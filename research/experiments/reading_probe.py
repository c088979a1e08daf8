"""Can a model learn to read its ALFWorld task? A supervised probe on synthetic reading states.

Every win of a ``put X in/on Y`` task needs two readings of the task text: ``take`` the task's
object X among the objects in view, and, holding it, ``go to`` a receptacle of type Y. This
trains a model on synthetic states of exactly those two decisions (a random room from ALFWorld's
receptacle and object types, the engine's phrasing, a two-step history, the admissible list; the
target is the action the task names) and prints, every ``--eval-every`` steps, the share of
held-out states whose target action gets probability > 0.5 under the action mask (chance is
about 1 in 4 candidates, so p > 0.5 on a state means it was read).

``--format``: ``full`` renders each state with the agent's own prompt (what the rollout shows);
``short`` keeps only the task line, the observation and the admissible list; ``task`` only the
task line (nothing else names a candidate: the copy task a from-scratch model learns in ~200
steps). research/notes/why-tiny-does-not-read.md has what `tiny` does with each.

    OMP_NUM_THREADS=1 python research/experiments/reading_probe.py --format full --steps 300
    python research/experiments/reading_probe.py --steps 2 --eval-rows 4 --eval-every 1     # smoke run
"""

from __future__ import annotations

import argparse
import os
import random
import time
from dataclasses import dataclass

os.environ.setdefault("OMP_NUM_THREADS", "1")

from alfworld.gen.constants import OPENABLE_CLASS_SET  # noqa: E402

from gigpo.envs.alfworld.generator import CAN_CONTAIN, PICKUPABLE, STATIC_RECEPTACLES  # noqa: E402

# Names as the generated games print them (lower-cased ALFRED types): objects that can be picked
# up, and the static receptacles that can hold one; openable ones are opened and closed.
OBJECTS = tuple(sorted(o.lower() for o in PICKUPABLE))
RECEPTACLES = tuple(sorted(r.lower() for r in STATIC_RECEPTACLES if r in CAN_CONTAIN))
OPENABLE = frozenset(r.lower() for r in OPENABLE_CLASS_SET)
KINDS = ("take", "carry")


@dataclass(frozen=True)
class ReadingState:
    """One synthetic step: what the agent's prompt shows and the action the task calls for."""

    kind: str  # "take" (pick the task's object) or "carry" (go to the task's receptacle type)
    task: str
    observation: str
    history: tuple[tuple[str, str], ...]
    step: int  # steps taken before this one
    admissible: tuple[str, ...]
    action: str


def _listing(objs: list[str]) -> str:
    if not objs:
        return "nothing"
    items = [f"a {o}" for o in objs]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + ", and " + items[-1]


def _arrive(rec: str, contents: list[str], rng: random.Random) -> str:
    """The engine's text on arriving at (or opening) ``rec``."""
    if rec.rsplit(" ", 1)[0] in OPENABLE and rng.random() < 0.5:
        return f"You open the {rec}. The {rec} is open. In it, you see {_listing(contents)}."
    return f"You arrive at {rec}. On the {rec}, you see {_listing(contents)}."


def _room(rng: random.Random, max_types: int) -> list[str]:
    types = rng.sample(RECEPTACLES, rng.randint(3, max_types))
    return [f"{t} {i}" for t in types for i in range(1, rng.choice((1, 1, 2, 3)) + 1)]


def _go_tos(room: list[str], here: str) -> list[str]:
    return [f"go to {r}" for r in room if r != here]


def reading_state(rng: random.Random, kind: str | None = None, max_types: int = 6,
                  max_objects: int = 5) -> ReadingState:
    """A random ``take`` or ``carry`` state (``kind``; random when None)."""
    kind = kind or rng.choice(KINDS)
    room = _room(rng, max_types)
    target_rec = rng.choice(sorted({r.rsplit(" ", 1)[0] for r in room}))
    names = rng.sample(OBJECTS, rng.randint(2, max_objects))
    obj = names[0]
    task = f"put {rng.choice(('a', 'some'))} {obj} {rng.choice(('in', 'on'))} {target_rec}."
    here = rng.choice([r for r in room if not r.startswith(target_rec + " ")] or room)
    numbered = [f"{o} {rng.randint(1, 3)}" for o in names]
    step = rng.randint(1, 12)
    prev = rng.choice([r for r in room if r != here])
    before = f"You arrive at {prev}. On the {prev}, you see {_listing(rng.sample(numbered[1:], rng.randint(0, 1)))}."
    if kind == "take":
        contents = numbered[:]
        rng.shuffle(contents)
        obs = _arrive(here, contents, rng)
        older = rng.choice(("You are in the middle of a room. Looking quickly around you, you see nothing.",
                            "Nothing happens.", f"You close the {here}."))
        history = ((older, f"go to {prev}"), (before, f"go to {here}"))
        take = [f"take {o} from {here}" for o in contents]
        extra = [f"examine {here}", "inventory", "look"]
        if obs.startswith("You open"):
            extra.append(f"close {here}")
        admissible = sorted(_go_tos(room, here) + take + extra)
        action = f"take {numbered[0]} from {here}"
    else:
        held = numbered[0]
        src_contents = rng.sample(numbered[1:], rng.randint(0, len(numbered) - 1))
        obs = f"You pick up the {held} from the {here}."
        history = ((before, f"go to {here}"), (_arrive(here, [held] + src_contents, rng), f"take {held} from {here}"))
        extra = [f"examine {here}", f"examine {held}", "inventory", "look", f"move {held} to {here}"]
        admissible = sorted(_go_tos(room, here) + extra)
        action = f"go to {target_rec} 1"  # the lowest-numbered instance (every type has a 1)
    return ReadingState(kind, task, obs, history, step + len(history), tuple(admissible), action)


def render(state: ReadingState, agent, fmt: str) -> list[int]:
    """Prompt token ids of ``state`` in format ``fmt`` (see the module docstring)."""
    if fmt == "full":
        return list(agent.build_prompt(state.task, observation=state.observation, history=state.history,
                                       step=state.step, admissible_actions=list(state.admissible)).ids)
    text = f"Your task is to: {state.task}"
    if fmt == "short":
        text += f"\nCurrent observation: {state.observation}\nAdmissible actions now:\n" + \
            "\n".join(f"'{a}'" for a in state.admissible)
    return agent._encode(text)[1]


def row(state: ReadingState, agent, tokenizer, fmt: str) -> tuple:
    """(prompt ids, response ids, allowed positions): the row an action-constrained SFT trains on."""
    from gigpo.agent import format_expert_response

    text = format_expert_response("alfworld", state.action, think="empty")
    resp = list(tokenizer(text, add_special_tokens=False)["input_ids"]) + [tokenizer.eos_token_id]
    allowed = agent.action_constraint(list(state.admissible)).positions(resp, [tokenizer.eos_token_id])
    return render(state, agent, fmt), resp, allowed


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default="configs/alfworld_tiny.yaml", help="agent settings (prompt format, mask)")
    p.add_argument("--model", default="tiny", help="model dir or alias to start from")
    p.add_argument("--format", choices=("full", "short", "task"), default="full")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=50, help="linear learning-rate warm-up steps")
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--eval-rows", type=int, default=100, help="held-out states per decision kind")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--save", default="", help="save the trained model (and tokenizer) to this dir")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    args = p.parse_args(argv)

    import torch

    from gigpo.policy import load_policy
    from gigpo.learner.logprobs import token_logprobs
    from gigpo.train.factories import build_agent
    from gigpo.train.config import load_config

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    cfg = load_config(args.config, args.overrides)
    if not cfg.rollout.constrain_actions:
        raise SystemExit("reading_probe: needs rollout.constrain_actions=true (the probe scores the masked action)")
    model, tok = load_policy(args.model, device="cpu", dtype="float32", seed=args.seed)
    agent = build_agent(cfg, tok)
    held_rng = random.Random(10_000 + args.seed)
    held = {k: [row(reading_state(held_rng, k), agent, tok, args.format) for _ in range(args.eval_rows)]
            for k in KINDS}

    def logp(rows):
        lp, _, m = token_logprobs(model, [r[0] for r in rows], [r[1] for r in rows],
                                  pad_token_id=tok.pad_token_id, allowed=[r[2] for r in rows])
        return (lp * m).sum(1)

    def evaluate() -> str:
        model.eval()
        with torch.no_grad():
            acc = {k: float((logp(rows).exp() > 0.5).float().mean()) for k, rows in held.items()}
        model.train()
        return "  ".join(f"{k} {v:.2f}" for k, v in acc.items())

    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / max(args.warmup, 1)))
    rng = random.Random(args.seed)
    tokens = sum(len(r[0]) for rows in held.values() for r in rows) / sum(len(v) for v in held.values())
    print(f"reading probe: {args.model}, format {args.format}, ~{tokens:.0f} prompt tokens, lr {args.lr}, "
          f"batch {args.batch}, warm-up {args.warmup}; p(target) > 0.5 on held-out states")
    print(f"step 0: {evaluate()}", flush=True)
    model.train()
    t0, loss_sum = time.time(), 0.0
    for step in range(1, args.steps + 1):
        batch = [row(reading_state(rng), agent, tok, args.format) for _ in range(args.batch)]
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
    if args.save:
        model.save_pretrained(args.save)
        tok.save_pretrained(args.save)


if __name__ == "__main__":
    main()

"""Does a policy read its ALFWorld task? Reading metrics on held-out put-tasks, against chance.

Every win of a `put X in/on Y` task needs two readings of the task text: `take` the task's
object X (not another object in view), and after picking it up `go to` a receptacle of type Y.
This plays one episode per held-out task with the config's agent (prompt format, action mask)
and prints, per decision kind, how often the policy chose the task's word and how often a
uniform choice among the admissible candidates would have (chance, from each step's own list).

    OMP_NUM_THREADS=1 python research/experiments/reading.py --model /path/to/sft_model        # 48 tasks
    python research/experiments/reading.py --model tiny --tasks 4 --max-steps 5                # smoke run
"""

from __future__ import annotations

import argparse
import os
import re

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

TASK = re.compile(r"Your task is to: put (?:a|an|some|the|two)? ?(\w+) (?:in|on|in/on) (?:a |an |the )?(\w+)")


def decisions(batch, tokenizer) -> dict[str, list[tuple[bool, float]]]:
    """Per decision kind, (chose the task's word, chance of doing so) for every such step."""
    out: dict[str, list[tuple[bool, float]]] = {"take the task's object": [], "go to its receptacle after pick-up": []}
    for i in range(batch.num_rows):
        prompt = tokenizer.decode(list(batch.prompt_ids[i]))
        m = TASK.search(prompt)
        if not m:
            continue
        obj, rec = m.group(1), m.group(2)
        action = str(batch.action[i])
        admissible = re.findall(r"^'(.+)'$", prompt, flags=re.M)
        if action.startswith("take "):
            names = {a.split(" ")[1] for a in admissible if a.startswith("take ")}
            if obj in names:
                out["take the task's object"].append((action.split(" ")[1] == obj, 1 / len(names)))
        prev_picked = i > 0 and batch.episode_id[i - 1] == batch.episode_id[i] and \
            str(batch.observation[i - 1]).startswith("You pick up")
        if prev_picked and action.startswith("go to "):
            types = {a.split(" ")[2] for a in admissible if a.startswith("go to ")}
            if rec in types:
                out["go to its receptacle after pick-up"].append((action.split(" ")[2] == rec, 1 / len(types)))
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default="configs/alfworld_tiny.yaml", help="agent, env and sampling settings")
    p.add_argument("--model", required=True, help="model dir or alias (e.g. a run's model/ or the SFT cache dir)")
    p.add_argument("--tasks", type=int, default=48, help="held-out tasks, one episode each")
    p.add_argument("--max-steps", type=int, default=None, help="steps per episode (default: the config's)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    args = p.parse_args(argv)

    from gigpo.envs import make_tasks
    from gigpo.envs.manager import GroupedEnvs
    from gigpo.policy import HFGenerator, SamplingParams, load_policy
    from gigpo.rollout import eval_rollout
    from gigpo.train.factories import build_agent
    from gigpo.train.config import load_config

    torch.set_num_threads(1)
    cfg = load_config(args.config, args.overrides)
    if cfg.env.family != "alfworld":
        raise SystemExit(f"reading: ALFWorld only (config family is {cfg.env.family!r})")
    model, tok = load_policy(args.model, device=cfg.model.device, dtype=cfg.model.dtype)
    tasks = make_tasks("alfworld", "eval", n=args.tasks, seed=cfg.env.task_seed, **cfg.env.task_kwargs)
    params = SamplingParams(temperature=cfg.rollout.eval_temperature, top_p=cfg.rollout.top_p,
                            max_new_tokens=cfg.rollout.max_response_tokens, seed=args.seed)
    with GroupedEnvs("alfworld", group_size=1, max_steps=args.max_steps or cfg.env.max_steps,
                     env_kwargs=cfg.env.kwargs) as envs:
        batch, metrics = eval_rollout(envs, tasks, HFGenerator(model, tok), tok, build_agent(cfg, tok), params)
    print(f"{args.model}: {len(tasks)} held-out tasks, success {metrics['success']:.3f}, "
          f"T = {cfg.rollout.eval_temperature}")
    for kind, rows in decisions(batch, tok).items():
        if not rows:
            print(f"  {kind:36s} no such steps")
            continue
        hit = sum(r[0] for r in rows)
        chance = sum(r[1] for r in rows) / len(rows)
        print(f"  {kind:36s} {hit}/{len(rows)} = {hit / len(rows):.2f}   chance {chance:.2f}")


if __name__ == "__main__":
    main()

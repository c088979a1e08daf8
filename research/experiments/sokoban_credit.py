"""Does GiGPO's advantage point at the right Sokoban moves more often than GRPO's?

Samples real training batches (rooms x the config's group size, the rollout temperature) from
one model, computes each estimator's advantages on the same rows, and grades every valid move
against the optimal solver: a move is *good* when it shortens the optimal solution by one, *bad*
when it does not: *wasted* (the room stays solvable) or *fatal* (into a deadlock, a state the
solver proves unsolvable, the irreversible mistake). Moves made from an already unsolvable state
and invalid actions are not graded. Per estimator:

- ``aligned``: the share of the advantage mass |A| that points the right way (A > 0 on good
  moves, A < 0 on bad ones); 0.5 is a signal that knows nothing of the moves;
- ``auc``: the probability that a random good move gets a larger advantage than a random bad one;
- ``pair acc``: the same, over the pairs of a good and a bad move taken from one state (one
  step group), which is what a step-level signal is for (ties count 1/2);
- ``A good`` / ``A bad``: the mean advantage of good and of bad moves; ``A=0``: the share of
  graded moves with no advantage at all;
- ``fatal<0``: the share of fatal moves with A < 0, and ``fatal pair``: ``pair acc`` over the
  (good, fatal) pairs of one state;
- ``late wins``: over pairs of rows of *lost* episodes in one state, taken at different steps,
  the share where the later row gets the larger advantage. With a per-step penalty and a step
  budget, a lost episode's return from a state is less negative the fewer steps are left, so a
  step signal that compares returns within a state favours late visits (0.5: no such bias);
  ``--without-step-penalty`` also grades GiGPO on the rewards without that penalty (what the
  env gives with ``env.kwargs.step_penalty=0``).

    python research/experiments/sokoban_credit.py --model ~/.cache/gigpo/models/sft-sokoban-<hash> [--batches 8]

The finding it backs: research/results.md, "Sokoban: does the advantage point at the right move?".
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import tempfile

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

VARIANTS = [("gigpo", "mean_norm"), ("gigpo", "mean_std_norm"), ("grpo", "mean_std_norm")]
STATE = re.compile(r"player (\d+); boxes \[([\d, ]*)\]")


def grade(batch, tasks) -> np.ndarray:
    """Per row: 1 good move, 0 wasted move, 2 fatal move, -1 not graded (invalid, or from a deadlock)."""
    from gigpo.envs.sokoban.env import SokobanEnv, parse_action
    from gigpo.envs.sokoban.solver import solve

    env = SokobanEnv(grid_style="compact")  # replays each graded move with the env's own rules
    dist: dict = {}

    def distance(task_id, player: int, boxes: frozenset) -> float:
        key = (task_id, player, boxes)
        if key not in dist:
            plan = solve(env.level, player, boxes)
            dist[key] = float("inf") if plan is None else float(len(plan))
        return dist[key]

    out = np.full(batch.num_rows, -1, dtype=np.int64)
    for r in range(batch.num_rows):
        move = parse_action(str(batch.action[r]))
        if not batch.valid[r] or move is None:
            continue
        task_id = batch.traj_task_id[batch.traj_id[r]]
        env.reset(tasks[task_id])
        m = STATE.fullmatch(str(batch.state_anchor[r]))
        player, boxes = int(m.group(1)), frozenset(int(b) for b in m.group(2).split(",") if b.strip())
        d0 = distance(task_id, player, boxes)
        if not np.isfinite(d0) or d0 == 0:
            continue
        env.player, env.boxes = player, boxes
        env.step(move)
        d1 = distance(task_id, env.player, env.boxes)
        out[r] = 2 if not np.isfinite(d1) else int(d1 == d0 - 1)
    return out


def auc(pos: np.ndarray, neg: np.ndarray) -> float:
    """P(a random ``pos`` value > a random ``neg`` value), ties 1/2 (Mann-Whitney)."""
    if len(pos) == 0 or len(neg) == 0:
        return float("nan")
    both = np.concatenate([pos, neg])
    order = both.argsort(kind="stable")
    ranks = np.empty(len(both))
    ranks[order] = np.arange(1, len(both) + 1)
    for v in np.unique(both):  # average ranks of ties
        tie = both == v
        ranks[tie] = ranks[tie].mean()
    return float((ranks[: len(pos)].sum() - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg)))


def pair_accuracy(adv: np.ndarray, label: np.ndarray, groups: np.ndarray, bad=(0, 2)) -> tuple[float, int]:
    """Over (good, bad) move pairs from one state: share ranked right by ``adv`` (ties 1/2), pairs."""
    right, pairs = 0.0, 0
    for g in np.unique(groups):
        rows = groups == g
        good, worse = adv[rows & (label == 1)], adv[rows & np.isin(label, bad)]
        if len(good) and len(worse):
            diff = good[:, None] - worse[None, :]
            right += float((diff > 0).sum() + 0.5 * (diff == 0).sum())
            pairs += diff.size
    return (right / pairs if pairs else float("nan")), pairs


def later_first(adv: np.ndarray, step: np.ndarray, groups: np.ndarray, lost: np.ndarray) -> tuple[float, int]:
    """Over pairs of rows of lost episodes in one state at different steps: the share where the
    later row has the larger advantage (ties 1/2), and the number of pairs. 0.5: no time bias."""
    right, pairs = 0.0, 0
    for g in np.unique(groups[lost]):
        rows = np.flatnonzero((groups == g) & lost)
        if len(rows) < 2:
            continue
        dt = step[rows][:, None] - step[rows][None, :]
        da = adv[rows][:, None] - adv[rows][None, :]
        later = dt > 0
        right += float(((da > 0) & later).sum() + 0.5 * ((da == 0) & later).sum())
        pairs += int(later.sum())
    return (right / pairs if pairs else float("nan")), pairs


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default="configs/sokoban_tiny.yaml", help="agent, env and sampling settings")
    p.add_argument("--model", required=True, help="model dir (e.g. the SFT cache dir)")
    p.add_argument("--batches", type=int, default=8, help="training batches to sample (fresh rooms each)")
    p.add_argument("--seed", type=int, default=0, help="task and sampling seed")
    p.add_argument(
        "--without-step-penalty",
        action="store_true",
        help="also grade GiGPO with the per-step penalty left out of the rewards it computes returns from",
    )
    p.add_argument("--gammas", default="", help="comma list of discounts to grade GiGPO at (default: the config's)")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    args = p.parse_args(argv)

    from gigpo.batch import concat_batches
    from gigpo.envs.sokoban.env import STEP_PENALTY
    from gigpo.rollout import rollout
    from gigpo.train.config import load_config
    from gigpo.train.collect import sample_tasks, sampling_params
    from gigpo.train.credit import batch_credit, row_anchors
    from gigpo.train.seeds import iteration_seed
    from gigpo.train.trainer import Trainer

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as out:
        over = [
            f"model.name_or_path={args.model}",
            "sft.enabled=false",
            f"output_dir={out}",
            "name=credit",
            "train.torch_threads=1",
            "log.tensorboard=false",
            "log.progress=false",
            f"seed={args.seed}",
        ]
        cfg = load_config(args.config, list(args.overrides) + over)
        tr = Trainer(cfg)
        tr.model.eval()
        gammas = [float(g) for g in args.gammas.split(",") if g.strip()] or [cfg.algorithm.gamma]
        # GRPO's episode score is undiscounted: one gamma is enough for it.
        variants = [(e, m, g, True) for e, m in VARIANTS for g in (gammas if e == "gigpo" else gammas[:1])]
        if args.without_step_penalty:
            variants += [(e, m, g, False) for e, m in VARIANTS if e == "gigpo" for g in gammas]
        batches, tasks_by_id = [], {}
        for it in range(1, args.batches + 1):
            tasks = sample_tasks(cfg, tr.train_pool, it)
            tasks_by_id.update({t.task_id: t for t in tasks})
            batches.append(
                rollout(
                    tr.envs,
                    tasks,
                    tr.generator,
                    tr.tokenizer,
                    tr.agent,
                    sampling_params(cfg, cfg.rollout.temperature, iteration_seed(cfg.seed, it, 2)),
                )
            )
        tr.close()
        # Advantages are computed per batch (groups never span iterations), then pooled.
        per_batch = []
        for b in batches:
            label = grade(b, tasks_by_id)
            anchors = row_anchors(cfg, b)
            advs, groups = {}, None
            for est, mode, gamma, penalty in variants:
                tr.cfg.algorithm.estimator, tr.cfg.algorithm.mode, tr.cfg.algorithm.gamma = est, mode, gamma
                # Without the step penalty every failed episode's rewards are 0 from any step on.
                rb = b if penalty else dataclasses.replace(b, reward=b.reward - STEP_PENALTY)
                res = batch_credit(cfg, rb, anchors=anchors).result
                advs[(est, mode, gamma, penalty)] = np.asarray(res.advantages, dtype=np.float64)
                if est == "gigpo":  # the grid is the whole state: GiGPO's step groups are states
                    groups = np.asarray(res.step_groups)
            per_batch.append((label, advs, groups, b.step, b.traj_won[b.traj_id]))
        batch = concat_batches(batches)
    label = np.concatenate([x[0] for x in per_batch])
    offset, groups = 0, []
    for _, _, g, _, _ in per_batch:  # group labels made unique across batches
        groups.append(g + offset)
        offset += int(g.max()) + 1 if len(g) else 0
    groups = np.concatenate(groups)
    graded = label >= 0
    print(
        f"{args.model}: {len(batches)} batches, {batch.num_trajectories} episodes, {batch.num_rows} moves, "
        f"success {float(batch.traj_won.mean()):.3f}; graded {int(graded.sum())} (good {int((label == 1).sum())}, "
        f"wasted {int((label == 0).sum())}, fatal {int((label == 2).sum())})"
    )
    print(
        f"{'estimator':8s} {'mode':14s} {'gamma':>5s} {'penalty':>7s} {'aligned':>8s} {'auc':>6s} "
        f"{'pair acc':>9s} {'pairs':>6s} {'A good':>7s} {'A bad':>7s} {'A=0':>5s} {'fatal<0':>8s} "
        f"{'fatal pair':>11s} {'pairs':>6s} {'late wins':>9s} {'pairs':>6s}"
    )
    results = []
    step = np.concatenate([x[3] for x in per_batch])
    lost = ~np.concatenate([x[4] for x in per_batch]).astype(bool)
    for est, mode, gamma, penalty in variants:
        adv = np.concatenate([x[1][(est, mode, gamma, penalty)] for x in per_batch])
        late, late_pairs = later_first(adv, step, groups, lost)
        a, lab, g = adv[graded], label[graded], groups[graded]
        good, bad, fatal = lab == 1, lab != 1, lab == 2
        right = np.where(good, a > 0, a < 0)
        mass = np.abs(a).sum()
        acc, pairs = pair_accuracy(a, lab, g)
        facc, fpairs = pair_accuracy(a, lab, g, bad=(2,))
        row = {
            "estimator": est,
            "mode": mode,
            "gamma": gamma,
            "step_penalty": penalty,
            "late_wins": late,
            "late_pairs": late_pairs,
            "aligned": float((np.abs(a) * right).sum() / mass) if mass else float("nan"),
            "auc": auc(a[good], a[bad]),
            "pair_acc": acc,
            "pairs": pairs,
            "mean_good": float(a[good].mean()),
            "mean_bad": float(a[bad].mean()),
            "zero": float((a == 0).mean()),
            "fatal_negative": float((a[fatal] < 0).mean()) if fatal.any() else float("nan"),
            "fatal_pair_acc": facc,
            "fatal_pairs": fpairs,
        }
        results.append(row)
        print(
            f"{est:8s} {mode:14s} {gamma:5.2f} {str(penalty):>7s} {row['aligned']:8.3f} {row['auc']:6.3f} "
            f"{acc:9.3f} {pairs:6d} "
            f"{row['mean_good']:7.3f} {row['mean_bad']:7.3f} {row['zero']:5.2f} "
            f"{row['fatal_negative']:8.3f} {facc:11.3f} {fpairs:6d} {late:9.3f} {late_pairs:6d}",
            flush=True,
        )
    return results


if __name__ == "__main__":
    main()

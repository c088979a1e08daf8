"""Writing rollouts as JSON lines for inspection: one line per step."""

from __future__ import annotations

import json
import os
from typing import Mapping

import numpy as np

from gigpo.batch import StepBatch


def _plain(v):
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    return v


def write_trajectories_jsonl(batch: StepBatch, path, tokenizer=None, advantages: Mapping | None = None) -> int:
    """Write one JSON object per step row of ``batch`` to ``path``; returns the lines written.

    Each line: ``episode_id, traj_id, step, task_id, task_type, won, prompt`` (decoded prompt, only
    with a ``tokenizer``), ``response, action, observation, anchor, reward, done, valid,
    response_tokens``; ``state_anchor`` (the env's state key, ``info["state_anchor"]``) when the batch
    has them; ``policy_version`` (the weights version that sampled the row) when the batch records
    it (``traj_policy_version``); plus one key per entry of ``advantages`` — a mapping from a name to a
    per-row array of length N, e.g. ``{"A_E": ..., "A_S": ..., "A": ..., "step_group": ...}``.
    """
    n = batch.num_rows
    adv = {}
    for k, v in (advantages or {}).items():
        arr = np.asarray(v)
        if arr.shape[:1] != (n,):
            raise ValueError(f"advantages[{k!r}] has shape {arr.shape}; it needs one value per row ({n},)")
        adv[k] = arr
    versions = batch.meta.get("traj_policy_version") or None
    seen: dict[int, int] = {}  # rows of each trajectory written so far: its rows are in time order
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    # backslashreplace: a lone surrogate in an observation is written as its JSON escape "\\ud800".
    with open(path, "w", encoding="utf-8", errors="backslashreplace") as f:
        for i in range(n):
            t = int(batch.traj_id[i])
            rec = {
                "episode_id": int(batch.episode_id[i]),
                "traj_id": t,
                "step": int(batch.step[i]),
                "task_id": _plain(batch.traj_task_id[t]) if t < batch.num_trajectories else None,
                "task_type": _plain(batch.traj_task_type[t]) if t < batch.num_trajectories else None,
                "won": bool(batch.traj_won[t]) if t < batch.num_trajectories else None,
            }
            if tokenizer is not None:
                rec["prompt"] = tokenizer.decode(list(batch.prompt_ids[i]))
            rec.update(
                response=_plain(batch.response_text[i]),
                action=_plain(batch.action[i]),
                observation=_plain(batch.observation[i]),
                anchor=_plain(batch.anchor[i]),
                reward=float(batch.reward[i]),
                done=bool(batch.done[i]),
                valid=bool(batch.valid[i]),
                response_tokens=len(batch.response_ids[i]),
            )
            if batch.state_anchor is not None:
                rec["state_anchor"] = _plain(batch.state_anchor[i])
            if versions is not None:
                j = seen[t] = seen.get(t, -1) + 1
                rec["policy_version"] = _plain(versions[t][j])
            for k, arr in adv.items():
                rec[k] = _plain(arr[i])
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    return n

"""StepBatch: the rollout's output and the trainer's input. One row per agent step.

Columnar: per-row arrays of length N (rows of a trajectory are contiguous and in time order),
ragged token arrays as lists of 1-D arrays, and per-trajectory arrays of length T.

Row columns
    episode_id   int64 [N]   episode-group id (the spec's ``uid``): all n rollouts of one task
                             in this iteration share it.
    traj_id      int64 [N]   trajectory id (the spec's ``traj_uid``), indexes the traj_* arrays.
    step         int32 [N]   step index t within the trajectory (0-based).
    anchor       object [N]  raw observation the step's action was taken in (GIGPO_SPEC s.6).
    reward       float32 [N] env reward returned for this step.
    done         bool [N]    the env finished at this step (won, lost or truncated).
    valid        bool [N]    the response parsed to a valid action (spec s.6); invalid ones
                             were still sent to the env and get the invalid-action penalty.
    prompt_ids   list[int32 array]    exact prompt token ids the model saw.
    response_ids list[int32 array]    exact generated token ids (never re-tokenized).
    logprobs     list[float32 array]  sampling log-probs of response_ids (same lengths).
    action       object [N]  the parsed action text sent to the env.
    response_text object [N] decoded response (for inspection only, never trained on).
    observation  object [N]  the observation the env returned after this step.

Optional row column
    allowed      list [N] or None   per row None or the action-constrained positions
                             [(k, allowed ids)] the sampler used (``gigpo.policy.constrain``);
                             the trainer's log-prob passes apply the same masks.

Trajectory columns (length T)
    traj_episode_id int64, traj_task_id object, traj_task_type object, traj_won bool,
    traj_score float32, traj_length int32, traj_failed bool (env fault, see envs.manager),
    traj_truncated bool (hit max_steps).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np

ROW_FIELDS = (
    "episode_id", "traj_id", "step", "anchor", "reward", "done", "valid",
    "prompt_ids", "response_ids", "logprobs", "action", "response_text", "observation",
)
TRAJ_FIELDS = (
    "traj_episode_id", "traj_task_id", "traj_task_type", "traj_won", "traj_score",
    "traj_length", "traj_failed", "traj_truncated",
)


def _obj(values) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out


@dataclass
class StepBatch:
    episode_id: np.ndarray
    traj_id: np.ndarray
    step: np.ndarray
    anchor: np.ndarray
    reward: np.ndarray
    done: np.ndarray
    valid: np.ndarray
    prompt_ids: list
    response_ids: list
    logprobs: list
    action: np.ndarray
    response_text: np.ndarray
    observation: np.ndarray
    traj_episode_id: np.ndarray
    traj_task_id: np.ndarray
    traj_task_type: np.ndarray
    traj_won: np.ndarray
    traj_score: np.ndarray
    traj_length: np.ndarray
    traj_failed: np.ndarray
    traj_truncated: np.ndarray
    meta: dict = field(default_factory=dict)  # e.g. truncation counters from prompt building
    allowed: list | None = None  # optional row column, see the module docstring

    def __post_init__(self) -> None:
        n = len(self.episode_id)
        for name in ROW_FIELDS:
            if len(getattr(self, name)) != n:
                raise ValueError(f"StepBatch.{name} has {len(getattr(self, name))} rows, expected {n}")
        if self.allowed is not None and len(self.allowed) != n:
            raise ValueError(f"StepBatch.allowed has {len(self.allowed)} rows, expected {n}")
        t = len(self.traj_won)
        for name in TRAJ_FIELDS:
            if len(getattr(self, name)) != t:
                raise ValueError(f"StepBatch.{name} has {len(getattr(self, name))} entries, expected {t}")

    @property
    def num_rows(self) -> int:
        return len(self.episode_id)

    @property
    def num_trajectories(self) -> int:
        return len(self.traj_won)

    def response_lengths(self) -> np.ndarray:
        return np.array([len(r) for r in self.response_ids], dtype=np.int64)

    def select_rows(self, idx) -> "StepBatch":
        """Rows ``idx`` (trajectory columns kept whole)."""
        idx = np.asarray(idx, dtype=np.int64)
        kw = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in ROW_FIELDS or (f.name == "allowed" and v is not None):
                kw[f.name] = [v[i] for i in idx] if isinstance(v, list) else v[idx]
            else:
                kw[f.name] = v
        return StepBatch(**kw)

    @staticmethod
    def object_array(values) -> np.ndarray:
        """A 1-D object array (strings of any length, no numpy string truncation)."""
        return _obj(values)

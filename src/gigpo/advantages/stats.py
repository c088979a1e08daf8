"""Step-group diagnostics for logging (the paper's Figure 7 tracks the group-size distribution)."""

from __future__ import annotations

import numpy as np

from ._types import ArrayLike


def step_group_stats(step_groups: ArrayLike, episode_ids: ArrayLike | None = None) -> dict:
    """Summary of a step-group partition; labels < 0 (no step group, GRPO/RLOO) are ignored.

    step_groups  int [N]  step-group label per row.
    episode_ids  any [N]  optional; adds ``num_episode_groups`` and ``groups_per_episode_group``.
    Returns a dict with fixed keys:
      num_groups                number of step groups;
      share_rows_in_groups_gt1  fraction of rows whose group has more than one row;
      mean_group_size           rows / groups (mean over groups);
      max_group_size            size of the largest group;
      size_hist                 {group size: number of groups of that size} (exact sizes, sorted).
    """
    labels = np.asarray(step_groups)
    if labels.ndim != 1:
        raise ValueError(f"step_groups must be 1-D (one label per row), got shape {labels.shape}")
    keep = labels >= 0
    sizes = np.unique(labels[keep], return_counts=True)[1]
    out = {
        "num_groups": int(len(sizes)),
        "share_rows_in_groups_gt1": float(sizes[sizes > 1].sum() / sizes.sum()) if len(sizes) else 0.0,
        "mean_group_size": float(sizes.mean()) if len(sizes) else 0.0,
        "max_group_size": int(sizes.max()) if len(sizes) else 0,
        "size_hist": {int(k): int(v) for k, v in zip(*np.unique(sizes, return_counts=True))},
    }
    if episode_ids is not None:
        ep = np.asarray(episode_ids)
        if ep.shape != labels.shape:
            raise ValueError(
                f"episode_ids has shape {ep.shape} but step_groups has {labels.shape}; pass row-aligned arrays"
            )
        n_ep = len(set(ep[keep].tolist()))
        out["num_episode_groups"] = n_ep
        out["groups_per_episode_group"] = float(len(sizes) / n_ep) if n_ep else 0.0
    return out

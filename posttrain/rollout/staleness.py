"""Bounded staleness (seed 001 §2.1): which policy version each iteration's rollout samples from, and how stale the
samples an update trained on were.

With ``max_staleness = s`` the rollout that trains v_{k+1} samples from v_{max(0, k - s)} instead of v_k. For s >= 1
that version was made at least two updates earlier, so on a cluster the rollout of one iteration runs while the
previous update trains (no edge between them in the DAG); the update corrects for the older sampler with the
behavior log-probs every sample carries (PPO ratio, or truncated importance weights with ``train.tis_cap``).
s = 0 is exactly on-policy.

Example:
    >>> [rollout_source(k, 0) for k in range(4)], [rollout_source(k, 1) for k in range(4)]
    ([0, 1, 2, 3], [0, 0, 1, 2])
    >>> import pandas as pd
    >>> staleness_metrics(pd.DataFrame({"policy_version": [2, 2, 1]}), trained_from=3)
    {'train/staleness_mean': 1.3333333333333333, 'train/staleness_max': 2.0}
"""

from __future__ import annotations

import pandas as pd


def rollout_source(version: int, max_staleness: int) -> int:
    """The policy version whose samples train v_{version+1}: v_{max(0, version - max_staleness)}."""
    return max(0, version - max_staleness)


def staleness_metrics(train_rows: pd.DataFrame, trained_from: int) -> dict[str, float]:
    """How many versions behind v_{trained_from} (the policy the update started from) its samples' sampler was:
    mean and max over the rows (0 and 0 when on-policy or without rows)."""
    behind = trained_from - train_rows["policy_version"].astype(int)
    if not len(behind):
        return {"train/staleness_mean": 0.0, "train/staleness_max": 0.0}
    return {"train/staleness_mean": float(behind.mean()), "train/staleness_max": float(behind.max())}

"""Group-relative advantages share one shape: a dense ``[1, n]`` rule applied to each group of flat rewards.

``per_group`` splits N flat rewards by group id (groups may be ragged once infra failures are excluded), applies a
dense rule to each group as a ``[1, n]`` row, and returns the ``[N]`` advantages in input order; ``flat_rows`` marks
the groups whose rewards are all equal (no signal: every estimator gives them exact zeros through ``zero_flat``, so
the trainer skips them); ``checked`` is the ``[G, n]`` float input every dense rule starts from.

Example:
    >>> import torch
    >>> per_group([1.0, 5.0, 0.0], ["a", "b", "a"], lambda row: row - row.mean(dim=1, keepdim=True))
    tensor([ 0.5000,  0.0000, -0.5000])
    >>> flat_rows(torch.tensor([[1.0, 1.0], [1.0, 0.0]]))
    tensor([[ True],
            [False]])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor


def flat_rows(rewards: Tensor) -> Tensor:
    """``[G, n]`` rewards -> ``[G, 1]`` bool, True where a row's rewards are all equal (a single sample included)."""
    return (rewards == rewards[:, :1]).all(dim=1, keepdim=True)


def checked(rewards: Tensor) -> Tensor:
    """``rewards`` as a float ``[G, n]`` tensor; ``ValueError`` naming the shape when it is not 2-D."""
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [G, n], got shape {tuple(rewards.shape)}")
    return rewards.float()


def zero_flat(rewards: Tensor, advantages: Tensor) -> Tensor:
    """``[G, n]`` ``advantages`` with exact zeros on the rows whose ``rewards`` are all equal."""
    return torch.where(flat_rows(rewards), torch.zeros_like(advantages), advantages)


def per_group(rewards: Sequence[float], group_ids: Sequence[str], dense: Callable[[Tensor], Tensor]) -> Tensor:
    """Apply ``dense`` (``[1, n]`` float rewards -> ``[1, n]`` advantages) to each group of flat rewards.

    Args:
        rewards: N rewards.
        group_ids: N group ids; samples sharing an id form one group.
        dense: the rule for one group, given as a ``[1, n]`` row.

    Returns:
        ``[N]`` float advantages in the input order.
    """
    if len(rewards) != len(group_ids):
        raise ValueError(f"{len(rewards)} rewards but {len(group_ids)} group ids")
    out = torch.zeros(len(rewards))
    members: dict[str, list[int]] = {}
    for i, gid in enumerate(group_ids):
        members.setdefault(gid, []).append(i)
    for idx in members.values():
        group = torch.tensor([float(rewards[i]) for i in idx]).unsqueeze(0)
        out[idx] = dense(group).squeeze(0)
    return out

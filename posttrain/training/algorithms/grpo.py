"""GRPO advantages (``TrainConfig.advantage_estimator = "grpo"``, the default): each sample's reward normalized
within its group (the n samples of one env).

``grpo_advantages`` works on a dense ``[G, n]`` reward matrix; ``group_advantages`` (registered as the ``grpo``
advantage estimator, ``TrainConfig.advantage_estimator``) takes the flat rewards and group ids of scored rollouts
(groups may be ragged once infra failures are excluded) and returns one advantage per sample, in input order.
The std is the population std (``correction=0``), so a group of one sample is well defined (advantage 0); a group
whose rewards are all equal carries no signal and gets zeros.

Example:
    >>> import torch
    >>> grpo_advantages(torch.tensor([[1.0, 0.0], [0.5, 0.5]]), eps=0.0)
    tensor([[ 1., -1.],
            [ 0.,  0.]])
    >>> from posttrain.config import TrainConfig
    >>> group_advantages([1.0, 0.0, 1.0, 1.0], ["a", "a", "b", "b"], TrainConfig(advantage_eps=0.0))
    tensor([ 1., -1.,  0.,  0.])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from torch import Tensor

from posttrain.training.algorithms import register_advantage
from posttrain.training.algorithms.grouping import checked, per_group, zero_flat

if TYPE_CHECKING:
    from posttrain.config import TrainConfig


def grpo_advantages(rewards: Tensor, eps: float) -> Tensor:
    """Group-normalized advantages ``(r - mean_g) / (std_g + eps)``.

    Args:
        rewards: ``[G, n]`` float, row g holds the n rewards of group g.
        eps: added to the group std before dividing.

    Returns:
        ``[G, n]`` float advantages; rows whose rewards are all equal are exactly zero.
    """
    rewards = checked(rewards)
    centered = rewards - rewards.mean(dim=1, keepdim=True)
    return zero_flat(rewards, centered / (rewards.std(dim=1, keepdim=True, correction=0) + eps))


@register_advantage("grpo")
def group_advantages(rewards: Sequence[float], group_ids: Sequence[str], cfg: TrainConfig) -> Tensor:
    """Advantages for flat rewards grouped by ``group_ids`` (groups may differ in size).

    Args:
        rewards: N rewards.
        group_ids: N group ids; samples sharing an id are normalized together.
        cfg: ``cfg.advantage_eps`` is added to each group's std before dividing.

    Returns:
        ``[N]`` float advantages in the input order.
    """
    return per_group(rewards, group_ids, lambda group: grpo_advantages(group, cfg.advantage_eps))

"""RLOO advantages (``TrainConfig.advantage_estimator = "rloo"``): each reward minus the mean of the *others*.

REINFORCE leave-one-out (Kool et al. 2019; Ahmadian et al. 2024): the baseline of sample i is the mean reward of the
other n-1 samples of its group, so it does not depend on sample i itself (an unbiased baseline). It equals the
mean-centered reward scaled by ``n / (n - 1)``. A group of one sample has no other sample: advantage 0; a group
whose rewards are all equal gets exact zeros (the trainer skips it).

Example:
    >>> import torch
    >>> rloo_advantages(torch.tensor([[1.0, 0.0, 0.0], [2.0, 2.0, 2.0]]))
    tensor([[ 1.0000, -0.5000, -0.5000],
            [ 0.0000,  0.0000,  0.0000]])
    >>> from posttrain.config import TrainConfig
    >>> leave_one_out_advantages([1.0, 0.0, 7.0], ["a", "a", "b"], TrainConfig())
    tensor([ 1., -1.,  0.])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from posttrain.training.algorithms import register_advantage
from posttrain.training.algorithms.grouping import checked, per_group, zero_flat

if TYPE_CHECKING:
    from posttrain.config import TrainConfig


def rloo_advantages(rewards: Tensor) -> Tensor:
    """Leave-one-out advantages ``r_i - (sum_g - r_i) / (n - 1)``.

    Args:
        rewards: ``[G, n]`` float, row g holds the n rewards of group g.

    Returns:
        ``[G, n]`` float advantages; all zero when ``n == 1`` or a row's rewards are all equal.
    """
    rewards = checked(rewards)
    n = rewards.shape[1]
    if n == 1:
        return torch.zeros_like(rewards)
    others_mean = (rewards.sum(dim=1, keepdim=True) - rewards) / (n - 1)
    return zero_flat(rewards, rewards - others_mean)


@register_advantage("rloo")
def leave_one_out_advantages(rewards: Sequence[float], group_ids: Sequence[str], cfg: TrainConfig) -> Tensor:
    """``[N]`` RLOO advantages of flat rewards grouped by ``group_ids``, in input order (``cfg`` unused)."""
    return per_group(rewards, group_ids, rloo_advantages)

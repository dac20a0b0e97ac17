"""Dr. GRPO advantages (``TrainConfig.advantage_estimator = "dr_grpo"``): each reward minus its group's mean.

Dr. GRPO ("Understanding R1-Zero-Like Training", Liu et al. 2025) drops GRPO's two biases: no division by the
group std (which up-weights groups that are nearly all right or all wrong), and no per-sequence length
normalization in the loss — pair it with ``TrainConfig.loss_aggregation = "seq_mean_token_sum_norm"`` and
``loss_norm_len`` = the generation budget (rollout ``max_new_tokens``). A group whose rewards are all equal gets
exact zeros (the trainer skips it), so does a group of one sample.

Example:
    >>> import torch
    >>> dr_grpo_advantages(torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.5, 0.5, 0.5, 0.5]]))
    tensor([[ 0.7500, -0.2500, -0.2500, -0.2500],
            [ 0.0000,  0.0000,  0.0000,  0.0000]])
    >>> from posttrain.config import TrainConfig
    >>> mean_centered_advantages([1.0, 0.0, 3.0], ["a", "a", "b"], TrainConfig())
    tensor([ 0.5000, -0.5000,  0.0000])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from torch import Tensor

from posttrain.training.algorithms import register_advantage
from posttrain.training.algorithms.grouping import checked, per_group, zero_flat

if TYPE_CHECKING:
    from posttrain.config import TrainConfig


def dr_grpo_advantages(rewards: Tensor) -> Tensor:
    """Mean-centered advantages ``r - mean_g``.

    Args:
        rewards: ``[G, n]`` float, row g holds the n rewards of group g.

    Returns:
        ``[G, n]`` float advantages; rows whose rewards are all equal are exactly zero.
    """
    rewards = checked(rewards)
    return zero_flat(rewards, rewards - rewards.mean(dim=1, keepdim=True))


@register_advantage("dr_grpo")
def mean_centered_advantages(rewards: Sequence[float], group_ids: Sequence[str], cfg: TrainConfig) -> Tensor:
    """``[N]`` Dr. GRPO advantages of flat rewards grouped by ``group_ids``, in input order (``cfg`` unused)."""
    return per_group(rewards, group_ids, dr_grpo_advantages)

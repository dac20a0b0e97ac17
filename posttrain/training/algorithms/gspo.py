"""The GSPO policy loss (``TrainConfig.policy_loss = "gspo"``): PPO-clip on one importance ratio per *sequence*.

GSPO ("Group Sequence Policy Optimization", Zheng et al. 2025) replaces PPO's per-token ratios with the
length-normalized sequence ratio ``s_b = exp(mean_t (logp - behavior_logp))`` over the sequence's trained tokens,
clips it, and applies it to every token of the sequence: per token ``-min(s_b A_b, clip(s_b, 1-low, 1+high) A_b)``.
The gradient reaches every token through ``s_b``: ``d s_b = s_b * mean_t d logp_t``, the same gradient as GSPO's
sequence objective (and as its GSPO-token form) under any aggregation. The clip range is ``clip_range(cfg)``; the
paper's ranges are far tighter than PPO's because a sequence ratio moves little, e.g. ``clip_eps_low = 3e-4``,
``clip_eps_high = 4e-4``. The paper averages over sequences: ``loss_aggregation = "seq_mean_token_mean"``.

Shapes: B sequences, T token positions (``L - 1`` in the trainer).

Example:
    >>> import math, torch
    >>> from posttrain.config import TrainConfig
    >>> behavior = torch.zeros(1, 2)
    >>> logp = torch.tensor([[math.log(1.5), 0.0]])   # token ratios 1.5, 1: the sequence ratio is sqrt(1.5)
    >>> per_token, stats = gspo_loss(logp, behavior, torch.tensor([-1.0]), torch.ones(1, 2), TrainConfig())
    >>> per_token, round(float(stats["ratio_mean"]), 4)
    (tensor([[1.2247, 1.2247]]), 1.2247)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from posttrain.training.algorithms import register_policy_loss
from posttrain.training.algorithms.ppo_clip import clip_range, clipped_surrogate, surrogate_stats

if TYPE_CHECKING:
    from posttrain.config import TrainConfig


@register_policy_loss("gspo")
def gspo_loss(
    logprobs: Tensor,
    behavior_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    cfg: TrainConfig,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Clipped surrogate on the sequence ratio ``s_b = exp(sum_t m_bt (logp - behavior_logp) / sum_t m_bt)``.

    Args:
        logprobs: ``[B, T]`` log-probs under the policy being trained (carries the gradient).
        behavior_logprobs: ``[B, T]`` log-probs under the policy that sampled the tokens (no gradient).
        advantages: ``[B]`` one advantage per sequence.
        mask: ``[B, T]`` 1 for trained tokens, 0 elsewhere.
        cfg: the clip range, ``clip_range(cfg)``.

    Returns:
        ``(per_token, stats)``: the ``[B, T]`` loss, the sequence's value at each of its positions (a sequence
        without tokens has ratio 1), and ``surrogate_stats`` with the sequence ratio as ``ratio_mean``'s ratio and
        the token log-ratios for ``approx_kl``; ``clip_fraction`` is the share of tokens in clipped sequences.
    """
    low, high = clip_range(cfg)
    mask = mask.to(logprobs.dtype)
    log_ratio = (logprobs - behavior_logprobs.to(logprobs.dtype)) * mask  # [B, T]
    seq_log_ratio = log_ratio.sum(dim=-1) / mask.sum(dim=-1).clamp(min=1.0)  # [B]
    ratio = torch.exp(seq_log_ratio).unsqueeze(-1).expand_as(log_ratio)  # [B, T]
    per_token, is_clipped = clipped_surrogate(ratio, advantages.to(logprobs.dtype).unsqueeze(-1), low, high)
    return per_token, surrogate_stats(ratio, log_ratio, is_clipped, mask)

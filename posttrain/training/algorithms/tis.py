"""Truncated importance sampling against the sampler's numerics, and the mismatch it corrects, pure torch.

vLLM (the behavior policy mu, bf16 kernels, its own sampler) and the trainer (pi_old, the same weights before the
update, other kernels) assign the same tokens different log-probs, so "on-policy" rollouts are slightly off-policy.
Following Yao et al. ("Your Efficient RL Framework Secretly Brings You Off-Policy RL Training", 2025), with
``TrainConfig.tis_cap > 0`` the policy loss takes its ratio against the trainer's own pre-update log-probs and each
token's loss is multiplied by the truncated weight ``min(pi_old / mu, tis_cap)`` (``tis_weights``). Whether or not
TIS is on, ``behavior_mismatch`` measures the gap as the per-token k3 estimate of KL(mu || pi_old), logged as
``train/behavior_kl``.

Shapes: B sequences, T token positions (``L - 1`` in the trainer).

Example:
    >>> import math, torch
    >>> old = torch.log(torch.tensor([[0.5, 0.9, 0.3]]))         # the trainer, before the update
    >>> behavior = torch.log(torch.tensor([[0.5, 0.3, 0.9]]))    # vLLM
    >>> tis_weights(old, behavior, torch.ones(1, 3), cap=2.0)    # ratios 1, 3 (capped), 1/3
    tensor([[1.0000, 2.0000, 0.3333]])
    >>> behavior_mismatch(old, behavior, torch.tensor([[1.0, 1.0, 0.0]]))   # (3 - 1) - log 3 at token 1
    tensor([[0.0000, 0.9014, 0.0000]])
"""

from __future__ import annotations

import torch
from torch import Tensor

from posttrain.training.algorithms.kl import k3


def _log_ratio(old_logprobs: Tensor, behavior_logprobs: Tensor, mask: Tensor) -> Tensor:
    """``log pi_old - log mu`` on trained tokens, 0 elsewhere: ``[B, T]``."""
    return (old_logprobs - behavior_logprobs.to(old_logprobs.dtype)) * mask.to(old_logprobs.dtype)


def tis_weights(old_logprobs: Tensor, behavior_logprobs: Tensor, mask: Tensor, cap: float) -> Tensor:
    """Per-token truncated importance weights ``min(exp(old - behavior), cap)``; 1 where ``mask`` is 0.

    Args:
        old_logprobs: ``[B, T]`` the trainer's log-probs of the sampled tokens before the update (no gradient).
        behavior_logprobs: ``[B, T]`` the sampler's (vLLM's) log-probs of the same tokens.
        mask: ``[B, T]`` 1 for trained tokens.
        cap: the truncation, ``TrainConfig.tis_cap``.

    Returns:
        ``[B, T]`` detached weights in ``(0, cap]``.
    """
    return torch.exp(_log_ratio(old_logprobs, behavior_logprobs, mask)).clamp(max=cap).detach()


def behavior_mismatch(old_logprobs: Tensor, behavior_logprobs: Tensor, mask: Tensor) -> Tensor:
    """Per-token k3 estimate of KL(behavior || trainer) on the sampled tokens, ``[B, T]``; 0 where ``mask`` is 0.

    The tokens were sampled from the behavior policy mu, so ``k3(log pi_old - log mu)`` is an unbiased,
    non-negative estimate of KL(mu || pi_old); its token mean is ``train/behavior_kl``.
    """
    return k3(_log_ratio(old_logprobs, behavior_logprobs, mask)).detach()

"""KL estimators from sampled tokens (Schulman, "Approximating KL Divergence"), pure torch, selected by name.

For tokens sampled from p, with the per-token log-ratio ``x = log q - log p``, an estimate of KL(p || q) is
``k1 = -x`` (unbiased, can be negative) or ``k3 = (e^x - 1) - x`` (unbiased, never negative, lower variance).
``KL_ESTIMATORS`` names them for ``TrainConfig.kl_estimator``; ``kl_penalty`` is the per-token penalty to the
frozen reference policy that ``objective.per_token_objective`` adds to the loss (``TrainConfig.kl_coef``).
As a loss term k1's gradient is ``d logp``, zero in expectation over on-policy samples; k3 (the GRPO paper's
choice) pulls the policy toward the reference: its gradient is ``(1 - ref / pi) d logp``.

Shapes: B sequences, T token positions (``L - 1`` in the trainer).

Example:
    >>> import math, torch
    >>> x = torch.tensor([0.0, math.log(2.0)])
    >>> k1(x), k3(x)
    (tensor([-0.0000, -0.6931]), tensor([0.0000, 0.3069]))
    >>> logp, ref = torch.log(torch.tensor([[0.5, 0.25]])), torch.log(torch.tensor([[0.25, 0.9]]))
    >>> kl_penalty(logp, ref, torch.tensor([[1.0, 0.0]]), "k3")   # e^x - 1 - x at x = log(1/2); the masked slot 0
    tensor([[0.1931, 0.0000]])
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor


def k1(log_ratio: Tensor) -> Tensor:
    """``-x``: the plain log-ratio estimate of KL(p || q), per token, for ``x = log q - log p`` (any shape)."""
    return -log_ratio


def k3(log_ratio: Tensor) -> Tensor:
    """``(e^x - 1) - x``: the non-negative estimate of KL(p || q), per token, for ``x = log q - log p``."""
    return torch.exp(log_ratio) - 1.0 - log_ratio


KL_ESTIMATORS: dict[str, Callable[[Tensor], Tensor]] = {"k1": k1, "k3": k3}


def kl_penalty(logprobs: Tensor, ref_logprobs: Tensor, mask: Tensor, estimator: str) -> Tensor:
    """Per-token estimate of KL(policy || reference) on the sampled tokens.

    Args:
        logprobs: ``[B, T]`` log-probs under the policy being trained (carries the gradient).
        ref_logprobs: ``[B, T]`` log-probs under the frozen reference policy (no gradient).
        mask: ``[B, T]`` 1 for trained tokens; elsewhere the log-ratio is zeroed first, so the estimate is 0 there
            (never an overflow from prompt or padding positions).
        estimator: a name of ``KL_ESTIMATORS``.

    Returns:
        ``[B, T]`` per-token KL estimate.
    """
    mask = mask.to(logprobs.dtype)
    return KL_ESTIMATORS[estimator]((ref_logprobs.to(logprobs.dtype) - logprobs) * mask)

"""The PPO-clip policy loss (``TrainConfig.policy_loss = "ppo_clip"``, the default), pure torch.

Shapes: B sequences, T token positions (``L - 1`` in the trainer). ``mask[b, t] = 1`` marks a completion token
that is trained on; prompt and padding positions are 0. It returns the per-token loss and detached token-mean
stats; ``algorithms.aggregate`` turns the per-token loss into the scalar (``TrainConfig.loss_aggregation``).

The clip range may be asymmetric (``clip_range``): ``[1 - clip_eps_low, 1 + clip_eps_high]``, each 0 meaning
``clip_eps``. DAPO's clip-higher raises only the upper bound (e.g. ``clip_eps_high = 0.28``) so that unlikely
tokens with a positive advantage can still grow. ``clipped_surrogate`` and ``surrogate_stats`` are shared with
the other ratio-based losses (``gspo.py``).

Example:
    >>> import torch
    >>> from posttrain.config import TrainConfig
    >>> logp = torch.log(torch.tensor([[0.5, 0.5]]))
    >>> per_token, stats = ppo_clip_loss(logp, logp, torch.tensor([2.0]), torch.ones(1, 2), TrainConfig(clip_eps=0.2))
    >>> per_token, float(stats["clip_fraction"]), float(stats["ratio_mean"])
    (tensor([[-2., -2.]]), 0.0, 1.0)
    >>> clip_range(TrainConfig(clip_eps=0.2, clip_eps_high=0.28))
    (0.2, 0.28)
    >>> per_token, clipped = clipped_surrogate(torch.tensor([[1.5, 0.5]]), torch.tensor([[1.0], [-1.0]]), 0.2, 0.28)
    >>> per_token, clipped
    (tensor([[-1.2800, -0.5000],
            [ 1.5000,  0.8000]]), tensor([[ True, False],
            [False,  True]]))
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from posttrain.training.algorithms import register_policy_loss
from posttrain.training.algorithms.kl import k3

if TYPE_CHECKING:
    from posttrain.config import TrainConfig


def clip_range(cfg: TrainConfig) -> tuple[float, float]:
    """``(low, high)``: the ratio is clipped to ``[1 - low, 1 + high]``; ``clip_eps_low/high = 0`` mean ``clip_eps``."""
    return cfg.clip_eps_low or cfg.clip_eps, cfg.clip_eps_high or cfg.clip_eps


def clipped_surrogate(ratio: Tensor, adv: Tensor, low: float, high: float) -> tuple[Tensor, Tensor]:
    """The clipped surrogate ``-min(r A, clip(r, 1 - low, 1 + high) A)`` and where the clip removes the gradient.

    Args:
        ratio: ``[B, T]`` importance ratios (carry the gradient).
        adv: ``[B, 1]`` advantages (or ``[B, T]``), broadcast against ``ratio``.
        low, high: the clip range.

    Returns:
        ``(per_token [B, T], is_clipped [B, T] bool)``.
    """
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - low, 1.0 + high) * adv
    is_clipped = ((ratio < 1.0 - low) & (adv < 0)) | ((ratio > 1.0 + high) & (adv > 0))
    return -torch.minimum(unclipped, clipped), is_clipped


def surrogate_stats(ratio: Tensor, log_ratio: Tensor, is_clipped: Tensor, mask: Tensor) -> dict[str, Tensor]:
    """Detached token means over ``mask`` (0 when it is empty), all ``[B, T]`` inputs.

    ``clip_fraction``: share of tokens whose gradient the clip removes; ``approx_kl``: the k3 estimate
    ``(e^x - 1) - x`` of KL(behavior || policy) from the per-token log-ratio ``x = log_ratio``; ``ratio_mean``: the
    mean of ``ratio`` (the ratio the surrogate used: per token, or per sequence broadcast over its tokens).
    """
    with torch.no_grad():
        n_tokens = mask.sum().clamp(min=1.0)
        return {
            "clip_fraction": (is_clipped.to(mask.dtype) * mask).sum() / n_tokens,
            "approx_kl": (k3(log_ratio) * mask).sum() / n_tokens,
            "ratio_mean": (ratio * mask).sum() / n_tokens,
        }


@register_policy_loss("ppo_clip")
def ppo_clip_loss(
    logprobs: Tensor,
    behavior_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    cfg: TrainConfig,
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO-clip surrogate ``-min(r A, clip(r, 1-low, 1+high) A)`` with ``r = exp(logp - behavior_logp)`` per token.

    Args:
        logprobs: ``[B, T]`` log-probs under the policy being trained (carries the gradient).
        behavior_logprobs: ``[B, T]`` log-probs under the policy that sampled the tokens (no gradient).
        advantages: ``[B]`` one advantage per sequence, broadcast over its tokens.
        mask: ``[B, T]`` 1 for trained tokens, 0 elsewhere.
        cfg: the clip range, ``clip_range(cfg)``.

    Returns:
        ``(per_token, stats)``: the ``[B, T]`` loss per token (masked positions hold ``-A``: ratio 1) and
        ``surrogate_stats``.
    """
    low, high = clip_range(cfg)
    mask = mask.to(logprobs.dtype)
    log_ratio = (logprobs - behavior_logprobs.to(logprobs.dtype)) * mask
    ratio = torch.exp(log_ratio)
    per_token, is_clipped = clipped_surrogate(ratio, advantages.to(logprobs.dtype).unsqueeze(-1), low, high)
    return per_token, surrogate_stats(ratio, log_ratio, is_clipped, mask)

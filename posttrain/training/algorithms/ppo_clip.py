"""The PPO-clip policy loss (``TrainConfig.policy_loss = "ppo_clip"``, the default), pure torch.

Shapes: B sequences, T token positions (``L - 1`` in the trainer). ``mask[b, t] = 1`` marks a completion token
that is trained on; prompt and padding positions are 0. It returns the per-token loss and detached token-mean
stats; ``algorithms.aggregate`` turns the per-token loss into the scalar (``TrainConfig.loss_aggregation``).

Example:
    >>> import torch
    >>> from posttrain.config import TrainConfig
    >>> logp = torch.log(torch.tensor([[0.5, 0.5]]))
    >>> per_token, stats = ppo_clip_loss(logp, logp, torch.tensor([2.0]), torch.ones(1, 2), TrainConfig(clip_eps=0.2))
    >>> per_token, float(stats["clip_fraction"]), float(stats["ratio_mean"])
    (tensor([[-2., -2.]]), 0.0, 1.0)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from posttrain.training.algorithms import register_policy_loss

if TYPE_CHECKING:
    from posttrain.config import TrainConfig


@register_policy_loss("ppo_clip")
def ppo_clip_loss(
    logprobs: Tensor,
    behavior_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    cfg: TrainConfig,
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO-clip surrogate ``-min(r A, clip(r, 1-eps, 1+eps) A)`` with ``r = exp(logp - behavior_logp)``.

    Args:
        logprobs: ``[B, T]`` log-probs under the policy being trained (carries the gradient).
        behavior_logprobs: ``[B, T]`` log-probs under the policy that sampled the tokens (no gradient).
        advantages: ``[B]`` one advantage per sequence, broadcast over its tokens.
        mask: ``[B, T]`` 1 for trained tokens, 0 elsewhere.
        cfg: ``cfg.clip_eps`` is the clip range eps.

    Returns:
        ``(per_token, stats)``: the ``[B, T]`` loss per token (masked positions hold ``-A``: ratio 1) and detached
        0-dim tensors, token means over the mask (0 when it is empty): ``clip_fraction`` (share of tokens whose
        gradient the clip removes), ``approx_kl`` (k3 estimate of KL(behavior || policy)) and ``ratio_mean``.
    """
    clip_eps = cfg.clip_eps
    mask = mask.to(logprobs.dtype)
    log_ratio = (logprobs - behavior_logprobs.to(logprobs.dtype)) * mask
    ratio = torch.exp(log_ratio)
    adv = advantages.to(logprobs.dtype).unsqueeze(-1)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * adv
    per_token = -torch.minimum(unclipped, clipped)
    with torch.no_grad():
        n_tokens = mask.sum().clamp(min=1.0)
        is_clipped = ((ratio < 1.0 - clip_eps) & (adv < 0)) | ((ratio > 1.0 + clip_eps) & (adv > 0))
        stats = {
            "clip_fraction": (is_clipped.to(mask.dtype) * mask).sum() / n_tokens,
            "approx_kl": (((ratio - 1.0) - log_ratio) * mask).sum() / n_tokens,
            "ratio_mean": (ratio * mask).sum() / n_tokens,
        }
    return per_token, stats

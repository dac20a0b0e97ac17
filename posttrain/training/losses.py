"""Policy-gradient losses (pure torch): per-token log-probabilities and the PPO-clip surrogate.

Shapes: B sequences, T token positions, V vocabulary. ``mask[b, t] = 1`` marks a completion token that is
trained on; prompt and padding positions are 0. The loss is the token-level mean over *all* unmasked tokens
of the batch (DAPO-style), so long completions are not down-weighted by a per-sequence mean.

Example:
    >>> import torch
    >>> logits = torch.zeros(1, 2, 4)                      # uniform over 4 tokens
    >>> token_logprobs(logits, torch.tensor([[0, 3]])).exp()
    tensor([[0.2500, 0.2500]])
    >>> logp = torch.log(torch.tensor([[0.5, 0.5]]))
    >>> loss, stats = ppo_clip_loss(logp, logp, torch.tensor([2.0]), torch.ones(1, 2), clip_eps=0.2)
    >>> float(loss), stats["clip_fraction"], stats["ratio_mean"]
    (-2.0, 0.0, 1.0)
"""

from __future__ import annotations

import torch
from torch import Tensor


def token_logprobs(logits: Tensor, targets: Tensor) -> Tensor:
    """Log-probability of each target token.

    Args:
        logits: ``[B, T, V]`` (any float dtype; computed in float32).
        targets: ``[B, T]`` token ids, ``targets[b, t]`` is the token scored by ``logits[b, t]``.

    Returns:
        ``[B, T]`` float32 log-probabilities.
    """
    logp = torch.log_softmax(logits.float(), dim=-1)
    return logp.gather(-1, targets.long().unsqueeze(-1)).squeeze(-1)


def ppo_clip_loss(
    logprobs: Tensor,
    behavior_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_eps: float,
) -> tuple[Tensor, dict[str, float]]:
    """PPO-clip surrogate ``-min(r A, clip(r, 1-eps, 1+eps) A)`` with ``r = exp(logp - behavior_logp)``.

    Args:
        logprobs: ``[B, T]`` log-probs under the policy being trained (carries the gradient).
        behavior_logprobs: ``[B, T]`` log-probs under the policy that sampled the tokens (no gradient).
        advantages: ``[B]`` one advantage per sequence, broadcast over its tokens.
        mask: ``[B, T]`` 1 for trained tokens, 0 elsewhere.
        clip_eps: clip range.

    Returns:
        ``(loss, stats)``: the scalar loss (token mean over unmasked tokens; 0 when the mask is empty) and
        floats ``clip_fraction`` (share of tokens whose gradient the clip removes), ``approx_kl``
        (k3 estimate of KL(behavior || policy)) and ``ratio_mean``.
    """
    mask = mask.to(logprobs.dtype)
    log_ratio = (logprobs - behavior_logprobs.to(logprobs.dtype)) * mask
    ratio = torch.exp(log_ratio)
    adv = advantages.to(logprobs.dtype).unsqueeze(-1)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * adv
    per_token = -torch.minimum(unclipped, clipped)
    n_tokens = mask.sum().clamp(min=1.0)
    loss = (per_token * mask).sum() / n_tokens
    with torch.no_grad():
        is_clipped = ((ratio < 1.0 - clip_eps) & (adv < 0)) | ((ratio > 1.0 + clip_eps) & (adv > 0))
        stats = {
            "clip_fraction": float((is_clipped.to(mask.dtype) * mask).sum() / n_tokens),
            "approx_kl": float((((ratio - 1.0) - log_ratio) * mask).sum() / n_tokens),
            "ratio_mean": float((ratio * mask).sum() / n_tokens),
        }
    return loss, stats

"""The per-token objective around a policy loss: truncated IS weight, KL penalty, entropy bonus (each optional).

``per_token_objective`` turns the registered policy loss's per-token values into the per-token loss that
``aggregate`` reduces: ``policy_loss * tis_weight + kl_coef * KL(policy || reference) - entropy_coef * entropy``.
Each term is on only when its ``TrainConfig`` field is non-zero (``tis_cap``, ``kl_coef``, ``entropy_coef``); with
all three 0 the policy loss comes back unchanged (the same tensor). The token-mean entropy is always reported.

Shapes: B sequences, T token positions (``L - 1`` in the trainer).

Example:
    >>> import torch
    >>> from posttrain.config import TrainConfig
    >>> pg, logp = torch.tensor([[-1.0, 2.0]]), torch.log(torch.tensor([[0.5, 0.5]]))
    >>> ones, entropy = torch.ones(1, 2), torch.tensor([[0.5, 0.25]])
    >>> loss, stats = per_token_objective(pg, logp, ones, TrainConfig(entropy_coef=0.1), old_logprobs=logp,
    ...                                   behavior_logprobs=logp, ref_logprobs=None, entropy=entropy)
    >>> loss, float(stats["entropy"])
    (tensor([[-1.0500,  1.9750]]), 0.375)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from posttrain.training.algorithms import aggregate
from posttrain.training.algorithms.kl import kl_penalty
from posttrain.training.algorithms.tis import tis_weights

if TYPE_CHECKING:
    from posttrain.config import TrainConfig


def per_token_objective(
    policy_loss: Tensor,
    logprobs: Tensor,
    mask: Tensor,
    cfg: TrainConfig,
    *,
    old_logprobs: Tensor | None,
    behavior_logprobs: Tensor,
    ref_logprobs: Tensor | None,
    entropy: Tensor,
) -> tuple[Tensor, dict[str, Tensor]]:
    """The per-token loss with the terms ``cfg`` turns on, and their detached token-mean stats.

    Args:
        policy_loss: ``[B, T]`` the registered policy loss, per token (carries the gradient).
        logprobs: ``[B, T]`` log-probs under the policy being trained (carries the gradient).
        mask: ``[B, T]`` 1 for trained tokens.
        cfg: ``tis_cap`` (weight ``min(exp(old - behavior), cap)``), ``kl_coef`` and ``kl_estimator``,
            ``entropy_coef``.
        old_logprobs: ``[B, T]`` the trainer's log-probs before the update (no gradient); required when ``tis_cap``.
        behavior_logprobs: ``[B, T]`` the sampler's log-probs; read when ``tis_cap``.
        ref_logprobs: ``[B, T]`` the frozen reference's log-probs (no gradient); required when ``kl_coef``.
        entropy: ``[B, T]`` the policy's entropy per position (with a gradient when ``entropy_coef``).

    Returns:
        ``(per_token [B, T], stats)``: stats are detached 0-dim token means over ``mask``: ``entropy`` always,
        ``kl`` (the estimator's value, before ``kl_coef``) when ``kl_coef`` is set.
    """
    with torch.no_grad():
        stats = {"entropy": aggregate(entropy.detach(), mask, "token_mean")}
    per_token = policy_loss
    if cfg.tis_cap:
        per_token = per_token * tis_weights(old_logprobs, behavior_logprobs, mask, cfg.tis_cap)
    if cfg.kl_coef:
        if ref_logprobs is None:
            raise ValueError("TrainConfig.kl_coef > 0 needs the reference policy's log-probs")
        kl = kl_penalty(logprobs, ref_logprobs, mask, cfg.kl_estimator)
        per_token = per_token + cfg.kl_coef * kl
        with torch.no_grad():
            stats["kl"] = aggregate(kl.detach(), mask, "token_mean")
    if cfg.entropy_coef:
        per_token = per_token - cfg.entropy_coef * entropy
    return per_token, stats

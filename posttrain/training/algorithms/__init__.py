"""The algorithm seam: advantage estimators and policy losses by name, and one loss aggregation.

``TrainConfig.advantage_estimator``, ``TrainConfig.policy_loss`` and ``TrainConfig.loss_aggregation`` name the
pieces of an update. A variant is one function registered with ``@register_advantage(name)`` or
``@register_policy_loss(name)`` in a module of its own in this package (``grpo.py``, ``ppo_clip.py``, ...), never a
new branch in the trainer: every module here is imported before a name is looked up, so a new file is all it takes.
Shapes: N scored samples; B sequences of a micro batch; L-1 target positions.

- An **advantage estimator** maps ``(rewards [N], group_ids [N], cfg)`` to ``[N]`` float advantages, input order.
- A **policy loss** maps ``(logprobs [B, L-1], behavior_logprobs [B, L-1], advantages [B], mask [B, L-1], cfg)``
  to ``(per_token [B, L-1], stats)``: the per-token loss (any value where ``mask`` is 0; ``aggregate`` masks it)
  and a dict of *detached 0-dim tensors* (token means over the mask). Stats stay tensors so a micro step never
  waits on the device; the trainer converts them once per update.
- Around the policy loss, ``objective.per_token_objective`` adds the optional terms that ``TrainConfig`` turns on:
  the truncated IS weight (``tis.py``), the KL penalty to a frozen reference (``kl.py``), the entropy bonus.
- ``aggregate(per_token, mask, mode)`` reduces a per-token loss to the scalar that is backpropagated.

Built in: advantages ``grpo``, ``dr_grpo``, ``rloo``; policy losses ``ppo_clip`` (per-token ratio, clip-higher via
``clip_eps_high``), ``gspo`` (per-sequence ratio).

Example:
    >>> import torch
    >>> per_token = torch.tensor([[1.0, 2.0, 0.0], [4.0, 0.0, 0.0]])   # [B, L-1]
    >>> mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])        # [B, L-1]
    >>> [round(float(aggregate(per_token, mask, mode)), 4) for mode in AGGREGATIONS]
    [2.3333, 2.75, 1.1667]
    >>> @register_policy_loss("negated_logprob")
    ... def negated_logprob(logprobs, behavior_logprobs, advantages, mask, cfg):
    ...     return -logprobs, {}
    >>> get_policy_loss("negated_logprob") is negated_logprob
    True
    >>> get_policy_loss("nope")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: TrainConfig.policy_loss: unknown policy loss 'nope'; known: [...'ppo_clip'...]
    >>> del POLICY_LOSSES["negated_logprob"]
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

from torch import Tensor

if TYPE_CHECKING:
    from posttrain.config import TrainConfig


class AdvantageEstimator(Protocol):
    def __call__(self, rewards: Sequence[float], group_ids: Sequence[str], cfg: TrainConfig) -> Tensor:
        """``rewards`` [N], ``group_ids`` [N] -> ``[N]`` float advantages in the input order."""


class PolicyLoss(Protocol):
    def __call__(self, logprobs: Tensor, behavior_logprobs: Tensor, advantages: Tensor, mask: Tensor,
                 cfg: TrainConfig) -> tuple[Tensor, dict[str, Tensor]]:
        """``[B, L-1]``, ``[B, L-1]``, ``[B]``, ``[B, L-1]`` -> ``(per_token [B, L-1], detached 0-dim stats)``."""


ADVANTAGE_ESTIMATORS: dict[str, AdvantageEstimator] = {}
POLICY_LOSSES: dict[str, PolicyLoss] = {}
AGGREGATIONS = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm")

F = TypeVar("F", bound=Callable)


def _defined_at(fn: Callable) -> str:
    """Where ``fn`` is defined: the same file and name again is a re-import (doctest runners, reloads)."""
    return f"{inspect.getfile(fn)}:{fn.__qualname__}"


def _register(registry: dict, kind: str, name: str) -> Callable[[F], F]:
    def add(fn: F) -> F:
        if name in registry and _defined_at(registry[name]) != _defined_at(fn):
            raise ValueError(f"{kind} {name!r} is already registered ({_defined_at(registry[name])})")
        registry[name] = fn
        return fn

    return add


def register_advantage(name: str) -> Callable[[F], F]:
    """Decorator: register an ``AdvantageEstimator`` as ``TrainConfig.advantage_estimator = name``."""
    return _register(ADVANTAGE_ESTIMATORS, "advantage estimator", name)


def register_policy_loss(name: str) -> Callable[[F], F]:
    """Decorator: register a ``PolicyLoss`` as ``TrainConfig.policy_loss = name``."""
    return _register(POLICY_LOSSES, "policy loss", name)


def _import_variants() -> None:
    """Import every module of this package: each registers its variants as it is imported."""
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")


def _lookup(registry: dict, field: str, kind: str, name: str):
    _import_variants()
    if name not in registry:
        raise ValueError(f"TrainConfig.{field}: unknown {kind} {name!r}; known: {sorted(registry)}")
    return registry[name]


def get_advantage_estimator(name: str) -> AdvantageEstimator:
    """The estimator registered as ``name``; a ``ValueError`` names the config field and the known names."""
    return _lookup(ADVANTAGE_ESTIMATORS, "advantage_estimator", "advantage estimator", name)


def get_policy_loss(name: str) -> PolicyLoss:
    """The policy loss registered as ``name``; a ``ValueError`` names the config field and the known names."""
    return _lookup(POLICY_LOSSES, "policy_loss", "policy loss", name)


def check_aggregation(mode: str) -> str:
    """``mode`` if it is a known aggregation, else a ``ValueError`` naming the config field and the known modes."""
    if mode not in AGGREGATIONS:
        raise ValueError(f"TrainConfig.loss_aggregation: unknown mode {mode!r}; known: {list(AGGREGATIONS)}")
    return mode


def aggregate(per_token: Tensor, mask: Tensor, mode: str, norm_len: float | None = None) -> Tensor:
    """Reduce a per-token loss to a scalar; positions where ``mask`` is 0 never count.

    Args:
        per_token: ``[B, L-1]`` loss per target position.
        mask: ``[B, L-1]`` 1 for trained (completion) tokens, 0 for prompt and padding.
        mode: ``token_mean``: mean over every unmasked token of the batch (long completions weigh more; DAPO);
            ``seq_mean_token_mean``: each sequence's token mean, then the mean over sequences with a token
            (the original GRPO); ``seq_mean_token_sum_norm``: each sequence's token *sum* divided by the constant
            ``norm_len``, then the mean over all B sequences (Dr. GRPO: no length bias from a per-sequence mean).
        norm_len: the Dr. GRPO constant, ideally the generation budget (rollout ``max_new_tokens``); ``None``
            means the mask's width ``L-1`` (the micro batch's padded length, prompt included). Other modes ignore it.

    Returns:
        The 0-dim loss; 0 when the mask is empty.
    """
    check_aggregation(mode)
    mask = mask.to(per_token.dtype)
    masked = per_token * mask
    if mode == "token_mean":
        return masked.sum() / mask.sum().clamp(min=1.0)
    if mode == "seq_mean_token_mean":
        tokens = mask.sum(dim=-1)  # [B]
        seq_means = masked.sum(dim=-1) / tokens.clamp(min=1.0)  # [B]
        has_tokens = (tokens > 0).to(per_token.dtype)  # [B]
        return (seq_means * has_tokens).sum() / has_tokens.sum().clamp(min=1.0)
    divisor = float(mask.shape[-1] if norm_len is None else norm_len)  # mode == "seq_mean_token_sum_norm"
    if divisor <= 0:
        raise ValueError(f"TrainConfig.loss_norm_len: must be > 0 for seq_mean_token_sum_norm, got {divisor}")
    return masked.sum(dim=-1).mean() / divisor

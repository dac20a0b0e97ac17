"""Per-token log-probabilities and entropies from logits (pure torch), and per-sample storage of per-token values.

``token_logprobs`` is what every policy loss scores; ``token_entropy`` is the policy's entropy at each position
(the entropy bonus and ``train/entropy``). Values computed once per update and reused across shuffled micro
batches (the trainer's pre-update and the reference's log-probs) are kept per sample: ``completion_values`` cuts a
``[B, T]`` tensor into each row's completion values, ``place_completion_values`` puts them back for another batch.
Both rely on ``batching.pad_batch``'s layout: each row's mask is one contiguous run over its completion tokens.

Shapes: B sequences, T token positions (``L - 1`` in the trainer), V vocabulary.

Example:
    >>> import torch
    >>> logits = torch.zeros(1, 2, 4)                      # uniform over 4 tokens
    >>> token_logprobs(logits, torch.tensor([[0, 3]])).exp()
    tensor([[0.2500, 0.2500]])
    >>> token_entropy(logits)                              # log 4
    tensor([[1.3863, 1.3863]])
    >>> mask = torch.tensor([[0.0, 1.0, 1.0], [0.0, 0.0, 1.0]])
    >>> rows = completion_values(torch.tensor([[9.0, 1.0, 2.0], [9.0, 9.0, 3.0]]), mask)
    >>> rows
    [tensor([1., 2.]), tensor([3.])]
    >>> place_completion_values(rows[::-1], torch.tensor([[1.0, 0.0], [1.0, 1.0]]))
    tensor([[3., 0.],
            [1., 2.]])
"""

from __future__ import annotations

from collections.abc import Sequence

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


def token_entropy(logits: Tensor) -> Tensor:
    """Entropy ``-sum_v p log p`` (nats) of the distribution at each position.

    Args:
        logits: ``[B, T, V]`` (any float dtype; computed in float32, one ``[B, T, V]`` temporary besides the
            log-softmax: call it under ``torch.no_grad()`` when only the value is needed).

    Returns:
        ``[B, T]`` float32 entropies.
    """
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(dim=-1)


def completion_values(values: Tensor, mask: Tensor) -> list[Tensor]:
    """``[B, T]`` values -> per row, its values where ``mask`` is 1 (in position order), as B 1-D CPU tensors."""
    lengths = mask.sum(dim=-1).long().tolist()
    return list(values.detach()[mask.bool()].cpu().split(lengths))


def place_completion_values(rows: Sequence[Tensor], mask: Tensor) -> Tensor:
    """The inverse of ``completion_values``: ``[B, T]`` float32 with row b's values where ``mask[b]`` is 1, else 0."""
    out = torch.zeros(mask.shape, dtype=torch.float32)
    out[mask.bool()] = torch.cat([row.float() for row in rows])
    return out

"""Per-token log-probabilities of target tokens (pure torch): what every policy loss scores.

Shapes: B sequences, T token positions (``L - 1`` in the trainer), V vocabulary.

Example:
    >>> import torch
    >>> logits = torch.zeros(1, 2, 4)                      # uniform over 4 tokens
    >>> token_logprobs(logits, torch.tensor([[0, 3]])).exp()
    tensor([[0.2500, 0.2500]])
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

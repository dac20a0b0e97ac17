"""Turn rollout samples into right-padded training tensors aligned for next-token scoring.

A sample is ``prompt_token_ids + completion_token_ids`` (length L_i). The model sees ``input_ids[:, :L]``
and position t predicts token t+1, so every target-aligned tensor has ``L - 1`` columns: ``targets[b, t] =
input_ids[b, t + 1]``; ``mask`` is 1 exactly where the target is a trained completion token, and
``behavior_logprobs`` sits at the same positions (0 elsewhere). A completion may carry a loss mask of its own (agent
episodes: the model's tokens 1, the template and tool-observation tokens between its turns 0); without one every
completion token is trained. ``temperatures`` (one per sample, default 1) become ``logit_scale``: the trainer divides
each row's logits by it, so that its log-probs are of the distribution the sampler drew from (0, greedy, scales by 1).

Example:
    >>> b = pad_batch([([1, 5], [7, 2], [-0.5, -0.25])], advantages=[1.0], pad_id=0)
    >>> b.input_ids.tolist(), b.targets.tolist(), b.mask.tolist()
    ([[1, 5, 7, 2]], [[5, 7, 2]], [[0.0, 1.0, 1.0]])
    >>> b.behavior_logprobs.tolist()
    [[0.0, -0.5, -0.25]]
    >>> pad_batch([([1, 5], [7, 9, 2], [-0.5, 0.0, -0.25])], [1.0], 0, loss_masks=[[1, 0, 1]]).mask.tolist()
    [[0.0, 1.0, 0.0, 1.0]]
    >>> pad_batch([([1], [7], [-0.5]), ([1], [2], [-0.1])], [1.0, 1.0], 0, temperatures=[0.6, 0.0]).logit_scale
    tensor([0.6000, 1.0000])

Gradient accumulation weighs each micro batch of an optimizer step by its share of the step's loss denominator:
    >>> masks = [torch.tensor([[1.0, 1.0, 1.0]]), torch.tensor([[1.0, 0.0, 0.0]])]   # 3 tokens, then 1
    >>> accumulation_weights(masks, "token_mean"), accumulation_weights(masks, "seq_mean_token_mean")
    ([0.75, 0.25], [0.5, 0.5])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:
    from posttrain.config import TrainConfig


@dataclass
class Batch:
    input_ids: Tensor  # [B, L] long, right-padded with pad_id
    attention_mask: Tensor  # [B, L] long, 1 on real tokens
    targets: Tensor  # [B, L-1] long, input_ids shifted left by one
    mask: Tensor  # [B, L-1] float, 1 where the target is a completion token
    behavior_logprobs: Tensor  # [B, L-1] float, the sampler's log-prob of each target completion token
    advantages: Tensor  # [B] float
    logit_scale: Tensor  # [B] float, each row's sampling temperature (1 for greedy): the divisor of its logits

    @property
    def num_tokens(self) -> int:
        return int(self.mask.sum().item())


def pad_batch(
    samples: Sequence[tuple[Sequence[int], Sequence[int], Sequence[float]]],
    advantages: Sequence[float],
    pad_id: int,
    loss_masks: Sequence[Sequence[int] | None] | None = None,
    temperatures: Sequence[float] | None = None,
) -> Batch:
    """Right-pad ``(prompt_ids, completion_ids, behavior_logprobs)`` triples into one ``Batch``; ``loss_masks``
    (one 0/1 per completion token, or None for all 1) marks the trained completion tokens.

    ``temperatures``: each sample's sampling temperature (None: all 1, raw log-probs).

    Raises ``ValueError`` when a prompt is empty or a sample's logprobs or loss mask do not match its completion length.
    """
    if len(samples) != len(advantages):
        raise ValueError(f"{len(samples)} samples but {len(advantages)} advantages")
    loss_masks = list(loss_masks) if loss_masks is not None else [None] * len(samples)
    width = max(len(p) + len(c) for p, c, _ in samples)
    n = len(samples)
    input_ids = torch.full((n, width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((n, width), dtype=torch.long)
    mask = torch.zeros((n, width - 1))
    behavior = torch.zeros((n, width - 1))
    for b, ((prompt, completion, logprobs), trained) in enumerate(zip(samples, loss_masks, strict=True)):
        if not prompt:
            raise ValueError(f"sample {b}: empty prompt_token_ids (the BOS token at least is expected)")
        if len(logprobs) != len(completion):
            raise ValueError(f"sample {b}: {len(logprobs)} behavior logprobs for {len(completion)} completion tokens")
        if trained is not None and len(trained) != len(completion):
            raise ValueError(f"sample {b}: {len(trained)} loss mask bits for {len(completion)} completion tokens")
        p, c = len(prompt), len(completion)
        input_ids[b, : p + c] = torch.tensor(list(prompt) + list(completion), dtype=torch.long)
        attention_mask[b, : p + c] = 1
        mask[b, p - 1 : p - 1 + c] = 1.0 if trained is None else torch.tensor(list(trained), dtype=torch.float)
        behavior[b, p - 1 : p - 1 + c] = torch.tensor(list(logprobs), dtype=torch.float)
    return Batch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        targets=input_ids[:, 1:].clone(),
        mask=mask,
        behavior_logprobs=behavior,
        advantages=torch.tensor(list(advantages), dtype=torch.float),
        logit_scale=torch.tensor([t if t > 0 else 1.0 for t in temperatures or [1.0] * n], dtype=torch.float),
    )


def accumulation_weights(masks: Sequence[Tensor], mode: str) -> list[float]:
    """Each micro batch's share of its optimizer step's aggregation denominator; ``masks`` are ``[B_i, L_i-1]``.

    ``aggregate`` divides by the tokens (``token_mean``), the sequences with a token (``seq_mean_token_mean``) or
    all sequences (``seq_mean_token_sum_norm``) of its batch; summing each micro batch's aggregate times its
    weight gives the aggregate of the step's micro batches as one batch (for ``seq_mean_token_sum_norm`` when
    ``loss_norm_len`` fixes the divisor). One micro batch gets exactly 1.0.
    """
    if mode == "token_mean":
        counts = [float(mask.sum()) for mask in masks]
    elif mode == "seq_mean_token_mean":
        counts = [float((mask.sum(dim=-1) > 0).sum()) for mask in masks]
    elif mode == "seq_mean_token_sum_norm":
        counts = [float(mask.shape[0]) for mask in masks]
    else:
        raise ValueError(f"TrainConfig.loss_aggregation: no accumulation weights for {mode!r}")
    total = sum(counts)
    return [count / total for count in counts]


def micro_size(num_samples: int, cfg: TrainConfig, world_size: int = 1) -> int:
    """Sequences per micro batch: ``cfg.micro_batch_size``, or fewer when ``cfg.min_steps`` asks for more optimizer
    steps than that gives (each step takes ``grad_accum_steps * world_size`` micro batches), never below 1.

    >>> from posttrain.config import TrainConfig
    >>> eight = TrainConfig(min_steps=8)
    >>> micro_size(256, eight), micro_size(17, eight), micro_size(17, TrainConfig())
    (32, 3, 32)
    """
    per_step = cfg.grad_accum_steps * world_size
    if not cfg.min_steps or num_samples == 0:
        return cfg.micro_batch_size
    return max(1, min(cfg.micro_batch_size, -(-num_samples // (cfg.min_steps * per_step))))


def split_micros(order: Sequence[int], lengths: Sequence[int], max_samples: int, max_tokens: int = 0
                 ) -> list[list[int]]:
    """``order`` (sample indices, shuffled) cut into micro batches, keeping the order: at most ``max_samples`` samples
    each and, when ``max_tokens > 0``, at most that many padded tokens (its samples times its longest sequence,
    ``lengths[i]`` = prompt + completion tokens of sample ``i``); a sample longer than ``max_tokens`` alone.

    >>> split_micros([0, 1, 2, 3], [10, 10, 30, 10], max_samples=4)
    [[0, 1, 2, 3]]
    >>> split_micros([0, 1, 2, 3], [10, 10, 30, 10], max_samples=4, max_tokens=40)
    [[0, 1], [2], [3]]
    >>> split_micros([3, 2, 1, 0], [10, 10, 30, 10], max_samples=2)
    [[3, 2], [1, 0]]
    """
    micros: list[list[int]] = []
    longest = 0
    for index in order:
        grown = max(longest, lengths[index])
        full = micros and (len(micros[-1]) >= max_samples
                           or (max_tokens > 0 and (len(micros[-1]) + 1) * grown > max_tokens))
        if not micros or full:
            micros.append([])
            grown = lengths[index]
        micros[-1].append(index)
        longest = grown
    return micros


def shard_steps(num_micros: int, per_step: int, world_size: int) -> list[list[list[int]]]:
    """The optimizer steps of a data-parallel update: ``[step][rank]`` -> the micro batch indices that rank runs.

    Each step takes the next ``per_step * world_size`` micro batches (``per_step``: gradient accumulation steps)
    and deals them round robin, so one process with ``per_step * world_size`` accumulation steps takes exactly the
    same steps. In the last step some ranks may get fewer; ``lockstep`` pads them.

    >>> shard_steps(5, 1, 2)
    [[[0], [1]], [[2], [3]], [[4], []]]
    >>> shard_steps(5, 2, 1)
    [[[0, 1]], [[2, 3]], [[4]]]
    """
    width = per_step * world_size
    return [[list(range(lo, min(lo + width, num_micros)))[rank::world_size] for rank in range(world_size)]
            for lo in range(0, num_micros, width)]


def lockstep(shards: Sequence[Sequence[int]], rank: int) -> list[tuple[int, bool]]:
    """``rank``'s ``(micro index, real)`` passes in one step, padded to the busiest rank's count with passes that
    repeat the step's first micro batch and count for nothing (``real`` False): every rank runs as many forward
    and backward passes as the others, as ZeRO's collectives need.

    >>> lockstep([[4], []], 1)
    [(4, False)]
    """
    passes = max(len(shard) for shard in shards)
    first = next(shard[0] for shard in shards if shard)
    own = [(index, True) for index in shards[rank]]
    return own + [(first, False)] * (passes - len(own))

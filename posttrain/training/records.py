"""The samples an update trained on, packed into a few flat tensors: the bulk of a replay record (``training.replay``).

A version that does not write its training state keeps the samples that replay its update. Pickled as Python objects
they take ~16 bytes per completion token; packed, each distinct prompt is stored once (a group's samples share it),
token ids as int16 or int32 (whichever holds the vocabulary) and the behavior log-probs as float32 when that holds
them exactly (vLLM computes them in float32), else float64: ~6 bytes per token. Unpacking gives back equal samples,
field for field, so a replay trains on exactly what the update did.

Example:
    >>> from posttrain.training.samples import TrainSample
    >>> samples = [TrainSample([1, 5, 9], [17, 2], [-1.25, -0.5], 1.0, "g0"),
    ...            TrainSample([1, 5, 9], [23], [-2.0], -1.0, "g0", loss_mask=[1], temperature=0.6)]
    >>> packed = pack(samples)
    >>> packed["prompt_tokens"].tolist(), packed["logprobs"].dtype   # the shared prompt once; exact in float32
    ([1, 5, 9], torch.float32)
    >>> unpack(packed) == samples
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from posttrain.training.samples import TrainSample


def pack(samples: Sequence[TrainSample]) -> dict[str, Any]:
    """``samples`` as flat tensors (``[N]`` per-sample fields, ``[T]`` concatenated tokens; the prompts' tokens
    ``[P]``, each distinct prompt once) and the list of group ids."""
    prompts: dict[tuple[int, ...], int] = {}
    prompt_of = [prompts.setdefault(tuple(s.prompt_token_ids), len(prompts)) for s in samples]
    groups: dict[str, int] = {}
    group_of = [groups.setdefault(s.group_id, len(groups)) for s in samples]
    logprobs = [x for s in samples for x in s.behavior_logprobs]
    as_float32 = torch.tensor(logprobs, dtype=torch.float32)
    exact = as_float32.double().tolist() == logprobs
    masked = [s for s in samples if s.loss_mask is not None]
    return {
        "prompt_tokens": _ids([t for prompt in prompts for t in prompt]),
        "prompt_lengths": _ids([len(prompt) for prompt in prompts]),
        "prompt_of": _ids(prompt_of),
        "completion_tokens": _ids([t for s in samples for t in s.completion_token_ids]),
        "completion_lengths": _ids([len(s.completion_token_ids) for s in samples]),
        "logprobs": as_float32 if exact else torch.tensor(logprobs, dtype=torch.float64),
        "advantage": torch.tensor([s.advantage for s in samples], dtype=torch.float64),
        "temperature": torch.tensor([s.temperature for s in samples], dtype=torch.float64),
        "groups": list(groups), "group_of": _ids(group_of),
        "has_mask": torch.tensor([s.loss_mask is not None for s in samples], dtype=torch.bool),
        "masks": torch.tensor([m for s in masked for m in s.loss_mask], dtype=torch.int8),
    }


def unpack(packed: dict[str, Any]) -> list[TrainSample]:
    """The samples ``pack`` packed, equal field for field."""
    from posttrain.training.samples import TrainSample

    prompt_tokens = packed["prompt_tokens"].tolist()
    prompts = _split(prompt_tokens, packed["prompt_lengths"].tolist())
    lengths = packed["completion_lengths"].tolist()
    completions = _split(packed["completion_tokens"].tolist(), lengths)
    logprobs = _split(packed["logprobs"].double().tolist(), lengths)
    has_mask = packed["has_mask"].tolist()
    masks = iter(_split(packed["masks"].tolist(), [n for n, has in zip(lengths, has_mask) if has]))
    return [TrainSample(prompt_token_ids=list(prompts[p]), completion_token_ids=completion, behavior_logprobs=lp,
                        advantage=advantage, group_id=packed["groups"][g], loss_mask=next(masks) if has else None,
                        temperature=temperature)
            for p, completion, lp, advantage, g, has, temperature in zip(
                packed["prompt_of"].tolist(), completions, logprobs, packed["advantage"].tolist(),
                packed["group_of"].tolist(), has_mask, packed["temperature"].tolist())]


def _ids(values: list[int]) -> torch.Tensor:
    """Token ids or indices in the smallest signed dtype that holds them (int16 for a vocabulary under 32k)."""
    small = not values or (min(values) >= -2 ** 15 and max(values) < 2 ** 15)
    return torch.tensor(values, dtype=torch.int16 if small else torch.int32)


def _split(flat: list, lengths: list[int]) -> list[list]:
    out, start = [], 0
    for n in lengths:
        out.append(flat[start:start + n])
        start += n
    return out

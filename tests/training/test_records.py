"""A replay record's samples come back equal, field for field, and smaller than the objects they pack."""

from __future__ import annotations

import io

import pytest
import torch

from posttrain.training.records import pack, unpack
from posttrain.training.samples import TrainSample
from tests.training.test_checkpoints import _samples


@pytest.mark.unit
def test_packed_samples_come_back_equal_and_a_group_stores_its_prompt_once():
    samples = _samples(0) + _samples(1)
    samples[3] = TrainSample([1, 7], [5, 6, 7], [-0.1, -0.2, -1e-300], 0.25, "agent", loss_mask=[1, 0, 1],
                             temperature=0.6)  # float64 log-probs float32 cannot hold, a masked window
    samples.append(TrainSample([1, 7], [], [], 0.0, "agent", loss_mask=[]))  # an empty completion
    packed = pack(samples)
    assert unpack(packed) == samples
    assert packed["logprobs"].dtype == torch.float64
    assert unpack(pack(_samples(2)))[0].behavior_logprobs == [-6.0] * len(_samples(2)[0].completion_token_ids)
    assert pack(_samples(2))["logprobs"].dtype == torch.float32

    # the demo's batch: 32 prompts x 8 samples, 40 completion tokens of a 1k vocabulary, float32 log-probs
    gen = torch.Generator().manual_seed(0)
    batch = [TrainSample(torch.randint(3, 1000, (30,), generator=torch.Generator().manual_seed(g)).tolist(),
                         torch.randint(3, 1000, (40,), generator=gen).tolist(),
                         (-torch.rand(40, generator=gen)).double().tolist(), float(i - 4), f"g{g}")
             for g in range(32) for i in range(8)]
    packed = pack(batch)
    assert packed["prompt_tokens"].numel() == 32 * 30
    assert unpack(torch.load(io.BytesIO(_serialized(packed)), weights_only=True)) == batch
    assert len(_serialized(packed)) < len(_serialized([vars(s) for s in batch])) / 2


def _serialized(obj) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()

"""Batch padding: completion tokens, behavior log-probs and the mask line up for next-token scoring.

Accumulation weights: the weighted sum of micro batches' aggregates is the aggregate of their union.
"""

import pytest
import torch

from posttrain.training.algorithms import AGGREGATIONS, aggregate
from posttrain.training.batching import accumulation_weights, pad_batch

pytestmark = pytest.mark.unit


def test_pad_batch_aligns_completion_tokens():
    b = pad_batch([([0, 5, 6], [7, 1], [-0.5, -0.25]), ([0, 5], [9, 8, 1], [-1.0, -2.0, -3.0])],
                  advantages=[1.0, -1.0], pad_id=2)
    assert b.input_ids.tolist() == [[0, 5, 6, 7, 1], [0, 5, 9, 8, 1]]
    assert b.attention_mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 1, 1]]
    assert b.targets.tolist() == [[5, 6, 7, 1], [5, 9, 8, 1]]
    assert b.mask.tolist() == [[0, 0, 1, 1], [0, 1, 1, 1]]
    assert b.behavior_logprobs.tolist() == [[0, 0, -0.5, -0.25], [0, -1.0, -2.0, -3.0]]
    assert b.num_tokens == 5


def test_pad_batch_pads_right():
    b = pad_batch([([0, 5], [7], [-0.5]), ([0, 5, 6, 6], [1], [-0.1])], advantages=[1.0, 1.0], pad_id=2)
    assert b.input_ids[0].tolist() == [0, 5, 7, 2, 2]
    assert b.attention_mask[0].tolist() == [1, 1, 1, 0, 0]
    assert b.mask[0].tolist() == [0, 1, 0, 0]


def test_pad_batch_rejects_logprob_length_mismatch():
    with pytest.raises(ValueError, match="sample 0: 1 behavior logprobs for 2 completion tokens"):
        pad_batch([([0], [7, 1], [-0.5])], advantages=[1.0], pad_id=2)


@pytest.mark.parametrize("mode", AGGREGATIONS)
def test_weighted_micro_batch_losses_sum_to_the_loss_of_their_union(mode):
    gen = torch.Generator().manual_seed(0)
    per_token = torch.randn(5, 6, generator=gen)  # [B, L-1]
    mask = torch.tensor([[0, 1, 1, 1, 1, 1], [0, 0, 1, 0, 0, 0], [0, 1, 1, 0, 0, 0],
                         [0, 0, 0, 0, 0, 0], [1, 1, 1, 1, 0, 0]], dtype=torch.float)  # one empty sequence
    parts = [slice(0, 2), slice(2, 5)]
    weights = accumulation_weights([mask[part] for part in parts], mode)
    accumulated = sum(w * aggregate(per_token[part], mask[part], mode, 6.0) for w, part in zip(weights, parts))
    assert float(accumulated) == pytest.approx(float(aggregate(per_token, mask, mode, 6.0)), rel=1e-6)
    assert accumulation_weights([mask], mode) == [1.0]


def test_accumulation_weights_reject_an_unknown_aggregation():
    with pytest.raises(ValueError, match="no accumulation weights for 'nope'"):
        accumulation_weights([torch.ones(1, 2)], "nope")

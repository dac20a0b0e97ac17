"""Token log-probabilities against log-softmax computed by hand."""

import math

import pytest
import torch

from posttrain.training.batching import pad_batch
from posttrain.training.logprobs import completion_values, place_completion_values, token_entropy, token_logprobs

pytestmark = pytest.mark.unit


def test_token_logprobs_matches_log_softmax():
    logits = torch.tensor([[[0.0, math.log(3.0)], [2.0, 2.0]]])  # p = [1/4, 3/4], then [1/2, 1/2]
    lp = token_logprobs(logits, torch.tensor([[1, 0]]))
    assert torch.allclose(lp, torch.log(torch.tensor([[0.75, 0.5]])))


def test_token_entropy_hand_computed():
    logits = torch.tensor([[[0.0, math.log(3.0)], [5.0, 5.0]]])  # p = [1/4, 3/4], then uniform over 2
    expected = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    assert torch.allclose(token_entropy(logits), torch.tensor([[expected, math.log(2.0)]]))


def test_token_entropy_of_bf16_logits_is_float32():
    assert token_entropy(torch.zeros(2, 3, 8, dtype=torch.bfloat16)).dtype == torch.float32


def test_completion_values_round_trip_through_another_batch_layout():
    samples = [([1, 5], [7, 2, 3], [-0.5, -0.25, -0.125]), ([4], [6], [-1.0]), ([1, 2, 3], [], [])]
    first = pad_batch(samples, [1.0, 1.0, 1.0], pad_id=0)
    rows = completion_values(first.behavior_logprobs, first.mask)
    assert [row.tolist() for row in rows] == [[-0.5, -0.25, -0.125], [-1.0], []]
    reordered = pad_batch(samples[::-1], [1.0, 1.0, 1.0], pad_id=0)  # another micro batch: other widths and rows
    assert torch.equal(place_completion_values(rows[::-1], reordered.mask), reordered.behavior_logprobs)

"""Token log-probabilities against log-softmax computed by hand."""

import math

import pytest
import torch

from posttrain.training.logprobs import token_logprobs

pytestmark = pytest.mark.unit


def test_token_logprobs_matches_log_softmax():
    logits = torch.tensor([[[0.0, math.log(3.0)], [2.0, 2.0]]])  # p = [1/4, 3/4], then [1/2, 1/2]
    lp = token_logprobs(logits, torch.tensor([[1, 0]]))
    assert torch.allclose(lp, torch.log(torch.tensor([[0.75, 0.5]])))

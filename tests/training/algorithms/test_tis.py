"""Truncated importance weights and the behavior mismatch against hand-computed values."""

import math

import pytest
import torch

from posttrain.training.algorithms.tis import behavior_mismatch, tis_weights

pytestmark = pytest.mark.unit

OLD = torch.log(torch.tensor([[0.5, 0.9, 0.3, 0.2]]))  # the trainer's log-probs before the update
BEHAVIOR = torch.log(torch.tensor([[0.5, 0.3, 0.9, 0.8]]))  # vLLM's
MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0]])


def test_tis_weights_hand_computed():
    # ratios old / behavior: 1, 3 (capped at 2), 1/3; the masked position gets 1
    weights = tis_weights(OLD, BEHAVIOR, MASK, cap=2.0)
    assert torch.allclose(weights, torch.tensor([[1.0, 2.0, 1 / 3, 1.0]]), atol=1e-6)
    assert not weights.requires_grad


def test_tis_weights_are_detached_even_from_a_graph():
    old = OLD.clone().requires_grad_(True)
    assert not tis_weights(old, BEHAVIOR, MASK, cap=2.0).requires_grad


def test_behavior_mismatch_is_k3_of_the_log_ratio():
    k3 = lambda r: (r - 1) - math.log(r)  # noqa: E731
    mismatch = behavior_mismatch(OLD, BEHAVIOR, MASK)
    assert torch.allclose(mismatch, torch.tensor([[0.0, k3(3.0), k3(1 / 3), 0.0]]), atol=1e-6)
    assert (mismatch >= 0).all()


def test_no_mismatch_when_the_numerics_agree():
    assert torch.equal(behavior_mismatch(OLD, OLD, MASK), torch.zeros(1, 4))
    assert torch.equal(tis_weights(OLD, OLD, MASK, cap=2.0), torch.ones(1, 4))

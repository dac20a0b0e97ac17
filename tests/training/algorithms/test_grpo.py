"""GRPO advantages against hand-computed values (dense and ragged groups)."""

import math

import pytest
import torch

from posttrain.config import TrainConfig
from posttrain.training.algorithms.grpo import group_advantages, grpo_advantages

pytestmark = pytest.mark.unit


EPS_0 = TrainConfig(advantage_eps=0.0)


def test_grpo_advantages_hand_computed():
    adv = grpo_advantages(torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 2.0, 3.0, 2.0]]), eps=0.0)
    # row 0: mean 0.5, population std 0.5; row 1: mean 2, std sqrt(0.5)
    s = math.sqrt(0.5)
    expected = torch.tensor([[1.0, -1.0, -1.0, 1.0], [-1 / s, 0.0, 1 / s, 0.0]])
    assert torch.allclose(adv, expected, atol=1e-6)


def test_grpo_advantages_eps_shrinks():
    adv = grpo_advantages(torch.tensor([[1.0, 0.0]]), eps=0.5)
    assert torch.allclose(adv, torch.tensor([[0.5, -0.5]]))


def test_all_equal_group_is_zero():
    adv = grpo_advantages(torch.tensor([[0.7, 0.7, 0.7], [0.0, 0.0, 0.0]]), eps=1e-6)
    assert torch.equal(adv, torch.zeros(2, 3))


def test_grpo_advantages_rejects_flat_input():
    with pytest.raises(ValueError, match=r"\[G, n\]"):
        grpo_advantages(torch.tensor([1.0, 0.0]), eps=0.0)


def test_group_advantages_ragged_groups_keep_order():
    adv = group_advantages([1.0, 5.0, 0.0, 5.0, 3.0, 2.0, 1.0], ["a", "b", "a", "b", "c", "d", "d"], EPS_0)
    assert torch.allclose(adv, torch.tensor([1.0, 0.0, -1.0, 0.0, 0.0, 1.0, -1.0]))


def test_group_advantages_length_mismatch():
    with pytest.raises(ValueError, match="2 rewards but 1 group ids"):
        group_advantages([1.0, 0.0], ["a"], EPS_0)

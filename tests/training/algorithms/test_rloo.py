"""RLOO advantages against hand-computed values: each reward minus the mean of the others of its group."""

import pytest
import torch

from posttrain.config import TrainConfig
from posttrain.training.algorithms.rloo import leave_one_out_advantages, rloo_advantages

pytestmark = pytest.mark.unit


def test_rloo_advantages_hand_computed():
    adv = rloo_advantages(torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 2.0, 3.0, 2.0]]))
    # row 0: a 1 sees the others' mean 1/3, a 0 sees 2/3; row 1 (sum 8): 1 - 7/3, 2 - 6/3, 3 - 5/3
    expected = torch.tensor([[2 / 3, -2 / 3, -2 / 3, 2 / 3], [-4 / 3, 0.0, 4 / 3, 0.0]])
    assert torch.allclose(adv, expected, atol=1e-6)


def test_rloo_is_the_centered_reward_scaled_by_n_over_n_minus_1():
    rewards = torch.tensor([[0.3, 0.9, 0.1, 0.5, 0.2]])
    centered = rewards - rewards.mean(dim=1, keepdim=True)
    assert torch.allclose(rloo_advantages(rewards), centered * 5 / 4, atol=1e-6)


def test_a_group_of_one_and_all_equal_groups_are_exactly_zero():
    assert torch.equal(rloo_advantages(torch.tensor([[1.0], [0.0]])), torch.zeros(2, 1))
    assert torch.equal(rloo_advantages(torch.tensor([[0.7, 0.7, 0.7]])), torch.zeros(1, 3))


def test_a_pair_is_plus_minus_the_difference():
    assert torch.equal(rloo_advantages(torch.tensor([[1.0, 0.25]])), torch.tensor([[0.75, -0.75]]))


def test_rejects_flat_input():
    with pytest.raises(ValueError, match=r"\[G, n\]"):
        rloo_advantages(torch.tensor([1.0, 0.0]))


def test_ragged_groups_keep_order():
    adv = leave_one_out_advantages([1.0, 5.0, 0.0, 3.0, 2.0, 1.0, 0.0], list("abacddd"), TrainConfig())
    # a: [1, 0] -> +-1; b, c: alone -> 0; d: [2, 1, 0] -> 2 - 0.5, 1 - 1, 0 - 1.5
    assert torch.allclose(adv, torch.tensor([1.0, 0.0, -1.0, 0.0, 1.5, 0.0, -1.5]))

"""Dr. GRPO advantages against hand-computed values: the group mean subtracted, no std division."""

import pytest
import torch

from posttrain.config import TrainConfig
from posttrain.training.algorithms.dr_grpo import dr_grpo_advantages, mean_centered_advantages

pytestmark = pytest.mark.unit


def test_dr_grpo_advantages_hand_computed():
    adv = dr_grpo_advantages(torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 2.0, 3.0, 2.0]]))
    # row 0: mean 0.5; row 1: mean 2 (GRPO would divide by the stds 0.5 and sqrt(0.5))
    assert torch.allclose(adv, torch.tensor([[0.5, -0.5, -0.5, 0.5], [-1.0, 0.0, 1.0, 0.0]]))


def test_all_equal_groups_and_single_samples_are_exactly_zero():
    adv = dr_grpo_advantages(torch.tensor([[0.7, 0.7, 0.7], [0.1, 0.1, 0.1]]))
    assert torch.equal(adv, torch.zeros(2, 3))
    assert torch.equal(dr_grpo_advantages(torch.tensor([[0.3]])), torch.zeros(1, 1))


def test_rejects_flat_input():
    with pytest.raises(ValueError, match=r"\[G, n\]"):
        dr_grpo_advantages(torch.tensor([1.0, 0.0]))


def test_ragged_groups_keep_order():
    adv = mean_centered_advantages([1.0, 5.0, 0.0, 5.0, 3.0, 4.0, 1.0, 1.0], list("ababcddb"), TrainConfig())
    # a: [1, 0] mean 0.5; b: [5, 5, 1] mean 11/3; c: [3] alone; d: [4, 1] mean 2.5
    expected = torch.tensor([0.5, 4 / 3, -0.5, 4 / 3, 0.0, 1.5, -1.5, -8 / 3])
    assert torch.allclose(adv, expected, atol=1e-6)


def test_length_mismatch():
    with pytest.raises(ValueError, match="2 rewards but 1 group ids"):
        mean_centered_advantages([1.0, 0.0], ["a"], TrainConfig())

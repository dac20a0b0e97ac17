"""The PPO-clip loss against hand-computed values and gradients."""

import math

import pytest
import torch

from posttrain.config import TrainConfig
from posttrain.training.algorithms import aggregate
from posttrain.training.algorithms.ppo_clip import clip_range, ppo_clip_loss

pytestmark = pytest.mark.unit


CLIP_02 = TrainConfig(clip_eps=0.2)


def _ratios_case():
    """Seq 0 has A=+1, seq 1 has A=-1; ratios chosen on both sides of the clip range (eps=0.2)."""
    ratios = torch.tensor([[1.5, 0.5, 3.0], [0.5, 1.5, 1.0]])
    behavior = torch.full((2, 3), -1.0)
    logprobs = (behavior + torch.log(ratios)).requires_grad_(True)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])  # the 3.0 ratio is padding
    return logprobs, behavior, torch.tensor([1.0, -1.0]), mask


def _ppo_clip_token_mean(logprobs, behavior, adv, mask):
    per_token, stats = ppo_clip_loss(logprobs, behavior, adv, mask, CLIP_02)
    return aggregate(per_token, mask, "token_mean"), {key: float(value) for key, value in stats.items()}


def test_ppo_clip_loss_hand_computed():
    logprobs, behavior, adv, mask = _ratios_case()
    per_token, _ = ppo_clip_loss(logprobs, behavior, adv, mask, CLIP_02)
    # per token -min(rA, clip(r)A): A=+1: r=1.5 -> -1.2 (clipped high), r=0.5 -> -0.5;
    # A=-1: r=0.5 -> +0.8 (clipped low), r=1.5 -> +1.5, r=1.0 -> +1.0; the masked position holds -A (ratio 1)
    assert torch.allclose(per_token, torch.tensor([[-1.2, -0.5, -1.0], [0.8, 1.5, 1.0]]), atol=1e-6)
    loss, stats = _ppo_clip_token_mean(logprobs, behavior, adv, mask)
    assert float(loss.detach()) == pytest.approx((-1.2 - 0.5 + 0.8 + 1.5 + 1.0) / 5, abs=1e-6)  # 5 unmasked tokens
    assert stats["clip_fraction"] == pytest.approx(2 / 5)
    assert stats["ratio_mean"] == pytest.approx((1.5 + 0.5 + 0.5 + 1.5 + 1.0) / 5, abs=1e-6)
    k3 = lambda r: (r - 1) - math.log(r)  # noqa: E731
    assert stats["approx_kl"] == pytest.approx((2 * k3(1.5) + 2 * k3(0.5)) / 5, abs=1e-6)


def test_ppo_clip_gradient_zero_where_clipped_and_masked():
    logprobs, behavior, adv, mask = _ratios_case()
    loss, _ = _ppo_clip_token_mean(logprobs, behavior, adv, mask)
    loss.backward()
    # d/dlogp of -r*A/N is -r*A/N for unclipped tokens; clipped and masked tokens get no gradient
    expected = torch.tensor([[0.0, -0.5 / 5, 0.0], [0.0, 1.5 / 5, 1.0 / 5]])
    assert torch.allclose(logprobs.grad, expected, atol=1e-6)


def test_ppo_clip_on_policy_is_policy_gradient():
    logprobs = torch.log(torch.tensor([[0.2, 0.4]]))
    loss, stats = _ppo_clip_token_mean(logprobs, logprobs.clone(), torch.tensor([2.0]), torch.ones(1, 2))
    assert float(loss.detach()) == pytest.approx(-2.0)
    assert stats == pytest.approx({"clip_fraction": 0.0, "approx_kl": 0.0, "ratio_mean": 1.0})


def test_ppo_clip_empty_mask_is_zero():
    lp = torch.zeros(2, 3, requires_grad=True)
    loss, stats = _ppo_clip_token_mean(lp, torch.zeros(2, 3), torch.tensor([1.0, -1.0]), torch.zeros(2, 3))
    assert float(loss.detach()) == 0.0
    assert stats["clip_fraction"] == 0.0


def _clip_higher_case():
    """A=+1 then A=-1; the 1.25 ratio is inside clip-higher's range (0.2, 0.28) but outside the symmetric one."""
    ratios = torch.tensor([[1.5, 0.5, 1.25], [0.5, 1.5, 0.75]])
    behavior = torch.full((2, 3), -1.0)
    logprobs = (behavior + torch.log(ratios)).requires_grad_(True)
    return logprobs, behavior, torch.tensor([1.0, -1.0]), torch.ones(2, 3)


def test_clip_range_defaults_to_clip_eps_on_both_sides():
    assert clip_range(TrainConfig(clip_eps=0.2)) == (0.2, 0.2)
    assert clip_range(TrainConfig(clip_eps=0.2, clip_eps_high=0.28)) == (0.2, 0.28)
    assert clip_range(TrainConfig(clip_eps=0.2, clip_eps_low=0.1)) == (0.1, 0.2)


def test_clip_higher_hand_computed():
    logprobs, behavior, adv, mask = _clip_higher_case()
    cfg = TrainConfig(clip_eps=0.2, clip_eps_high=0.28)
    per_token, stats = ppo_clip_loss(logprobs, behavior, adv, mask, cfg)
    # A=+1: 1.5 -> -1.28 (clipped at 1 + 0.28), 0.5 -> -0.5, 1.25 -> -1.25 (inside: keeps its gradient);
    # A=-1: 0.5 -> 0.8 (clipped at 1 - 0.2), 1.5 -> 1.5, 0.75 -> 0.8 (clipped)
    assert torch.allclose(per_token, torch.tensor([[-1.28, -0.5, -1.25], [0.8, 1.5, 0.8]]), atol=1e-6)
    assert float(stats["clip_fraction"]) == pytest.approx(3 / 6)
    aggregate(per_token, mask, "token_mean").backward()
    expected = torch.tensor([[0.0, -0.5, -1.25], [0.0, 1.5, 0.0]]) / 6
    assert torch.allclose(logprobs.grad, expected, atol=1e-6)


def test_symmetric_clip_removes_the_gradient_clip_higher_keeps():
    logprobs, behavior, adv, mask = _clip_higher_case()
    per_token, stats = ppo_clip_loss(logprobs, behavior, adv, mask, CLIP_02)
    assert float(per_token[0, 2]) == pytest.approx(-1.2)
    assert float(stats["clip_fraction"]) == pytest.approx(4 / 6)


def test_a_lower_clip_eps_low_clips_more_negative_advantage_tokens():
    logprobs, behavior, adv, mask = _clip_higher_case()
    per_token, _ = ppo_clip_loss(logprobs, behavior, adv, mask, TrainConfig(clip_eps=0.2, clip_eps_low=0.1))
    # A=-1, bounds [0.9, 1.2]: 0.5 -> 0.9, 0.75 -> 0.9; A=+1: 1.5 -> -1.2, 1.25 -> -1.2
    assert torch.allclose(per_token, torch.tensor([[-1.2, -0.5, -1.2], [0.9, 1.5, 0.9]]), atol=1e-6)

"""The GSPO loss against hand-computed values: one clipped ratio per sequence, its gradient spread over the tokens."""

import math

import pytest
import torch

from posttrain.config import TrainConfig
from posttrain.training.algorithms import aggregate
from posttrain.training.algorithms.gspo import gspo_loss
from posttrain.training.algorithms.ppo_clip import ppo_clip_loss

pytestmark = pytest.mark.unit

CLIP_02 = TrainConfig(clip_eps=0.2)


def _case():
    """Seq 0 (A=+1): token log-ratios ln 2, 0 and a masked 5.0 -> s = sqrt(2); seq 1 (A=-1): three ln 0.9 -> s = 0.9."""
    behavior = torch.full((2, 3), -1.0)
    log_ratio = torch.tensor([[math.log(2.0), 0.0, 5.0], [math.log(0.9)] * 3])
    logprobs = (behavior + log_ratio).requires_grad_(True)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    return logprobs, behavior, torch.tensor([1.0, -1.0]), mask


def test_gspo_loss_hand_computed():
    logprobs, behavior, adv, mask = _case()
    per_token, stats = gspo_loss(logprobs, behavior, adv, mask, CLIP_02)
    # seq 0: -min(sqrt2 * 1, 1.2 * 1) = -1.2 (clipped); seq 1: -min(0.9 * -1, 0.9 * -1) = 0.9, at every position
    assert torch.allclose(per_token, torch.tensor([[-1.2] * 3, [0.9] * 3]), atol=1e-6)
    assert float(aggregate(per_token, mask, "token_mean").detach()) == pytest.approx((-2.4 + 2.7) / 5, abs=1e-6)
    stats = {key: float(value) for key, value in stats.items()}
    assert stats["clip_fraction"] == pytest.approx(2 / 5)  # the two tokens of the clipped sequence
    assert stats["ratio_mean"] == pytest.approx((2 * math.sqrt(2) + 3 * 0.9) / 5, abs=1e-6)
    k3 = lambda x: math.exp(x) - 1 - x  # noqa: E731  per-token k3, as ppo_clip reports it
    assert stats["approx_kl"] == pytest.approx((k3(math.log(2)) + 3 * k3(math.log(0.9))) / 5, abs=1e-6)


@pytest.mark.parametrize("mode, per_token_grad", [("token_mean", 0.9 / 5), ("seq_mean_token_mean", 0.9 / 3 / 2)])
def test_gspo_gradient_reaches_every_token_through_the_sequence_ratio(mode, per_token_grad):
    logprobs, behavior, adv, mask = _case()
    per_token, _ = gspo_loss(logprobs, behavior, adv, mask, CLIP_02)
    aggregate(per_token, mask, mode).backward()
    # seq 0 is clipped: no gradient; seq 1: d(-s A)/d logp_t = s / 3 per token, times the aggregation's weights
    expected = torch.tensor([[0.0, 0.0, 0.0], [per_token_grad] * 3])
    assert torch.allclose(logprobs.grad, expected, atol=1e-6)


def test_gspo_tight_clip_range_of_the_paper():
    behavior = torch.zeros(2, 2)
    logprobs = torch.tensor([[3.5e-4, 3.5e-4], [5e-4, 5e-4]])  # sequence ratios e^3.5e-4, e^5e-4
    cfg = TrainConfig(clip_eps_low=3e-4, clip_eps_high=4e-4)
    per_token, stats = gspo_loss(logprobs, behavior, torch.tensor([1.0, 1.0]), torch.ones(2, 2), cfg)
    assert torch.allclose(per_token[0], torch.full((2,), -math.exp(3.5e-4)))  # inside [1 - 3e-4, 1 + 4e-4]
    assert torch.allclose(per_token[1], torch.full((2,), -(1 + 4e-4)))  # clipped at 1 + clip_eps_high
    assert float(stats["clip_fraction"]) == pytest.approx(0.5)


def test_one_token_sequences_are_ppo_clip():
    gen = torch.Generator().manual_seed(0)
    behavior = -torch.rand(8, 1, generator=gen)
    logprobs = behavior + 0.3 * torch.randn(8, 1, generator=gen)
    adv, mask = torch.randn(8, generator=gen), torch.ones(8, 1)
    gspo, _ = gspo_loss(logprobs, behavior, adv, mask, CLIP_02)
    ppo, _ = ppo_clip_loss(logprobs, behavior, adv, mask, CLIP_02)
    assert torch.allclose(gspo, ppo, atol=1e-6)


def test_a_sequence_without_tokens_has_ratio_one():
    per_token, stats = gspo_loss(torch.full((1, 2), 3.0), torch.zeros(1, 2), torch.tensor([2.0]), torch.zeros(1, 2),
                                 CLIP_02)
    assert torch.equal(per_token, torch.full((1, 2), -2.0))
    assert float(stats["clip_fraction"]) == 0.0

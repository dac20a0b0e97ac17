"""KL estimators and the per-token KL penalty against hand-computed values and gradients."""

import math

import pytest
import torch

from posttrain.training.algorithms.kl import KL_ESTIMATORS, k1, k3, kl_penalty

pytestmark = pytest.mark.unit


def test_estimators_hand_computed():
    x = torch.tensor([0.0, math.log(2.0), math.log(0.5)])  # x = log q - log p
    assert torch.allclose(k1(x), torch.tensor([0.0, -math.log(2.0), math.log(2.0)]))
    assert torch.allclose(k3(x), torch.tensor([0.0, 1 - math.log(2.0), -0.5 + math.log(2.0)]))
    assert set(KL_ESTIMATORS) == {"k1", "k3"}


def test_both_estimate_the_kl_of_two_categoricals():
    p, q = torch.tensor([0.7, 0.2, 0.1]), torch.tensor([0.4, 0.4, 0.2])
    exact = float((p * (p / q).log()).sum())  # KL(p || q) = 0.18...
    x = (q / p).log()  # the estimators' expectation under p, taken exactly
    assert float((p * k1(x)).sum()) == pytest.approx(exact)
    assert float((p * k3(x)).sum()) == pytest.approx(exact)


def test_kl_penalty_k3_values_and_gradient():
    logp = torch.log(torch.tensor([[0.5, 0.25, 0.5]])).requires_grad_(True)
    ref = torch.log(torch.tensor([[0.25, 0.25, 0.9]]))
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    kl = kl_penalty(logp, ref, mask, "k3")
    # x = ln(ref / p): ln 0.5 -> e^x - 1 - x = -0.5 + ln 2; x = 0 -> 0; masked -> 0
    assert torch.allclose(kl, torch.tensor([[-0.5 + math.log(2.0), 0.0, 0.0]]), atol=1e-6)
    kl.sum().backward()
    assert torch.allclose(logp.grad, torch.tensor([[1 - 0.5, 0.0, 0.0]]), atol=1e-6)  # 1 - ref/p, 0 where masked


def test_kl_penalty_k1_is_logp_minus_ref():
    logp, ref = torch.tensor([[-1.0, -2.0]]), torch.tensor([[-1.5, -1.0]])
    assert torch.allclose(kl_penalty(logp, ref, torch.ones(1, 2), "k1"), torch.tensor([[0.5, -1.0]]))


def test_masked_positions_never_overflow():
    logp = torch.tensor([[-200.0, -1.0]], requires_grad=True)  # a prompt position the policy finds very unlikely
    kl = kl_penalty(logp, torch.zeros(1, 2), torch.tensor([[0.0, 1.0]]), "k3")
    kl.sum().backward()
    assert torch.isfinite(kl).all()
    assert torch.isfinite(logp.grad).all()
    assert float(kl[0, 0].detach()) == 0.0

"""The per-token objective: each optional term against hand-computed values; all off returns the loss itself."""

import math

import pytest
import torch

from posttrain.config import TrainConfig
from posttrain.training.algorithms import aggregate
from posttrain.training.algorithms.objective import per_token_objective
from posttrain.training.logprobs import token_entropy

pytestmark = pytest.mark.unit

PG = torch.tensor([[-1.0, 2.0, 7.0]])  # the policy loss per token; position 2 is masked
MASK = torch.tensor([[1.0, 1.0, 0.0]])
LOGP = torch.log(torch.tensor([[0.5, 0.25, 0.5]]))
OLD = torch.log(torch.tensor([[0.5, 0.5, 0.5]]))
BEHAVIOR = torch.log(torch.tensor([[0.25, 0.5, 0.5]]))  # old / behavior: 2, 1
REF = torch.log(torch.tensor([[0.25, 0.25, 0.5]]))  # ref / p: 1/2, 1
ENTROPY = torch.tensor([[1.0, 0.5, 3.0]])


def _objective(cfg, pg=PG, logp=LOGP, entropy=ENTROPY):
    return per_token_objective(pg, logp, MASK, cfg, old_logprobs=OLD, behavior_logprobs=BEHAVIOR,
                               ref_logprobs=REF, entropy=entropy)


def test_all_terms_off_return_the_policy_loss_itself():
    per_token, stats = _objective(TrainConfig())
    assert per_token is PG
    assert set(stats) == {"entropy"}
    assert float(stats["entropy"]) == pytest.approx(0.75)  # token mean over the mask


def test_tis_multiplies_the_policy_loss_by_the_capped_weight():
    per_token, _ = _objective(TrainConfig(tis_cap=1.5))
    assert torch.allclose(per_token, torch.tensor([[-1.0 * 1.5, 2.0 * 1.0, 7.0]]))  # weight min(2, 1.5), then 1


def test_kl_adds_coef_times_k3_and_reports_its_mean():
    per_token, stats = _objective(TrainConfig(kl_coef=0.1))
    k3 = -0.5 + math.log(2.0)  # x = ln(1/2): e^x - 1 - x
    assert torch.allclose(per_token, torch.tensor([[-1.0 + 0.1 * k3, 2.0, 7.0]]), atol=1e-6)
    assert float(stats["kl"]) == pytest.approx(k3 / 2, abs=1e-6)


def test_kl_k1():
    per_token, stats = _objective(TrainConfig(kl_coef=0.5, kl_estimator="k1"))
    assert torch.allclose(per_token, torch.tensor([[-1.0 + 0.5 * math.log(2.0), 2.0, 7.0]]), atol=1e-6)
    assert float(stats["kl"]) == pytest.approx(math.log(2.0) / 2, abs=1e-6)


def test_kl_without_reference_logprobs_is_an_error():
    with pytest.raises(ValueError, match="kl_coef > 0 needs the reference"):
        per_token_objective(PG, LOGP, MASK, TrainConfig(kl_coef=0.1), old_logprobs=OLD, behavior_logprobs=BEHAVIOR,
                            ref_logprobs=None, entropy=ENTROPY)


def test_entropy_bonus_is_subtracted_and_its_gradient_raises_entropy():
    logits = torch.tensor([[[0.0, 1.0], [2.0, 0.0], [0.0, 0.0]]], requires_grad=True)  # [B=1, T=3, V=2]
    entropy = token_entropy(logits)  # [1, 3]
    per_token, stats = _objective(TrainConfig(entropy_coef=0.01), entropy=entropy)
    assert torch.allclose(per_token, PG - 0.01 * entropy.detach())
    assert float(stats["entropy"]) == pytest.approx(float(entropy[0, :2].mean().detach()))
    aggregate(per_token, MASK, "token_mean").backward()
    # descending the loss ascends the entropy: the gradient step moves the logits of each position toward uniform
    step = -logits.grad[0]
    assert float(step[0, 0] - step[0, 1]) > 0
    assert float(step[1, 0] - step[1, 1]) < 0
    assert float(logits.grad[0, 2].abs().sum()) == 0.0  # the masked position gets none


def test_all_terms_together_hand_computed():
    per_token, stats = _objective(TrainConfig(tis_cap=2.0, kl_coef=0.1, entropy_coef=0.2))
    k3 = -0.5 + math.log(2.0)
    expected = torch.tensor([[-1.0 * 2.0 + 0.1 * k3 - 0.2 * 1.0, 2.0 * 1.0 + 0.1 * 0.0 - 0.2 * 0.5]])
    assert torch.allclose(per_token[:, :2], expected, atol=1e-6)
    assert set(stats) == {"entropy", "kl"}
    assert all(not v.requires_grad and v.dim() == 0 for v in stats.values())

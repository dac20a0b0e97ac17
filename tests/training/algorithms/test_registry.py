"""The algorithm seam: registries by name, aggregation modes on hand-computed tensors, and the default unchanged."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from posttrain.config import ConfigError, TrainConfig
from posttrain.schemas import TrainRows
from posttrain.training.algorithms.grpo import group_advantages
from posttrain.training.algorithms import (ADVANTAGE_ESTIMATORS, AGGREGATIONS, POLICY_LOSSES, aggregate,
                                           get_advantage_estimator, get_policy_loss, register_advantage,
                                           register_policy_loss)
from posttrain.training.algorithms.dr_grpo import mean_centered_advantages
from posttrain.training.algorithms.gspo import gspo_loss
from posttrain.training.algorithms.ppo_clip import ppo_clip_loss
from posttrain.training.algorithms.rloo import leave_one_out_advantages
from posttrain.training.samples import TrainSample, train_samples, with_advantages

pytestmark = pytest.mark.unit

PER_TOKEN = torch.tensor([[1.0, 2.0, 3.0, 9.0], [4.0, 9.0, 9.0, 9.0], [9.0, 9.0, 9.0, 9.0]])  # [B=3, L-1=4]
MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])  # seq 2 has no token


def test_defaults_name_grpo_ppo_clip_token_mean():
    cfg = TrainConfig()
    assert (cfg.advantage_estimator, cfg.policy_loss, cfg.loss_aggregation) == ("grpo", "ppo_clip", "token_mean")
    assert get_advantage_estimator(cfg.advantage_estimator) is group_advantages
    assert get_policy_loss(cfg.policy_loss) is ppo_clip_loss


def test_the_built_in_variants_are_selected_by_name():
    assert get_advantage_estimator("dr_grpo") is mean_centered_advantages
    assert get_advantage_estimator("rloo") is leave_one_out_advantages
    assert get_policy_loss("gspo") is gspo_loss


def test_unknown_names_name_the_field_and_the_known_names():
    with pytest.raises(ValueError, match=r"TrainConfig.policy_loss: unknown policy loss 'ppo'; known: \[.*'ppo_clip'"):
        get_policy_loss("ppo")
    with pytest.raises(ValueError, match=r"TrainConfig.advantage_estimator: unknown .* 'loo'; known: \[.*'grpo'"):
        get_advantage_estimator("loo")
    with pytest.raises(ValueError, match=r"TrainConfig.loss_aggregation: unknown mode 'sum'; known: \['token_mean'"):
        aggregate(PER_TOKEN, MASK, "sum")


@pytest.fixture
def registry_snapshot():
    """Registrations made by a test are removed after it."""
    losses, estimators = dict(POLICY_LOSSES), dict(ADVANTAGE_ESTIMATORS)
    yield
    POLICY_LOSSES.clear()
    POLICY_LOSSES.update(losses)
    ADVANTAGE_ESTIMATORS.clear()
    ADVANTAGE_ESTIMATORS.update(estimators)


def test_register_variants_by_name(registry_snapshot):
    @register_advantage("raw_reward")
    def raw_reward(rewards, group_ids, cfg):
        return torch.tensor(rewards, dtype=torch.float)

    @register_policy_loss("reinforce_unit")
    def reinforce(logprobs, behavior_logprobs, advantages, mask, cfg):
        return -advantages.unsqueeze(-1) * logprobs, {}

    assert get_advantage_estimator("raw_reward") is raw_reward
    assert get_policy_loss("reinforce_unit") is reinforce
    logprobs = torch.log(torch.tensor([[0.5, 0.25]]))
    per_token, stats = get_policy_loss("reinforce_unit")(logprobs, logprobs, torch.tensor([2.0]), torch.ones(1, 2),
                                                     TrainConfig())
    assert stats == {}
    assert torch.allclose(per_token, torch.tensor([[2 * math.log(2), 4 * math.log(2)]]))


def test_a_name_is_registered_once(registry_snapshot):
    with pytest.raises(ValueError, match="policy loss 'ppo_clip' is already registered"):
        register_policy_loss("ppo_clip")(lambda *args: None)


def test_token_mean():
    assert float(aggregate(PER_TOKEN, MASK, "token_mean")) == pytest.approx((1 + 2 + 3 + 4) / 4)


def test_seq_mean_token_mean_skips_sequences_without_tokens():
    assert float(aggregate(PER_TOKEN, MASK, "seq_mean_token_mean")) == pytest.approx((2.0 + 4.0) / 2)


def test_seq_mean_token_sum_norm_divides_by_a_constant():
    # token sums 6, 4, 0 over all B = 3 sequences; divided by norm_len, or by the mask's width L-1 = 4
    assert float(aggregate(PER_TOKEN, MASK, "seq_mean_token_sum_norm", norm_len=8)) == pytest.approx(10 / 3 / 8)
    assert float(aggregate(PER_TOKEN, MASK, "seq_mean_token_sum_norm")) == pytest.approx(10 / 3 / 4)
    with pytest.raises(ValueError, match="loss_norm_len: must be > 0"):
        aggregate(PER_TOKEN, MASK, "seq_mean_token_sum_norm", norm_len=0)


@pytest.mark.parametrize("mode", AGGREGATIONS)
def test_empty_mask_aggregates_to_zero(mode):
    per_token = torch.ones(2, 3, requires_grad=True)
    loss = aggregate(per_token, torch.zeros(2, 3), mode)
    loss.backward()
    assert float(loss.detach()) == 0.0
    assert torch.equal(per_token.grad, torch.zeros(2, 3))


def _ppo_clip_before_the_seam(logprobs, behavior_logprobs, advantages, mask, clip_eps):
    """The PPO-clip + token-mean loss as one function, verbatim from before the algorithm seam (the reference)."""
    mask = mask.to(logprobs.dtype)
    log_ratio = (logprobs - behavior_logprobs.to(logprobs.dtype)) * mask
    ratio = torch.exp(log_ratio)
    adv = advantages.to(logprobs.dtype).unsqueeze(-1)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * adv
    per_token = -torch.minimum(unclipped, clipped)
    n_tokens = mask.sum().clamp(min=1.0)
    loss = (per_token * mask).sum() / n_tokens
    with torch.no_grad():
        is_clipped = ((ratio < 1.0 - clip_eps) & (adv < 0)) | ((ratio > 1.0 + clip_eps) & (adv > 0))
        stats = {
            "clip_fraction": float((is_clipped.to(mask.dtype) * mask).sum() / n_tokens),
            "approx_kl": float((((ratio - 1.0) - log_ratio) * mask).sum() / n_tokens),
            "ratio_mean": float((ratio * mask).sum() / n_tokens),
        }
    return loss, stats


@pytest.mark.parametrize("seed", range(5))
def test_default_path_is_bitwise_the_loss_before_the_seam(seed):
    gen = torch.Generator().manual_seed(seed)
    behavior = -torch.rand(6, 11, generator=gen) * 3  # [B, L-1]
    policy = (behavior + 0.4 * torch.randn(6, 11, generator=gen)).requires_grad_(True)  # ratios on both sides of clip
    reference = policy.detach().clone().requires_grad_(True)
    advantages = torch.randn(6, generator=gen)  # [B]
    mask = (torch.rand(6, 11, generator=gen) > 0.3).float()  # [B, L-1]
    cfg = TrainConfig()

    per_token, stats = get_policy_loss(cfg.policy_loss)(policy, behavior, advantages, mask, cfg)
    loss = aggregate(per_token, mask, cfg.loss_aggregation)
    expected_loss, expected_stats = _ppo_clip_before_the_seam(reference, behavior, advantages, mask, cfg.clip_eps)
    loss.backward()
    expected_loss.backward()

    assert torch.equal(loss.detach(), expected_loss.detach())
    assert torch.equal(policy.grad, reference.grad)
    assert all(not value.requires_grad and value.dim() == 0 for value in stats.values())
    assert {key: float(value) for key, value in stats.items()} == expected_stats


def _scored(rewards, groups, infra_errors) -> pd.DataFrame:
    base = {"env_id": "demo/add_1", "sample_idx": 0, "policy_version": 0, "prompt": "p", "completion": "c",
            "prompt_token_ids": "[1, 5]", "completion_token_ids": "[7, 2]", "behavior_logprobs": "[-0.1, -0.2]",
            "temperature": 0.6, "steps": 1, "tool_calls": 0, "finish_reason": "stop", "tokens": 2, "compiled": True, "tests_passed": 1,
            "tests_total": 1, "exit_code": 0, "timed_out": False, "sandbox_ms": 1.0, "sandbox_cpu_s": 0.01,
            "sandbox_memory_peak_mb": 3.0, "signals": "{}"}
    return pd.DataFrame([{**base, "reward": r, "group_id": g, "infra_error": e}
                         for r, g, e in zip(rewards, groups, infra_errors)], index=[7, 3, 5, 1, 0])


def test_with_advantages_matches_grpo_over_trainable_rows_in_order():
    scored = _scored([1.0, 0.0, 0.5, 1.0, 1.0], ["a", "a", "a", "b", "b"], ["", "", "sandbox died", "", ""])
    cfg = TrainConfig()
    rows = with_advantages(scored, cfg)
    expected = group_advantages([1.0, 0.0, 1.0, 1.0], ["a", "a", "b", "b"], cfg).tolist()
    assert rows["advantage"].iloc[[0, 1, 3, 4]].tolist() == expected  # float32 values kept exactly
    assert math.isnan(rows["advantage"].iloc[2])
    assert rows["reward"].tolist() == scored["reward"].tolist()
    assert "advantage" not in scored


def test_train_rows_rejects_an_advantage_on_an_infra_error_row():
    rows = with_advantages(_scored([1.0, 0.0, 1.0, 1.0, 1.0], list("aabbb"), ["", "", "x", "", ""]), TrainConfig())
    rows.loc[2, "advantage"] = 0.0
    with pytest.raises(Exception, match="advantage_exactly_on_trainable_rows"):
        TrainRows.validate(rows)


def test_train_samples_decode_rows():
    rows = with_advantages(_scored([1.0, 0.0, 1.0, 1.0, 1.0], list("aabbb"), [""] * 5), TrainConfig(advantage_eps=0))
    assert train_samples(rows)[:2] == [TrainSample([1, 5], [7, 2], [-0.1, -0.2], 1.0, "a", temperature=0.6),
                                       TrainSample([1, 5], [7, 2], [-0.1, -0.2], -1.0, "a", temperature=0.6)]


@pytest.mark.parametrize("kwargs, message", [
    ({"kl_estimator": "k2"}, "train.kl_estimator='k2': must be one of ['k1', 'k3']"),
    ({"kl_coef": -0.1}, "train.kl_coef=-0.1: must be >= 0"),
    ({"entropy_coef": -1e-3}, "train.entropy_coef=-0.001: must be >= 0"),
    ({"tis_cap": 0.5}, "train.tis_cap=0.5: must be 0 (off) or >= 1"),
    ({"clip_eps_low": 1.0}, "train.clip_eps_low=1.0: must be in [0, 1)"),
    ({"clip_eps_high": -0.1}, "train.clip_eps_high=-0.1: must be >= 0"),
])
def test_algorithm_fields_are_validated_by_name(kwargs, message):
    with pytest.raises(ConfigError) as raised:
        TrainConfig(**kwargs)
    assert message in str(raised.value)


def test_algorithm_fields_accept_the_documented_settings():
    TrainConfig(advantage_estimator="dr_grpo", loss_aggregation="seq_mean_token_sum_norm", loss_norm_len=48)
    TrainConfig(advantage_estimator="rloo", policy_loss="gspo", clip_eps_low=3e-4, clip_eps_high=4e-4,
                kl_coef=0.05, kl_estimator="k1", entropy_coef=1e-3, tis_cap=2.0)
    assert (TrainConfig().kl_coef, TrainConfig().entropy_coef, TrainConfig().tis_cap) == (0.0, 0.0, 0.0)

"""The MLflow metric dicts the Flyte tasks log, shaped by pure functions (no MLflow, no Flyte)."""

from __future__ import annotations

import pytest

from dataclasses import dataclass

import pandas as pd

from posttrain.admission.report import CheckRow, check_stats, details_frame, to_frame
from posttrain.reward import RewardStats
from posttrain.rollout.collect import RolloutStats
from posttrain.rollout.dynamic_sampling import DynamicSamplingStats
from posttrain.tracking import admission_counts, admission_metrics, iteration_metrics, stage_metrics

pytestmark = pytest.mark.unit

ROWS = [
    CheckRow("e/ok", "solvability", True, "solvability.ok", "8/8"),
    CheckRow("e/ok", "coverage", True, "coverage.ok", "score 1.00", 1.0),
    CheckRow("e/weak", "solvability", True, "solvability.ok", "8/8"),
    CheckRow("e/weak", "coverage", False, "coverage.mutants_survived", "score 0.25", 0.25),
    CheckRow("e/box", "solvability", False, "infra", "sandbox did not start"),
    CheckRow("e/box", "coverage", False, "coverage.skipped", "the reference run hit an infra error"),
]


@dataclass
class FakeTrainStats:
    loss: float = 0.5
    steps: int = 2
    wall_s: float = 2.0


def test_admission_counts_from_the_report_or_its_details():
    expected = {"admission/envs": 3, "admission/admitted": 1, "admission/rejected": 2}
    assert admission_counts(to_frame(ROWS)) == expected
    assert admission_counts(details_frame(ROWS)) == expected


def test_admission_metrics_per_check_counts_rates_and_seconds():
    details = details_frame(ROWS)
    metrics = admission_metrics(details, check_stats(details, {"coverage": 2.5}), wall_s=7.0)
    assert metrics["admission/admitted"] == 1
    assert metrics["admission/wall_s"] == 7.0
    assert (metrics["admission/coverage/pass"], metrics["admission/coverage/fail"],
            metrics["admission/coverage/skipped"], metrics["admission/coverage/seconds"]) == (1.0, 1.0, 1.0, 2.5)
    assert metrics["admission/solvability/infra"] == 1.0
    assert metrics["admission/coverage/value_mean"] == 0.625
    assert "admission/solvability/seconds" not in metrics  # NaN: not timed, not logged
    assert "admission/coverage/not_applicable" not in metrics
    assert "admission/coverage/envs" not in metrics


def test_stage_metrics_prefix_fields_and_put_sandbox_latency_under_sandbox():
    reward = RewardStats(samples=4, reward_mean=0.5, pass_rate=0.25, sandbox_p50_ms=10.0, sandbox_p99_ms=30.0)
    assert stage_metrics("reward", reward) == {
        "reward/samples": 4, "reward/mean": 0.5, "reward/pass_rate": 0.25, "reward/infra_errors": 0,
        "reward/timeouts": 0, "sandbox/p50_ms": 10.0, "sandbox/p99_ms": 30.0, "reward/learnable_fraction": 0.0,
        "reward/wall_s": 0.0, "reward/verifications_per_s": 0.0, "sandbox/runs": 0, "sandbox/cpu_p50_s": 0.0,
        "sandbox/cpu_p99_s": 0.0, "sandbox/memory_peak_p50_mb": 0.0, "sandbox/memory_peak_max_mb": 0.0}
    assert stage_metrics("rollout", RolloutStats(samples=8, tokens_per_s=3.0))["rollout/tokens_per_s"] == 3.0


def test_iteration_metrics_join_eval_rollout_reward_sandbox_and_train():
    results = pd.DataFrame({"env_id": ["a", "b", "a", "a"], "domain": ["python"] * 4, "difficulty": [1, 2, 1, 1],
                            "decoding": ["greedy", "greedy", "sampled", "sampled"], "sample_idx": [0, 0, 0, 1],
                            "policy_version": [1] * 4, "steps": [1] * 4, "passed": [True, False, True, False],
                            "reward": [1.0, 0.0, 1.0, 0.0], "infra_error": [""] * 4, "assertions": ["{}"] * 4})
    metrics = iteration_metrics(results, RolloutStats(samples=8), RewardStats(reward_mean=0.5), FakeTrainStats())
    assert metrics["eval/pass_at_1"] == 0.5
    assert metrics["eval/pass_at_1/difficulty_1"] == 1.0
    assert metrics["eval/pass_at_1_sampled"] == 0.5
    assert metrics["eval/pass_at_1_sampled/difficulty_1"] == 0.5
    assert metrics["rollout/samples"] == 8
    assert metrics["reward/mean"] == 0.5
    assert metrics["sandbox/p99_ms"] == 0.0
    assert metrics["train/loss"] == 0.5
    assert metrics["train/steps"] == 2
    assert not any(key.startswith(("reward/sandbox", "reward/reward")) for key in metrics)
    assert metrics["time/update_s"] == 2.0
    assert "time/iteration_s" not in metrics  # not measured here
    timed = iteration_metrics(None, RolloutStats(wall_s=1.0), RewardStats(wall_s=3.0), FakeTrainStats(), 8.0)
    assert not any(key.startswith("eval/") for key in timed)  # a version that was not evaluated logs no zeros
    assert (timed["time/iteration_s"], timed["time/untimed_s"], timed["time/overhead_fraction"]) == (8.0, 2.0, 0.25)


def test_iteration_metrics_say_what_dynamic_sampling_did_only_when_it_ran():
    stats = DynamicSamplingStats(target_groups=8, learnable_groups=6, zero_variance_groups=5, dropped_groups=6,
                                 refilled_groups=4, resample_rounds=2)
    metrics = iteration_metrics(None, RolloutStats(samples=8), RewardStats(), FakeTrainStats(), dynamic=stats)
    assert {key: metrics[key] for key in metrics if key.endswith(("_groups", "_rounds"))} == {
        "rollout/target_groups": 8, "rollout/learnable_groups": 6, "rollout/zero_variance_groups": 5,
        "rollout/dropped_groups": 6, "rollout/refilled_groups": 4, "rollout/resample_rounds": 2}
    assert metrics["rollout/samples"] == 8
    off = iteration_metrics(None, RolloutStats(samples=8), RewardStats(), FakeTrainStats())
    assert not any(key.endswith(("_groups", "_rounds")) for key in off)

"""An RL iteration's MLflow metrics from its stages' metric dicts, shaped by pure functions (no MLflow, no Flyte)."""

from __future__ import annotations

import pandas as pd
import pytest

from posttrain.reward import RewardStats
from posttrain.rollout.collect import RolloutStats
from posttrain.rollout.dynamic_sampling import DynamicSamplingStats
from posttrain.tracking.metrics import (NOT_RUN, iteration_metrics, reward_metrics, rollout_metrics, sample_times,
                                        stage_metrics, train_metrics)
from posttrain.training.trainer import TrainStats

pytestmark = pytest.mark.unit

TRAIN = train_metrics(TrainStats(0.5, 0.0, 0.0, 1.0, 8, 64, 2, 1.5, wall_s=2.0, bf16=True),
                      pd.DataFrame({"policy_version": [1, 1, 0]}), trained_from=2)


def test_stage_metrics_prefix_fields_and_put_sandbox_latency_under_sandbox():
    reward = RewardStats(samples=4, reward_mean=0.5, pass_rate=0.25, sandbox_p50_ms=10.0, sandbox_p99_ms=30.0)
    assert stage_metrics("reward", reward) == {
        "reward/samples": 4, "reward/mean": 0.5, "reward/pass_rate": 0.25, "reward/infra_errors": 0,
        "reward/timeouts": 0, "sandbox/p50_ms": 10.0, "sandbox/p99_ms": 30.0, "reward/learnable_fraction": 0.0,
        "reward/wall_s": 0.0, "reward/verifications_per_s": 0.0, "sandbox/runs": 0, "reward/cache_hits": 0,
        "sandbox/cpu_p50_s": 0.0, "sandbox/cpu_p99_s": 0.0, "sandbox/memory_peak_p50_mb": 0.0,
        "sandbox/memory_peak_max_mb": 0.0, "reward/memory_peak_mb": 0.0}
    assert stage_metrics("rollout", RolloutStats(samples=8, tokens_per_s=3.0))["rollout/tokens_per_s"] == 3.0


def test_every_stage_reports_floats_a_flyte_dict_of_floats_carries():
    for metrics in (rollout_metrics(RolloutStats(samples=8)), sample_times(RolloutStats()),
                    reward_metrics(RewardStats(samples=4)), TRAIN):
        assert all(type(value) is float for value in metrics.values()), metrics
    assert TRAIN["train/bf16"] == 1.0


def test_the_update_reports_its_stats_staleness_and_time():
    assert (TRAIN["train/loss"], TRAIN["train/steps"], TRAIN["train/wall_s"]) == (0.5, 2.0, 2.0)
    assert (TRAIN["train/staleness_mean"], TRAIN["train/staleness_max"]) == (4 / 3, 2.0)
    assert TRAIN["time/update_s"] == 2.0


def test_iteration_metrics_join_eval_rollout_reward_sandbox_and_train():
    results = pd.DataFrame({"env_id": ["a", "b", "a", "a"], "domain": ["python"] * 4, "difficulty": [1, 2, 1, 1],
                            "decoding": ["greedy", "greedy", "sampled", "sampled"], "sample_idx": [0, 0, 0, 1],
                            "policy_version": [1] * 4, "steps": [1] * 4, "passed": [True, False, True, False],
                            "reward": [1.0, 0.0, 1.0, 0.0], "infra_error": [""] * 4, "assertions": ["{}"] * 4})
    stages = [sample_times(RolloutStats(wall_s=1.0)), rollout_metrics(RolloutStats(samples=8)),
              reward_metrics(RewardStats(reward_mean=0.5, wall_s=3.0)), TRAIN]
    metrics = iteration_metrics(stages, results)
    assert metrics["eval/pass_at_1"] == 0.5
    assert metrics["eval/pass_at_1/difficulty_1"] == 1.0
    assert metrics["eval/pass_at_1_sampled"] == 0.5
    assert metrics["eval/pass_at_1_sampled/difficulty_1"] == 0.5
    assert metrics["rollout/samples"] == 8
    assert metrics["reward/mean"] == 0.5
    assert metrics["sandbox/p99_ms"] == 0.0
    assert metrics["train/loss"] == 0.5
    assert not any(key.startswith(("reward/sandbox", "reward/reward")) for key in metrics)
    assert metrics["time/update_s"] == 2.0
    assert metrics["time/eval_score_s"] == 0.0  # not timed here: a stage that did not run
    assert "time/iteration_s" not in metrics  # not measured here
    timed = iteration_metrics(stages, iteration_s=8.0)
    assert not any(key.startswith("eval/") for key in timed)  # a version that was not evaluated logs no zeros
    assert (timed["time/iteration_s"], timed["time/untimed_s"], timed["time/overhead_fraction"]) == (8.0, 2.0, 0.25)


def test_the_agent_tiers_task_is_a_stage_of_the_iteration_not_its_overhead():
    stages = [TRAIN, {"time/sample_s": 1.0, "time/reward_s": 1.0, "time/agent_s": 30.0}]
    timed = iteration_metrics(stages, iteration_s=40.0)
    assert timed["time/untimed_s"] == 40.0 - 1.0 - 1.0 - 30.0 - timed["time/update_s"]
    assert timed["time/overhead_fraction"] == timed["time/untimed_s"] / 40.0
    assert iteration_metrics([TRAIN])["time/agent_s"] == 0.0  # a suite without agent envs


def test_a_stage_that_did_not_run_logs_zeros_and_dynamic_sampling_its_counts_only_when_it_ran():
    agent_only = iteration_metrics([TRAIN, {"agent/episodes": 4.0}])
    assert {key: agent_only[key] for key in NOT_RUN} == NOT_RUN
    assert agent_only["rollout/samples"] == agent_only["reward/mean"] == agent_only["time/engine_start_s"] == 0.0
    assert not any(key.endswith(("_groups", "_rounds")) for key in agent_only)
    stats = DynamicSamplingStats(target_groups=8, learnable_groups=6, zero_variance_groups=5, dropped_groups=6,
                                 refilled_groups=4, resample_rounds=2)
    refilled = rollout_metrics(RolloutStats(samples=8, refill_wall_s=1.5))
    metrics = iteration_metrics([sample_times(RolloutStats(wall_s=2.0)), refilled, stage_metrics("rollout", stats),
                                 reward_metrics(RewardStats()), TRAIN])
    assert {key: metrics[key] for key in metrics if key.endswith(("_groups", "_rounds"))} == {
        "rollout/target_groups": 8, "rollout/learnable_groups": 6, "rollout/zero_variance_groups": 5,
        "rollout/dropped_groups": 6, "rollout/refilled_groups": 4, "rollout/resample_rounds": 2}
    assert metrics["time/sample_s"] == 3.5  # v_k's sample task and the refill rounds' sampling

"""The lines printed while an RL run runs, made from the metric dicts the real producers shape (``tracking.metrics``,
``results.eval_metrics``, ``regression.flip_metrics``, ``agent.metrics``): the names they log are the names read."""

from __future__ import annotations

import io

import pandas as pd
import pytest

from posttrain.agent.metrics import AgentStats, agent_metrics
from posttrain.envs.spec import EnvSpec
from posttrain.evaluation.regression import flip_metrics, flips
from posttrain.evaluation.results import eval_metrics, eval_results
from posttrain.reward import RewardStats, reward_stats
from posttrain.rollout.collect import RolloutStats
from posttrain.rollout.dynamic_sampling import DynamicSamplingStats, keep_learnable
from posttrain.tracking.metrics import (iteration_metrics, reward_metrics, rollout_metrics, sample_times,
                                        stage_metrics, train_metrics)
from posttrain.tracking.run_lines import eval_line, iteration_line, mlflow_line, version_lines, write_lines
from posttrain.training.trainer import TrainStats

pytestmark = pytest.mark.unit

TRAIN = TrainStats(0.1, 0.0, 0.0, 1.0, 16, 512, 2, 0.8, wall_s=0.94)
ENVS = {i: EnvSpec(id=i, prompt="p", verifier={"kind": "python_tests"}, reference="", difficulty=1) for i in "abcd"}


def stages(rollout: RolloutStats, reward: RewardStats, dynamic: DynamicSamplingStats | None = None) -> list[dict]:
    """One iteration's stages' metrics as its tasks report them: its sample task's times (those ``rollout`` has), the
    rollout, its reward (with dynamic sampling's counts), the update."""
    sampling = [stage_metrics("rollout", dynamic)] if dynamic is not None else []
    return [sample_times(rollout), rollout_metrics(rollout), *sampling, reward_metrics(reward),
            train_metrics(TRAIN, pd.DataFrame({"policy_version": []}), trained_from=0)]


def scored(rewards: dict[str, list[float]], infra: dict[str, list[str]] | None = None) -> pd.DataFrame:
    """A scored rollout: per group (one env each) its samples' rewards and infra errors."""
    rows = [{"env_id": g, "group_id": g, "reward": r, "infra_error": (infra or {}).get(g, [""] * len(rs))[i],
             "timed_out": False, "sandbox_ms": 5.0, "sandbox_cpu_s": 0.01, "sandbox_memory_peak_mb": 3.0,
             "signals": "{}", "completion": f"{g}{i}", "tests_passed": int(r == 1.0), "tests_total": 1}
            for g, rs in rewards.items() for i, r in enumerate(rs)]
    return pd.DataFrame(rows)


def evaluation(version: int, greedy: dict[str, bool], sampled: dict[str, list[bool]]) -> pd.DataFrame:
    rows = [{"env_id": e, "decoding": "greedy", "sample_idx": 0, "reward": float(p), "infra_error": "",
             "tests_passed": int(p), "tests_total": 1} for e, p in greedy.items()]
    rows += [{"env_id": e, "decoding": "sampled", "sample_idx": i, "reward": float(p), "infra_error": "",
              "tests_passed": int(p), "tests_total": 1} for e, ps in sampled.items() for i, p in enumerate(ps)]
    return eval_results(pd.DataFrame(rows).assign(policy_version=version, steps=1), ENVS)


def test_an_iteration_without_eval_says_reward_learnable_groups_and_stage_times():
    table = scored({"a": [1.0, 0.0], "b": [1.0, 1.0], "c": [0.5, 0.0], "d": [0.0, 0.0]})
    rollout, reward = RolloutStats(prompts=4, samples=8, wall_s=2.04), reward_stats(table, wall_s=1.6)
    metrics = iteration_metrics(stages(rollout, reward), iteration_s=5.26)
    assert iteration_line(3, metrics) == \
        "v3  reward 0.438  learnable 2/4  |  sample 2.0s  reward 1.6s  update 0.9s  |  iteration 5.3s"
    assert version_lines(3, metrics) == [iteration_line(3, metrics)]  # no eval line: v3 was not evaluated


def test_infra_errors_are_counted_and_a_stage_that_did_not_run_is_left_out():
    table = scored({"a": [1.0, 0.0], "b": [0.0, 0.0]}, infra={"b": ["", "sandbox did not start"]})
    metrics = iteration_metrics(stages(RolloutStats(prompts=2, samples=4), reward_stats(table)))
    assert iteration_line(1, metrics) == "v1  reward 0.333  learnable 1/2  1 infra error  |  update 0.9s"


def test_dynamic_sampling_counts_learnable_groups_of_all_sampled_with_target_and_refill_rounds():
    table = scored({"a": [1.0, 0.0], "b": [1.0, 1.0], "c": [0.5, 0.0], "d": [0.0, 0.0]})
    _, dynamic = keep_learnable(table, target=3, rounds=2, refilled=2)
    metrics = iteration_metrics(stages(RolloutStats(prompts=4, samples=8), reward_stats(table), dynamic))
    assert "learnable 2/4 (target 3, 2 refill rounds)" in iteration_line(2, metrics)
    _, dynamic = keep_learnable(table, target=2, rounds=0, refilled=0)
    metrics = iteration_metrics(stages(RolloutStats(prompts=4, samples=8), reward_stats(table), dynamic))
    assert "learnable 2/4 (target 2)  |" in iteration_line(2, metrics)


def test_an_evaluated_version_adds_greedy_sampled_envs_and_flips_since_the_last_eval():
    v0 = evaluation(0, {"a": False, "b": True, "c": False}, {})
    v1 = evaluation(1, {"a": True, "b": True, "c": False}, {"a": [True, False], "b": [True, True], "c": [False] * 2})
    metrics = {**iteration_metrics(stages(RolloutStats(prompts=4, samples=8), RewardStats()), v1),
               **flip_metrics(flips(v1, v0))}
    iteration, evaluated = version_lines(1, metrics)
    assert iteration.startswith("v1  |  update 0.9s")  # the single-turn rollout had no scored samples
    assert evaluated == "v1 eval  greedy 0.667  sampled 0.500  (3 envs, 1 fixed, 0 broken)"
    assert version_lines(0, eval_metrics(v0)) == ["v0 eval  greedy 0.333  (3 envs)"]  # the baseline: no iteration


def test_agent_envs_add_their_reward_solve_rate_stage_time_and_greedy_solve_rate():
    rollout = AgentStats(episodes=8, solved=2, solve_rate=0.25, reward_mean=0.3, infra_errors=2, wall_s=41.0)
    greedy = AgentStats(episodes=4, solved=1, solve_rate=0.25, reward_mean=0.25, wall_s=9.0)
    steps = pd.DataFrame()
    metrics = iteration_metrics([train_metrics(TRAIN, pd.DataFrame({"policy_version": []}), trained_from=1),
                                 agent_metrics(rollout, steps), agent_metrics(greedy, steps, prefix="agent_eval"),
                                 {"time/agent_s": 38.5}],  # v2's agent task, not the one whose rollout trained v2
                                evaluation(2, {"a": True, "b": False}, {}), iteration_s=60.0)
    assert version_lines(2, metrics) == [
        "v2  agent reward 0.300  solved 0.250  2 infra errors  |  agent 38.5s  update 0.9s  |  iteration 60.0s",
        "v2 eval  greedy 0.500  (2 envs)  agent solved 0.250 (4 episodes)"]


def test_lines_of_an_iteration_an_earlier_execution_logged_say_so():
    metrics = {**eval_metrics(evaluation(1, {"a": True}, {})), "time/update_s": 1.0}
    lines = version_lines(1, metrics, resumed=True)
    assert len(lines) == 2
    assert all(line.endswith("  (resumed: logged by an earlier execution)") for line in lines)


def test_empty_metrics_give_the_version_alone_and_no_eval_line():
    assert iteration_line(5, {}) == "v5"
    assert eval_line(5, {}) is None
    assert version_lines(0, {}) == []


def test_mlflow_line_points_at_the_run_page_of_the_server_or_of_make_mlflow_ui():
    local = "sqlite:////repo/mlflow.db"
    assert mlflow_line("r1", "7", "posttrain", "http://mlflow:5000", local) == \
        "MLflow run r1 (experiment posttrain): open http://mlflow:5000/#/experiments/7/runs/r1"
    assert mlflow_line("r1", "7", "posttrain", "https://ml.example.com/mlflow/", local, resumed=True) == \
        "MLflow run r1 (experiment posttrain, resumed): open https://ml.example.com/mlflow/#/experiments/7/runs/r1"
    assert mlflow_line("r1", "7", "posttrain", local, local) == \
        "MLflow run r1 (experiment posttrain): make mlflow-ui, then open http://127.0.0.1:5000/#/experiments/7/runs/r1"
    assert mlflow_line("r1", "7", "x", "postgresql://db/mlflow", local).startswith(
        "MLflow run r1 (experiment x): MLFLOW_TRACKING_URI=postgresql://db/mlflow make mlflow-ui, then open ")


class Recording(io.StringIO):
    """A stream that is not a terminal and records each write and flush in order."""

    def __init__(self):
        super().__init__()
        self.calls: list[str] = []

    def write(self, text: str) -> int:
        self.calls.append(text)
        return super().write(text)

    def flush(self) -> None:
        self.calls.append("<flush>")


def test_each_line_is_one_plain_write_and_a_flush():
    stream = Recording()
    metrics = {**eval_metrics(evaluation(1, {"a": True}, {})), "time/update_s": 1.0}
    write_lines(version_lines(1, metrics), stream=stream)
    assert stream.calls == ["v1  |  update 1.0s\n", "<flush>", "v1 eval  greedy 1.000  (1 env)\n", "<flush>"]
    assert not any(c in stream.getvalue() for c in "\r\x1b")

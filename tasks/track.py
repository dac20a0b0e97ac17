"""Flyte tasks: MLflow lineage. A parent run per workflow execution, a nested run per iteration.

Never cached: each execution must leave its own runs.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Optional

from flytekit import task
from pandera.typing import DataFrame

from posttrain import tracking
from posttrain.config import LoopConfig
from posttrain.evaluation.results import summarize
from posttrain.reward import RewardStats
from posttrain.rollout.collect import RolloutStats
from posttrain.rollout.dynamic_sampling import DynamicSamplingStats
from posttrain.schemas import AdmissionReport, EvalResults, Scored
from posttrain.training.trainer import TrainStats
from tasks.policy import PolicyDir
from tasks.execution import execution_name
from tasks.resources import stage


@task(**stage("track"))
def start_tracking(cfg: LoopConfig, report: DataFrame[AdmissionReport]) -> str:
    """Open the parent run: config as params, the admission report as an artifact; returns the run id."""
    execution = execution_name()
    run_id = tracking.start_run(cfg.experiment, run_name=f"rl_loop-{execution}", params=asdict(cfg),
                                tags={"flyte.execution_id": execution, "posttrain.workflow": "rl_loop"})
    tracking.log_dict(run_id, asdict(cfg), "config.json")
    tracking.log_table(run_id, report, "admission_report", html=True)
    tracking.log_metrics(run_id, tracking.admission_counts(report), step=0)
    return run_id


@task(**stage("track"))
def log_baseline(run_id: str, results: DataFrame[EvalResults], policy: PolicyDir) -> str:
    """Iteration 0: the starting policy's evaluation, so every curve starts at the baseline."""
    return tracking.log_iteration(run_id, 0, summarize(results), tables={"eval_results": results},
                                  policy_dir=policy.download(), policy_version=0)


@task(**stage("track"))
def log_iteration(run_id: str, iteration: int, rollout_stats: RolloutStats, scored: DataFrame[Scored],
                  reward_stats: RewardStats, train_stats: TrainStats, policy: PolicyDir,
                  results: Optional[DataFrame[EvalResults]] = None,
                  dynamic: Optional[DynamicSamplingStats] = None, window: Optional[RolloutStats] = None,
                  eval_s: float = 0.0) -> str:
    """Iteration k: its rollout (with dynamic sampling's counts when on), rewards and update, and the evaluation of
    v_k when it was evaluated (``eval.every``); ``window`` (v_k's sample task) and ``eval_s`` (its eval scoring)
    complete where the iteration's wall time went (``tracking.time_metrics``)."""
    iteration_s = tracking.seconds_since_iteration_logged(run_id, iteration - 1)
    metrics = tracking.iteration_metrics(results, rollout_stats, reward_stats, train_stats, iteration_s, dynamic,
                                         window, eval_s)
    tables = {"scored": scored} if results is None else {"scored": scored, "eval_results": results}
    return tracking.log_iteration(run_id, iteration, metrics, tables=tables, policy_dir=policy.download(),
                                  policy_version=iteration)


@task(**stage("track"))
def finish_tracking(run_id: str, final_policy: PolicyDir) -> str:
    tracking.client().set_tag(run_id, "posttrain.final_policy", final_policy.path)
    tracking.finish_run(run_id)
    return run_id

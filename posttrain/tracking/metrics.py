"""An RL iteration's MLflow metrics, shaped from what its stages report.

Each stage's task turns its stats into a metrics dict named as MLflow shows it (``<stage>/<field>`` by
``stage_metrics``, and ``time/<stage>_s`` for where the time went): ``rollout_metrics`` (a rollout, logged with the
iteration it trains), ``sample_times`` (a sample task's times, logged with the version it sampled from),
``reward_metrics``, ``train_metrics``; ``tasks/evaluate.py`` times its eval scoring as ``time/eval_score_s``
(``posttrain.timing.timed``), and the agent tier's metrics are ``posttrain.agent.metrics.agent_metrics`` (its task's
wall seconds ``time/agent_s``, logged with the version it sampled from). The tracking task merges one iteration's
dicts (``iteration_metrics``): zeros for a stage that did not run (``NOT_RUN``), the version's evaluation summary and
where its wall time went (``time_metrics``).

Example (iteration k: v_k's sample task, the rollout and reward that trained v_k, its update, v_k's eval scoring):
    >>> from posttrain.reward import RewardStats
    >>> from posttrain.rollout.collect import RolloutStats
    >>> stages = [sample_times(RolloutStats(wall_s=2.5, engine_start_s=1.0, eval_seconds=1.5)),
    ...           rollout_metrics(RolloutStats(samples=8, seconds=0.5, wall_s=3.0)),
    ...           reward_metrics(RewardStats(samples=8, reward_mean=0.5, wall_s=4.0)),
    ...           {"train/loss": 0.1, "time/update_s": 2.0}, {"time/eval_score_s": 5.0}]
    >>> m = iteration_metrics(stages, results=None, iteration_s=16.0)
    >>> m["rollout/samples"], m["reward/mean"], m["time/rollout_s"], m["time/sample_s"], m["time/untimed_s"]
    (8.0, 0.5, 0.5, 2.5, 2.5)
    >>> m["time/overhead_fraction"]
    0.21875
"""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import TYPE_CHECKING

import pandas as pd

from posttrain.evaluation.results import eval_metrics
from posttrain.evaluation.strata import assertion_metrics
from posttrain.reward import RewardStats
from posttrain.rollout.collect import RolloutStats, combine_stats
from posttrain.rollout.staleness import staleness_metrics

if TYPE_CHECKING:
    from posttrain.training.trainer import TrainStats

Metrics = dict[str, float]


def stage_metrics(stage: str, stats) -> Metrics:
    """A stage's stats dataclass as ``<stage>/<field>`` metrics (floats); a field's own ``<stage>_`` prefix is dropped,
    the reward stage's ``sandbox_*`` fields go under ``sandbox/`` (``sandbox_p50_ms`` -> ``sandbox/p50_ms``) and a
    mapping field gives one metric per key (``layer`` -> ``reward/layer/tests``, ``reward/layer/lint``...).

    >>> stage_metrics("reward", RewardStats(samples=2, layer={"tests": 0.5}))["reward/layer/tests"]
    0.5
    """
    metrics = {}
    for key, value in asdict(stats).items():
        group = "sandbox" if key.startswith("sandbox_") else stage
        name = f"{group}/{key.removeprefix(group + '_')}"
        if isinstance(value, dict):
            metrics.update({f"{name}/{part}": float(v) for part, v in value.items()})
        else:
            metrics[name] = float(value)
    return metrics


def rollout_metrics(stats: RolloutStats) -> Metrics:
    """A rollout's metrics, logged with the iteration it trains: ``rollout/<field>`` and its decode time
    ``time/rollout_s``."""
    return {**stage_metrics("rollout", stats), "time/rollout_s": float(stats.seconds)}


def combine_rollouts(so_far: Metrics, more: Metrics) -> Metrics:
    """The ``rollout_metrics`` of an iteration's rollout so far and of a dynamic-sampling refill round of it
    (``more``) together: ``combine_stats`` of the stats they were made from.

    >>> a, b = RolloutStats(samples=4, tokens=40, seconds=1.0, wall_s=2.0), RolloutStats(samples=4, tokens=20,
    ...                                                                               seconds=2.0, wall_s=1.5)
    >>> both = combine_rollouts(rollout_metrics(a), rollout_metrics(b))
    >>> both == rollout_metrics(combine_stats(a, b)), both["rollout/refill_wall_s"], both["time/rollout_s"]
    (True, 1.5, 3.0)
    """
    def stats(metrics: Metrics) -> RolloutStats:
        return RolloutStats(**{f.name: metrics[f"rollout/{f.name}"] for f in fields(RolloutStats)})

    return rollout_metrics(combine_stats(stats(so_far), stats(more)))


def sample_times(stats: RolloutStats) -> Metrics:
    """Where a sample task's time went (``stats``: its rollout's, timed by the task), logged with the version it
    sampled from: the whole task, the engine start or swap it waited for, the eval decode."""
    return {"time/sample_s": float(stats.wall_s), "time/engine_start_s": float(stats.engine_start_s),
            "time/engine_swap_s": float(stats.engine_swap_s), "time/eval_decode_s": float(stats.eval_seconds)}


def reward_metrics(stats: RewardStats) -> Metrics:
    """The reward stage's metrics: ``reward/*``, ``sandbox/*`` and its wall time ``time/reward_s``."""
    return {**stage_metrics("reward", stats), "time/reward_s": float(stats.wall_s)}


def train_metrics(stats: TrainStats, train_rows: pd.DataFrame, trained_from: int) -> Metrics:
    """The update's metrics: ``train/*``, how stale its samples were (``train_rows``, against v_{trained_from}:
    ``staleness_metrics``) and its wall time ``time/update_s``."""
    return {**stage_metrics("train", stats), **staleness_metrics(train_rows, trained_from),
            "time/update_s": float(stats.wall_s)}


# label -> the metric of one stage's wall seconds, in the order the stages run: with ``time/untimed_s`` the whole of
# an iteration's window (``time_metrics``); ``tracking.run_lines`` prints each by its label
STAGE_TIMES = {"sample": "time/sample_s", "reward": "time/reward_s", "agent": "time/agent_s",
               "update": "time/update_s", "eval": "time/eval_score_s"}

# What an iteration logs for a stage that did not run in it (a suite without single-turn envs has no rollout, reward
# or sample task of that tier; a version that was not evaluated had no eval scoring): zeros, as every iteration logs
# every stage.
NOT_RUN: Metrics = {**rollout_metrics(RolloutStats()), **sample_times(RolloutStats()),
                    **reward_metrics(RewardStats()), "time/eval_score_s": 0.0, "time/agent_s": 0.0}


def version_metrics(results: pd.DataFrame) -> Metrics:
    """An evaluated version's summary: greedy and sampled pass@1 (``eval_metrics``) and every declared assertion's
    pass rate (``eval/assertion/<name>``, ``assertion_metrics``)."""
    return {**eval_metrics(results), **assertion_metrics(results)}


def baseline_metrics(stages: list[Metrics], results: pd.DataFrame) -> Metrics:
    """Iteration 0's metrics: the starting policy's evaluation summary and its stages' (``stages``: the agent tier's
    greedy eval)."""
    return {**version_metrics(results), **merged(stages)}


def iteration_metrics(stages: list[Metrics], results: pd.DataFrame | None = None,
                      iteration_s: float | None = None) -> Metrics:
    """One RL iteration's metrics: its stages' (``stages``; ``NOT_RUN`` for those that did not run), the evaluation
    summary of its version (``eval/...``, greedy and sampled pass@1; none when the version was not evaluated) and where
    the time went (``time_metrics``, with ``iteration_s`` the iteration's wall seconds when known)."""
    metrics = merged([NOT_RUN, *stages])
    evaluation = version_metrics(results) if results is not None else {}
    return {**evaluation, **metrics, **time_metrics(metrics, iteration_s)}


def time_metrics(stages: Metrics, iteration_s: float | None = None) -> Metrics:
    """Where iteration k's wall time went, from its stages' metrics. Its window (since iteration k-1 was logged)
    runs: the reward stage of the rollout that trained v_k (``time/reward_s``, refill rounds included), the update
    (``time/update_s``), the sample task of v_k (engine start or swap, v_k's eval decode, the next rollout) and the
    refill rounds' sampling (``rollout/refill_wall_s``): together ``time/sample_s``, the agent tier's task of v_k (its
    eval episodes and the next rollout's: ``time/agent_s``) and the eval scoring of v_k (``time/eval_score_s``).
    With ``iteration_s`` also ``time/iteration_s``, ``time/untimed_s`` (tracking and orchestration: the rest) and
    ``time/overhead_fraction`` = (engine start + untimed) / iteration.

    >>> stages = {"time/sample_s": 2.5, "rollout/refill_wall_s": 1.0, "time/engine_start_s": 0.0,
    ...           "time/reward_s": 4.0, "time/update_s": 2.0, "time/agent_s": 3.0, "time/eval_score_s": 5.0}
    >>> time_metrics(stages, 20.0)
    {'time/sample_s': 3.5, 'time/iteration_s': 20.0, 'time/untimed_s': 2.5, 'time/overhead_fraction': 0.125}
    """
    sample_s = stages["time/sample_s"] + stages["rollout/refill_wall_s"]
    metrics = {"time/sample_s": sample_s}
    if iteration_s:
        staged = {**stages, **metrics}  # the sample stage with its refill rounds
        untimed = max(0.0, iteration_s - sum(staged[key] for key in STAGE_TIMES.values()))
        metrics.update({"time/iteration_s": iteration_s, "time/untimed_s": untimed,
                        "time/overhead_fraction": (stages["time/engine_start_s"] + untimed) / iteration_s})
    return metrics


def merged(stages: list[Metrics]) -> Metrics:
    """The stages' metrics in one dict (a later stage's value of a name wins)."""
    return {name: value for metrics in stages for name, value in metrics.items()}

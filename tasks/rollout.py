"""Flyte task: sample groups of completions from policy v_k with vLLM (Trajectories table + stats)."""

from __future__ import annotations

from typing import NamedTuple

from flytekit import task
from pandera.typing import DataFrame

from posttrain.config import RolloutConfig
from posttrain.envs.table import envs_from_table
from posttrain.rollout.collect import RolloutStats, rollout_iteration
from posttrain.schemas import Envs, Trajectories
from tasks.policy import PolicyDir
from tasks.resources import CACHE_VERSION, stage

Rollout = NamedTuple("Rollout", [("trajectories", DataFrame[Trajectories]), ("stats", RolloutStats)])


@task(cache=True, cache_version=CACHE_VERSION, **stage("rollout"))
def rollout(policy: PolicyDir, envs: DataFrame[Envs], cfg: RolloutConfig, iteration: int,
            policy_version: int) -> Rollout:
    table, stats = rollout_iteration(policy.download(), list(envs_from_table(envs).values()), cfg, iteration,
                                     policy_version)
    return Rollout(trajectories=table, stats=stats)

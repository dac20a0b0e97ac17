"""Flyte task: verify every completion in sandboxes, concurrently (Scored table + stats)."""

from __future__ import annotations

import time
from typing import NamedTuple

from flytekit import task
from pandera.typing import DataFrame

from posttrain.config import SandboxConfig
from posttrain.envs.table import envs_from_table
from posttrain.reward import RewardStats, reward_stats, score
from posttrain.sandbox import make_sandbox
from posttrain.schemas import Envs, Scored, Trajectories
from tasks.resources import CACHE_VERSION, stage

Reward = NamedTuple("Reward", [("scored", DataFrame[Scored]), ("stats", RewardStats)])


@task(cache=True, cache_version=CACHE_VERSION, **stage("reward"))
def reward(trajectories: DataFrame[Trajectories], envs: DataFrame[Envs], sandbox: SandboxConfig) -> Reward:
    started = time.perf_counter()
    box = make_sandbox(sandbox)
    try:
        scored = score(trajectories, envs_from_table(envs), box, sandbox)
    finally:
        box.close()
    return Reward(scored=scored, stats=reward_stats(scored, wall_s=time.perf_counter() - started))

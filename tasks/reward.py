"""Flyte tasks: verify every completion in sandboxes, concurrently (Scored table + stats); and join a
dynamic-sampling refill round to the iteration's rollout so far (``add_round``)."""

from __future__ import annotations

from typing import NamedTuple

import pandas as pd
from flytekit import task

from posttrain.config import SandboxConfig
from posttrain.envs.table import envs_from_table
from posttrain.reward import RewardStats, reward_stats, score
from posttrain.rollout.collect import RolloutStats, combine_stats
from posttrain.sandbox import make_sandbox
from posttrain.schemas import Envs, Scored, Trajectories
from posttrain.timing import timed
from tasks.resources import CACHE_VERSION, stage
from tasks.tables import Table

Reward = NamedTuple("Reward", [("scored", Table[Scored]), ("stats", RewardStats)])
Rounds = NamedTuple("Rounds", [("scored", Table[Scored]), ("rollout_stats", RolloutStats),
                               ("reward_stats", RewardStats)])


@task(cache=True, cache_version=CACHE_VERSION, **stage("reward"))
def reward(trajectories: Table[Trajectories], envs: Table[Envs], sandbox: SandboxConfig) -> Reward:
    clock = timed()
    box = make_sandbox(sandbox)
    try:
        scored = score(trajectories, envs_from_table(envs), box, sandbox)
    finally:
        box.close()
    return Reward(scored=scored, stats=reward_stats(scored, wall_s=clock.seconds))


@task(cache=True, cache_version=CACHE_VERSION, **stage("track"))
def add_round(so_far: Table[Scored], so_far_rollout: RolloutStats, so_far_reward: RewardStats,
              more: Table[Scored], more_rollout: RolloutStats, more_reward: RewardStats) -> Rounds:
    """The iteration's rollout so far plus one refill round (``more``): one Scored table, the rollout stats combined,
    the reward stats recomputed over every row (the stage times added up)."""
    joined = Scored.validate(pd.concat([so_far, more], ignore_index=True))
    return Rounds(scored=joined, rollout_stats=combine_stats(so_far_rollout, more_rollout),
                  reward_stats=reward_stats(joined, wall_s=so_far_reward.wall_s + more_reward.wall_s))

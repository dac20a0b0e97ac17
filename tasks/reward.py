"""Flyte tasks: verify every completion in sandboxes, concurrently (Scored table + the reward stage's metrics); and
join a dynamic-sampling refill round to the iteration's rollout so far (``add_round``). The sandbox backend is the
process's live one (``posttrain.sandbox.live``): in a local run every reward stage and eval scoring shares its warm
slots; in a task pod it is closed with the task."""

from __future__ import annotations

from typing import NamedTuple, Optional

import pandas as pd
from flytekit import task

from posttrain.config import SandboxConfig
from posttrain.envs.table import envs_from_table
from posttrain.envs.verifiers.cache import VERDICTS
from posttrain.memory import peak_memory
from posttrain.reward import reward_stats, score
from posttrain.sandbox import live as live_sandbox
from posttrain.rollout import settled
from posttrain.schemas import EnvHistory, Envs, Scored, Trajectories, empty
from posttrain.timing import timed
from posttrain.tracking.metrics import combine_rollouts, reward_metrics
from tasks.resources import CACHE_VERSION, stage
from tasks.rollout import engine_lifetime
from tasks.tables import Table

Reward = NamedTuple("Reward", [("scored", Table[Scored]), ("metrics", dict[str, float]),
                                 ("history", Table[EnvHistory])])
Rounds = NamedTuple("Rounds", [("scored", Table[Scored]), ("rollout_metrics", dict[str, float]),
                               ("reward_metrics", dict[str, float])])


@task(cache=True, cache_version=CACHE_VERSION, **stage("reward"))
def reward(trajectories: Table[Trajectories], envs: Table[Envs], sandbox: SandboxConfig,
           history: Optional[Table[EnvHistory]] = None, iteration: Optional[int] = None) -> Reward:
    """Verify ``trajectories``. With ``iteration`` (``rollout.settled_cooldown`` on: the iteration whose first round
    this is), ``history`` out is ``history`` in with these groups written over it, which envs settled
    (``posttrain.rollout.settled``), for the next rollout's pick; else it is empty."""
    clock = timed()
    with engine_lifetime(live_sandbox.shutdown), peak_memory() as memory:
        hits_before = VERDICTS.hits
        scored = score(trajectories, envs_from_table(envs), live_sandbox.acquire(sandbox), sandbox)
    stats = reward_stats(scored, wall_s=clock.seconds, memory_peak_mb=memory.peak_mb, domains=env_domains(envs),
                         cache_hits=VERDICTS.hits - hits_before)
    known = empty(EnvHistory) if iteration is None else settled.record(history, scored, iteration)
    return Reward(scored=scored, metrics=reward_metrics(stats), history=known)


def env_domains(envs: pd.DataFrame) -> dict[str, str]:
    """Env id -> domain, from an Envs table."""
    return dict(zip(envs["env_id"], envs["domain"]))


@task(cache=True, cache_version=CACHE_VERSION, **stage("track"))
def add_round(so_far: Table[Scored], so_far_rollout: dict[str, float], so_far_reward: dict[str, float],
              more: Table[Scored], more_rollout: dict[str, float], more_reward: dict[str, float],
              envs: Table[Envs]) -> Rounds:
    """The iteration's rollout so far plus one refill round (``more``): one Scored table, the rollout metrics
    combined, the reward metrics recomputed over every row (the stage times added up)."""
    joined = Scored.validate(pd.concat([so_far, more], ignore_index=True))
    wall_s = so_far_reward["reward/wall_s"] + more_reward["reward/wall_s"]
    memory_peak_mb = max(so_far_reward["reward/memory_peak_mb"], more_reward["reward/memory_peak_mb"])
    return Rounds(scored=joined, rollout_metrics=combine_rollouts(so_far_rollout, more_rollout),
                  reward_metrics=reward_metrics(reward_stats(
                      joined, wall_s=wall_s, memory_peak_mb=memory_peak_mb, domains=env_domains(envs),
                      cache_hits=int(so_far_reward["reward/cache_hits"] + more_reward["reward/cache_hits"]))))

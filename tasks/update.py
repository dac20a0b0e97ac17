"""Flyte task: one RL update of policy v_k with DeepSpeed on the scored rollouts, writing v_{k+1}.

The steps: 1. advantages, a column of the table (``TrainRows``, logged to MLflow); 2. train on the trainable rows,
resuming the optimizer from ``policy``'s ``train_state/`` when it carries one (v0 does not: a fresh optimizer) -- in a
local run, from the live trainer's memory when it saved ``policy`` itself (``posttrain.training.live``);
3. save the next policy version: the HF weights vLLM loads, and beside them in ``train_state/`` the optimizer,
LR schedule and RNG that the next update resumes from (``TrainConfig.carry_train_state``).
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import NamedTuple

import pandas as pd
from flytekit import current_context, task
from flytekit.types.directory import FlyteDirectory
from flytekitplugins.kfpytorch import Elastic
from pandera.typing import DataFrame

from posttrain.config import TrainConfig
from posttrain.reward import trainable_rows
from posttrain.schemas import Scored, TrainRows
from posttrain.training import live as live_trainer
from posttrain.training.samples import train_samples, with_advantages
from posttrain.training.trainer import TrainStats, rank0_path
from tasks.policy import PolicyDir
from tasks.resources import CACHE_VERSION, stage
from tasks.rollout import engine_lifetime
from tasks.tables import Table

Update = NamedTuple("Update", [("policy", PolicyDir), ("stats", TrainStats), ("train_rows", DataFrame[TrainRows])])


@task(cache=True, cache_version=CACHE_VERSION, **stage("update"))
def update(policy: PolicyDir, scored: Table[Scored], cfg: TrainConfig, policy_version: int,
           reference: PolicyDir) -> Update:
    """Train on every non-infra-error sample in this process; save the result as policy version ``policy_version``.

    ``reference`` is the frozen policy of the KL penalty (the loop's initial policy), downloaded only when
    ``cfg.kl_coef > 0``.
    """
    return train_version(policy, scored, cfg, policy_version, reference)


# The processes of ``update_parallel`` as registered: a task pod imports this module and starts that many, so set
# POSTTRAIN_UPDATE_NPROC to ``train.nproc_per_node`` before ``pyflyte register`` / ``run --remote``. A local run
# starts what the config says (``update_node`` overrides it).
REGISTERED_NPROC = int(os.environ.get("POSTTRAIN_UPDATE_NPROC", "2"))


def parallelism(nproc_per_node: int) -> Elastic:
    """One node, ``nproc_per_node`` ranks (``/dev/shm`` for them comes from the task's ``shared_memory``)."""
    return Elastic(nnodes=1, nproc_per_node=nproc_per_node, increase_shared_mem=False)


@task(cache=True, cache_version=CACHE_VERSION, task_config=parallelism(REGISTERED_NPROC), shared_memory=True,
      **stage("update"))
def update_parallel(policy: PolicyDir, scored: Table[Scored], cfg: TrainConfig, policy_version: int,
                    reference: PolicyDir) -> Update:
    """``update``, data parallel over ``cfg.nproc_per_node`` processes of one node: torch elastic starts them
    (locally as child processes, on a cluster in the task's pod), DeepSpeed joins the group it made (gloo on CPU,
    NCCL on GPUs), each rank trains on its share of every step, and rank 0's result is the task's."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size != cfg.nproc_per_node:
        raise ValueError(f"train.nproc_per_node={cfg.nproc_per_node} but the update runs on {world_size} processes: "
                         f"register the tasks with POSTTRAIN_UPDATE_NPROC={cfg.nproc_per_node}")
    return train_version(policy, scored, cfg, policy_version, reference)


def update_node(policy: PolicyDir, scored: Table[Scored], cfg: TrainConfig, policy_version: int,
                reference: PolicyDir):
    """In a workflow: the update of ``policy_version``, in-process (``update``) or data parallel
    (``update_parallel``) when ``cfg.nproc_per_node > 1``."""
    if cfg.nproc_per_node == 1:
        return update(policy=policy, scored=scored, cfg=cfg, policy_version=policy_version, reference=reference)
    return update_parallel(policy=policy, scored=scored, cfg=cfg, policy_version=policy_version,
                           reference=reference).with_overrides(
        task_config=parallelism(cfg.nproc_per_node))


def train_version(policy: PolicyDir, scored: pd.DataFrame, cfg: TrainConfig, policy_version: int,
                  reference: PolicyDir) -> Update:
    """Both update tasks' body: advantages, the update on the (live) trainer, the new version saved in rank 0's
    working directory."""
    started = time.perf_counter()
    rows = with_advantages(scored, cfg)
    reference_dir = reference.download() if cfg.kl_coef else None
    with engine_lifetime(release=live_trainer.shutdown):
        trainer = live_trainer.acquire(policy.download(), cfg, reference_dir=reference_dir)
        try:
            stats = trainer.train_on(train_samples(trainable_rows(rows)))
            out = rank0_path(Path(current_context().working_directory) / f"policy-v{policy_version}")
            trainer.save(out, metadata={"version": policy_version})
        except BaseException:
            live_trainer.discard(trainer)
            raise
    stats = dataclasses.replace(stats, wall_s=time.perf_counter() - started)
    return Update(policy=FlyteDirectory(str(out)), stats=stats, train_rows=rows)

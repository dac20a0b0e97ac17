"""Flyte task: one RL update of policy v_k with DeepSpeed on the scored rollouts, writing v_{k+1}.

The steps: 1. advantages, a column of the table (``TrainRows``, logged to MLflow); 2. train on the trainable rows,
resuming the optimizer from ``policy``'s ``train_state/`` when it carries one (v0 does not: a fresh optimizer) -- in a
local run, from the live trainer's memory when it saved ``policy`` itself (``posttrain.training.live``);
3. save the next policy version: the HF weights vLLM loads (in the model's own dtype), and beside them in
``train_state/`` the optimizer, LR schedule and RNG that the next update resumes from
(``TrainConfig.carry_train_state``) -- or, for a version that does not write its state (``writes_state``:
``TrainConfig.state_every``), what replays this update from the newest state written before it
(``training.replay``); the version records where its parent lives, and written states older than the newest
``TrainConfig.keep_states`` are pruned (``checkpoints.prune_train_states``: their weights stay).

Data parallel (``train.nnodes`` x ``train.nproc_per_node`` > 1): ``update_parallel``, a torch elastic task. Each rank
writes what it owns (rank 0 the weights, every rank its ZeRO partition) in its own working directory -- on a
multi-node PyTorchJob every node is a pod with its own disk -- and uploads it into one output directory that rank 0
chose in the raw output store (``publish``); the next update's ranks each download the whole version.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import NamedTuple

import pandas as pd
from flytekit import FlyteContextManager, current_context, task
from flytekit.types.directory import FlyteDirectory
from flytekitplugins.kfpytorch import Elastic
from pandera.typing import DataFrame

from posttrain.config import TrainConfig
from posttrain.memory import peak_memory
from posttrain.reward import trainable_rows
from posttrain.schemas import Scored, TrainRows
from posttrain.timing import timed
from posttrain.tracking.metrics import train_metrics
from posttrain.training import live as live_trainer
from posttrain.training.checkpoints import PARENT, prune_train_states
from posttrain.training.samples import train_samples, with_advantages
from tasks.policy import PolicyDir
from tasks.resources import CACHE_VERSION, stage
from tasks.rollout import engine_lifetime, in_process_run
from tasks.tables import Table

Update = NamedTuple("Update", [("policy", PolicyDir), ("metrics", dict[str, float]),
                               ("train_rows", DataFrame[TrainRows])])


@task(cache=True, cache_version=CACHE_VERSION, **stage("update"))
def update(policy: PolicyDir, scored: Table[Scored], cfg: TrainConfig, policy_version: int,
           reference: PolicyDir) -> Update:
    """Train on every non-infra-error sample in this process; save the result as policy version ``policy_version``;
    ``metrics``: the update's (``tracking.metrics.train_metrics``), ``train_rows``: the table it trained on.

    ``reference`` is the loop's initial policy: the frozen policy of the KL penalty and the base a LoRA adapter
    continues on (``training.lora``), downloaded only when ``cfg.kl_coef > 0`` or ``cfg.lora_rank > 0``.
    """
    return train_version(policy, scored, cfg, policy_version, reference)


@task(cache=True, cache_version=CACHE_VERSION, **stage("track"))
def warm_trainer(policy: PolicyDir, cfg: TrainConfig) -> None:
    """Locally, build the first update's trainer on v0 in the background (``training.live.prestart``): its start
    (DeepSpeed, the model, the optimizer: seconds) overlaps admission and v0's evaluation, as ``warm_engine``'s does.
    In a task pod, or for a data-parallel update (processes of its own), there is nothing to do. Cached as
    ``warm_engine`` is: a rerun starts nothing."""
    if in_process_run() and cfg.nnodes * cfg.nproc_per_node == 1:
        live_trainer.prestart(policy.download(), cfg, reference_dir=reference_dir(policy, cfg))  # v0 is the reference


# The shape of ``update_parallel`` as registered: a task pod imports this module and starts that many ranks, so set
# POSTTRAIN_UPDATE_NNODES / POSTTRAIN_UPDATE_NPROC to ``train.nnodes`` / ``train.nproc_per_node`` before
# ``pyflyte register`` / ``run --remote``. A local run starts what the config says (``update_node`` overrides it).
REGISTERED_NNODES = int(os.environ.get("POSTTRAIN_UPDATE_NNODES", "1"))
REGISTERED_NPROC = int(os.environ.get("POSTTRAIN_UPDATE_NPROC", "2"))


def parallelism(nnodes: int, nproc_per_node: int) -> Elastic:
    """``nnodes`` x ``nproc_per_node`` ranks. One node: torch elastic inside the task's pod (``/dev/shm`` for the
    ranks from the task's ``shared_memory``); more: a Kubeflow PyTorchJob of ``nnodes`` worker pods."""
    return Elastic(nnodes=nnodes, nproc_per_node=nproc_per_node, increase_shared_mem=False)


@task(cache=True, cache_version=CACHE_VERSION, task_config=parallelism(REGISTERED_NNODES, REGISTERED_NPROC),
      shared_memory=True, **stage("update"))
def update_parallel(policy: PolicyDir, scored: Table[Scored], cfg: TrainConfig, policy_version: int,
                    reference: PolicyDir) -> Update:
    """``update``, data parallel over ``cfg.nnodes`` x ``cfg.nproc_per_node`` processes: torch elastic starts them
    (locally as child processes, on a cluster in the task's pod or the PyTorchJob's pods), DeepSpeed joins the group
    it made (gloo on CPU, NCCL on GPUs), each rank trains on its share of every step, and rank 0's result is the
    task's."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size != cfg.nnodes * cfg.nproc_per_node:
        raise ValueError(f"train.nnodes={cfg.nnodes} x train.nproc_per_node={cfg.nproc_per_node} "
                         "but the update runs on "
                         f"{world_size} processes: register the tasks with POSTTRAIN_UPDATE_NNODES={cfg.nnodes} "
                         f"POSTTRAIN_UPDATE_NPROC={cfg.nproc_per_node}")
    return train_version(policy, scored, cfg, policy_version, reference)


def update_node(policy: PolicyDir, scored: Table[Scored], cfg: TrainConfig, policy_version: int,
                reference: PolicyDir):
    """In a workflow: the update of ``policy_version``, in-process (``update``) or data parallel
    (``update_parallel``) when ``cfg`` asks for more than one process.

    One node: the process count is set on the node (a local run starts what the config says). Several nodes: the
    task must have been registered with that shape (a PyTorchJob's replicas are part of the task itself; flytekit's
    node-level ``task_config`` override does not rebuild them), which is checked here."""
    if cfg.nnodes * cfg.nproc_per_node == 1:
        return update(policy=policy, scored=scored, cfg=cfg, policy_version=policy_version, reference=reference)
    if cfg.nnodes > 1 and (cfg.nnodes, cfg.nproc_per_node) != (REGISTERED_NNODES, REGISTERED_NPROC):
        raise ValueError(f"train.nnodes={cfg.nnodes}, train.nproc_per_node={cfg.nproc_per_node}: the update task is "
                         f"registered for {REGISTERED_NNODES} x {REGISTERED_NPROC}; set POSTTRAIN_UPDATE_NNODES="
                         f"{cfg.nnodes} POSTTRAIN_UPDATE_NPROC={cfg.nproc_per_node} where the tasks are registered and "
                         f"in the task image's environment")
    node = update_parallel(policy=policy, scored=scored, cfg=cfg, policy_version=policy_version, reference=reference)
    return node.with_overrides(task_config=parallelism(1, cfg.nproc_per_node)) if cfg.nnodes == 1 else node


def train_version(policy: PolicyDir, scored: pd.DataFrame, cfg: TrainConfig, policy_version: int,
                  reference: PolicyDir) -> Update:
    """Both update tasks' body: advantages, the update on the (live) trainer, the new version saved in rank 0's
    working directory."""
    clock = timed()
    rows = with_advantages(scored, cfg)
    with engine_lifetime(live_trainer.shutdown), peak_memory() as memory:
        trainer = live_trainer.acquire(policy.download(), cfg, reference_dir=reference_dir(reference, cfg))
        try:
            stats = trainer.train_on(train_samples(trainable_rows(rows)))
            out = Path(current_context().working_directory) / f"policy-v{policy_version}"
            parent = policy.remote_source or os.path.abspath(policy.path)
            trainer.save(out, metadata={"version": policy_version, PARENT: parent},
                         write_state=writes_state(cfg, policy_version, trainer.engine.world_size))
            rank = trainer.engine.global_rank
        except BaseException:
            live_trainer.discard(trainer)
            raise
    if cfg.carry_train_state and rank == 0:
        prune_train_states(out, cfg.keep_states)
    stats = dataclasses.replace(stats, wall_s=clock.seconds, memory_peak_mb=memory.peak_mb)
    metrics = train_metrics(stats, rows, trained_from=policy_version - 1)
    return Update(policy=publish(out), metrics=metrics, train_rows=rows)


def reference_dir(reference: PolicyDir, cfg: TrainConfig) -> str | None:
    """The reference policy's local copy when the update uses one (``cfg.kl_coef > 0``: the KL penalty's frozen policy;
    ``cfg.lora_rank > 0``: the base a LoRA adapter continues on), else None: nothing downloaded."""
    return reference.download() if cfg.kl_coef or cfg.lora_rank else None


def writes_state(cfg: TrainConfig, policy_version: int, world_size: int) -> bool:
    """Whether the update that writes ``policy_version`` writes its full training state (else a replay record).

    ``cfg.state_every`` N > 0: every N-th version. 0: where the next update would have to rebuild the state anyway --
    every version when each update is a process of its own (a cluster's task pods; data parallel ranks, which
    torch elastic starts per update) -- and none in a local single-process run, whose live trainer carries the
    state from update to update and a rerun after a kill replays it.

    >>> writes_state(TrainConfig(state_every=3), 6, 1), writes_state(TrainConfig(state_every=3), 7, 1)
    (True, False)
    >>> writes_state(TrainConfig(), 1, world_size=2)
    True
    """
    if cfg.state_every:
        return policy_version % cfg.state_every == 0
    return world_size > 1 or not FlyteContextManager.current_context().execution_state.is_local_execution()


def publish(local: Path) -> FlyteDirectory:
    """The saved version as the task's output. One rank: its directory. Several: every rank uploads the files it
    wrote into the one directory of the raw output store that rank 0 chose (no rank needs another's disk), and
    that directory is the output, referenced as it is (a remote one is not copied again)."""
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_world_size() == 1:
        return FlyteDirectory(str(local))
    store = FlyteContextManager.current_context().file_access
    agreed = [store.get_random_remote_directory() if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(agreed, src=0)
    remote = agreed[0].rstrip("/")
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        store.put_data(str(path), f"{remote}/{path.relative_to(local).as_posix()}")
    dist.barrier()  # every rank's files are in place before rank 0 hands the directory on
    return FlyteDirectory(remote, remote_directory=False)

"""Flyte task: one RL update of policy v_k with DeepSpeed on the scored rollouts, writing v_{k+1}.

The steps: 1. advantages, a column of the table (``TrainRows``, logged to MLflow); 2. train on the trainable rows,
resuming the optimizer from ``policy``'s ``train_state/`` when it carries one (v0 does not: a fresh optimizer);
3. save the next policy version: the HF weights vLLM loads, and beside them in ``train_state/`` the optimizer,
LR schedule and RNG that the next update resumes from (``TrainConfig.carry_train_state``).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import NamedTuple, Optional

from flytekit import current_context, task
from flytekit.types.directory import FlyteDirectory
from pandera.typing import DataFrame

from posttrain.config import TrainConfig
from posttrain.reward import trainable_rows
from posttrain.schemas import Scored, TrainRows
from posttrain.training.samples import train_samples, with_advantages
from posttrain.training.trainer import PolicyTrainer, TrainStats
from tasks.policy import PolicyDir
from tasks.resources import CACHE_VERSION, stage

Update = NamedTuple("Update", [("policy", PolicyDir), ("stats", TrainStats), ("train_rows", DataFrame[TrainRows])])


@task(cache=True, cache_version=CACHE_VERSION, **stage("update"))
def update(policy: PolicyDir, scored: DataFrame[Scored], cfg: TrainConfig, policy_version: int,
           reference: Optional[PolicyDir] = None) -> Update:
    """Train on every non-infra-error sample; save the result as policy version ``policy_version``.

    ``reference`` is the frozen policy of the KL penalty (the loop's initial policy), downloaded only when
    ``cfg.kl_coef > 0``.
    """
    started = time.perf_counter()
    out = Path(current_context().working_directory) / f"policy-v{policy_version}"
    rows = with_advantages(scored, cfg)
    reference_dir = reference.download() if cfg.kl_coef and reference is not None else None
    trainer = PolicyTrainer(policy.download(), cfg, reference_dir=reference_dir)
    try:
        stats = trainer.train_on(train_samples(trainable_rows(rows)))
        trainer.save(out, metadata={"version": policy_version})
    finally:
        trainer.close()
    stats = dataclasses.replace(stats, wall_s=time.perf_counter() - started)
    return Update(policy=FlyteDirectory(str(out)), stats=stats, train_rows=rows)

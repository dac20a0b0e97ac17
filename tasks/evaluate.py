"""Flyte task: greedy pass@1 of one policy version on the eval split (EvalResults table)."""

from __future__ import annotations

from flytekit import task
from pandera.typing import DataFrame

from posttrain.config import EvalConfig, RolloutConfig, SandboxConfig
from posttrain.envs.table import envs_from_table
from posttrain.evaluation.greedy import evaluate_policy
from posttrain.schemas import Envs, EvalResults
from tasks.policy import PolicyDir
from tasks.resources import CACHE_VERSION, stage


@task(cache=True, cache_version=CACHE_VERSION, **stage("evaluate"))
def evaluate(policy: PolicyDir, envs: DataFrame[Envs], cfg: EvalConfig, rollout: RolloutConfig,
             sandbox: SandboxConfig, policy_version: int) -> DataFrame[EvalResults]:
    return evaluate_policy(policy.download(), envs_from_table(envs), cfg, rollout, sandbox, policy_version)

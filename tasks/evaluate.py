"""Flyte tasks: greedy and sampled pass@1 of a policy version on the eval split (EvalResults table).

In the RL loop the eval completions come from ``tasks.rollout.sample`` (the engine lifetime that also rolls out
from that version) and ``score_eval`` verifies them on a CPU pod; ``evaluate`` does both for one policy.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

from flytekit import task
from pandera.typing import DataFrame

from posttrain.config import EvalConfig, RolloutConfig, SandboxConfig
from posttrain.envs.table import envs_from_table
from posttrain.evaluation import greedy
from posttrain.rollout import live
from posttrain.sandbox import live as live_sandbox
from posttrain.schemas import Envs, EvalResults, EvalTrajectories
from posttrain.timing import timed
from tasks.policy import PolicyDir
from tasks.resources import CACHE_VERSION, stage
from tasks.rollout import engine_lifetime
from tasks.tables import Table


EvalScored = NamedTuple("EvalScored", [("results", Table[EvalResults]), ("metrics", dict[str, float])])


@task(cache=True, cache_version=CACHE_VERSION, **stage("reward"))
def score_eval(trajectories: Table[EvalTrajectories], envs: Table[Envs], sandbox: SandboxConfig,
               previous: Optional[Table[EvalResults]] = None) -> EvalScored:
    """Verify eval completions (greedy and sampled) in sandboxes and judge each env's assertions (``previous``: the
    previously evaluated version's results, for ``no_regression``); ``metrics``: how long that took
    (``time/eval_score_s``)."""
    metrics: dict[str, float] = {}
    with engine_lifetime(live_sandbox.shutdown), timed("time/eval_score_s", into=metrics):
        results = greedy.score_eval(trajectories, envs_from_table(envs), sandbox, previous)
    return EvalScored(results=results, metrics=metrics)


@task(cache=True, cache_version=CACHE_VERSION, **stage("evaluate"))
def evaluate(policy: PolicyDir, envs: Table[Envs], cfg: EvalConfig, rollout: RolloutConfig,
             sandbox: SandboxConfig, policy_version: int) -> DataFrame[EvalResults]:
    """Decode and verify in one task, on the process's live engine and live sandbox."""
    with engine_lifetime(live.shutdown_all, live_sandbox.shutdown):
        return greedy.evaluate_policy(policy.download(), envs_from_table(envs), cfg, rollout, sandbox,
                                      policy_version)

"""The closed RL loop: admit -> (rollout -> reward -> update -> evaluate) x iterations, tracked in MLflow.

Run it locally (embedded Flyte, real vLLM/bwrap/DeepSpeed/MLflow):
    pyflyte run workflows/rl_loop.py rl_loop                      # the demo: 4 iterations
    pyflyte run workflows/rl_loop.py rl_smoke                     # 1 iteration, tiny sizes
    pyflyte run workflows/rl_loop.py rl_loop --cfg '{"iterations": 2, "suite": "my_suite/"}'

Policy versions: v0 is the starting policy; iteration k rolls out with v_{k-1} and trains v_k. Every stage task is
cached (explicit cache versions, content-addressed policies), so re-running an interrupted execution resumes from
the last finished stage.
"""

from __future__ import annotations

from flytekit import dynamic, workflow
from pandera.typing import DataFrame

from posttrain.config import LoopConfig
from posttrain.schemas import Envs
from tasks.admit import admit_suite, fingerprint_suite
from tasks.evaluate import evaluate
from tasks.policy import PolicyDir, prepare_policy
from tasks.reward import reward
from tasks.rollout import rollout
from tasks.track import finish_tracking, log_baseline, log_iteration, start_tracking
from tasks.update import update


@dynamic
def iterate(cfg: LoopConfig, envs: DataFrame[Envs], policy: PolicyDir, run_id: str) -> PolicyDir:
    """Unroll ``cfg.iterations`` RL iterations into a DAG (one node per stage and iteration)."""
    baseline = evaluate(policy=policy, envs=envs, cfg=cfg.eval, rollout=cfg.rollout, sandbox=cfg.sandbox,
                        policy_version=0)
    logged = log_baseline(run_id=run_id, results=baseline, policy=policy)
    reference = policy  # the frozen policy of the KL penalty (train.kl_coef)
    for k in range(1, cfg.iterations + 1):
        sampled = rollout(policy=policy, envs=envs, cfg=cfg.rollout, iteration=k, policy_version=k - 1)
        scored = reward(trajectories=sampled.trajectories, envs=envs, sandbox=cfg.sandbox)
        updated = update(policy=policy, scored=scored.scored, cfg=cfg.train, policy_version=k, reference=reference)
        results = evaluate(policy=updated.policy, envs=envs, cfg=cfg.eval, rollout=cfg.rollout,
                           sandbox=cfg.sandbox, policy_version=k)
        this_log = log_iteration(run_id=run_id, iteration=k, rollout_stats=sampled.stats, scored=updated.train_rows,
                                 reward_stats=scored.stats, train_stats=updated.stats, results=results,
                                 policy=updated.policy)
        logged >> this_log  # MLflow iteration runs are written in order
        logged, policy = this_log, updated.policy
    return policy


@workflow
def rl_loop(cfg: LoopConfig = LoopConfig()) -> PolicyDir:
    """Admit the suite, then run the RL iterations; returns the final policy directory."""
    digest = fingerprint_suite(suite=cfg.suite)
    admission = admit_suite(suite=cfg.suite, digest=digest, sandbox=cfg.sandbox, cfg=cfg.admission)
    policy = prepare_policy(policy=cfg.policy)
    run_id = start_tracking(cfg=cfg, report=admission.report)
    final = iterate(cfg=cfg, envs=admission.envs, policy=policy, run_id=run_id)
    finish_tracking(run_id=run_id, final_policy=final)
    return final


@workflow
def rl_smoke(cfg: LoopConfig = LoopConfig.smoke()) -> PolicyDir:
    """The quick end-to-end check: one iteration, tiny sizes (``make smoke``)."""
    return rl_loop(cfg=cfg)

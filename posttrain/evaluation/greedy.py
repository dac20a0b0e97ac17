"""Greedy pass@1 of one policy version on the eval split: vLLM decode (temperature 0), sandboxed verification.

The two halves run where they belong: ``decode_eval`` on the engine that serves the policy (in the RL loop, the
same engine lifetime that rolls out from it), ``score_eval`` in sandboxes. ``evaluate_policy`` does both.

Example (real vLLM and bwrap; tests/evaluation/test_greedy.py runs it):
    >>> from posttrain.config import EvalConfig, RolloutConfig, SandboxConfig
    >>> table = evaluate_policy("policy_dir", envs, EvalConfig(), RolloutConfig(), SandboxConfig(), version=0)  # doctest: +SKIP
    >>> summarize(table)["eval/pass_at_1"]                                                                      # doctest: +SKIP
    0.25
"""

from __future__ import annotations

import pandas as pd

from posttrain.config import EvalConfig, RolloutConfig, SandboxConfig
from posttrain.envs.spec import EnvSpec
from posttrain.evaluation.results import eval_results
from posttrain.reward import score
from posttrain.rollout.collect import collect
from posttrain.rollout.engine import RolloutEngine
from posttrain.sandbox import make_sandbox


def eval_envs(envs: dict[str, EnvSpec], cfg: EvalConfig) -> list[EnvSpec]:
    """The envs of the configured split, in stable id order, capped at ``cfg.limit`` (0 = all)."""
    chosen = sorted((e for e in envs.values() if e.split == cfg.split), key=lambda e: e.id)
    return chosen[: cfg.limit] if cfg.limit > 0 else chosen


def evaluates(cfg: EvalConfig, version: int, last: int) -> bool:
    """Whether the RL loop evaluates policy version ``version`` of ``0..last``: v0, the last, every ``cfg.every``-th.

    >>> [evaluates(EvalConfig(every=2), k, last=5) for k in range(6)]
    [True, False, True, False, True, True]
    """
    return version in (0, last) or (cfg.every > 0 and version % cfg.every == 0)


def decode_eval(engine: RolloutEngine, envs: dict[str, EnvSpec], cfg: EvalConfig) -> pd.DataFrame:
    """Greedy completions (Trajectories, one per eval env) of the policy version ``engine`` serves."""
    trajectories, _ = collect(engine, eval_envs(envs, cfg), n=1, temperature=0.0, max_tokens=cfg.max_new_tokens,
                              group_prefix=f"eval-v{engine.version}")
    return trajectories


def score_eval(trajectories: pd.DataFrame, envs: dict[str, EnvSpec], sandbox: SandboxConfig) -> pd.DataFrame:
    """The EvalResults table of greedy completions, verified in sandboxes."""
    box = make_sandbox(sandbox)
    try:
        scored = score(trajectories, envs, box, sandbox)
    finally:
        box.close()
    return eval_results(scored, envs)


def evaluate_policy(policy_dir: str, envs: dict[str, EnvSpec], cfg: EvalConfig, rollout: RolloutConfig,
                    sandbox: SandboxConfig, version: int) -> pd.DataFrame:
    """Return the EvalResults table of ``policy_dir`` (policy version ``version``), on the process's live engine."""
    from posttrain.rollout import live

    return score_eval(decode_eval(live.acquire(policy_dir, rollout, version=version), envs, cfg), envs, sandbox)

"""Greedy pass@1 of one policy version on the eval split: vLLM decode (temperature 0), sandboxed verification.

Example (real vLLM and bwrap; tests/rollout/test_collect.py runs it):
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
from posttrain.rollout.engine import VLLMEngine
from posttrain.sandbox import make_sandbox


def eval_envs(envs: dict[str, EnvSpec], cfg: EvalConfig) -> list[EnvSpec]:
    """The envs of the configured split, in stable id order, capped at ``cfg.limit`` (0 = all)."""
    chosen = sorted((e for e in envs.values() if e.split == cfg.split), key=lambda e: e.id)
    return chosen[: cfg.limit] if cfg.limit > 0 else chosen


def evaluate_policy(policy_dir: str, envs: dict[str, EnvSpec], cfg: EvalConfig, rollout: RolloutConfig,
                    sandbox: SandboxConfig, version: int) -> pd.DataFrame:
    """Return the EvalResults table of ``policy_dir`` (policy version ``version``)."""
    chosen = eval_envs(envs, cfg)
    with VLLMEngine(policy_dir, rollout) as engine:
        trajectories, _ = collect(engine, chosen, n=1, temperature=0.0, max_tokens=cfg.max_new_tokens,
                                  policy_version=version, group_prefix=f"eval-v{version}")
    box = make_sandbox(sandbox)
    try:
        scored = score(trajectories, envs, box, sandbox)
    finally:
        box.close()
    return eval_results(scored, envs)

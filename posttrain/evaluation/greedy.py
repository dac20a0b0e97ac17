"""Pass@1 of one policy version on the eval split: vLLM decode, sandboxed verification.

Two estimates from one decode: greedy pass@1 (temperature 0, one completion per env) and sampled pass@1 (the mean
success of ``EvalConfig.samples`` completions per env at the rollout's temperature and top_p). The sampled ones use
the same seeds for every version (iteration 0's, which no rollout uses), so two versions' curves differ by the
policy, not by the dice. The two halves run where they belong: ``decode_eval`` on the engine that serves the policy
(in the RL loop, the same engine lifetime that rolls out from it), ``score_eval`` in sandboxes. ``evaluate_policy``
does both, on the process's live engine and live sandbox (``posttrain.rollout.live``, ``posttrain.sandbox.live``).

Example (real vLLM and bwrap; tests/evaluation/test_greedy.py runs it):
    >>> from posttrain.config import EvalConfig, RolloutConfig, SandboxConfig
    >>> table = evaluate_policy("policy_dir", envs, EvalConfig(), RolloutConfig(), SandboxConfig(),
    ...                         version=0)                                              # doctest: +SKIP
    >>> eval_metrics(table)["eval/pass_at_1"], eval_metrics(table)["eval/pass_at_1_sampled"]  # doctest: +SKIP
    (0.25, 0.1875)
"""

from __future__ import annotations

import pandas as pd

from posttrain.config import EvalConfig, RolloutConfig, SandboxConfig
from posttrain.envs.spec import EnvSpec
from posttrain.evaluation.results import eval_results
from posttrain.reward import score
from posttrain.rollout.collect import collect, iteration_seed
from posttrain.rollout.engine import RolloutEngine
from posttrain.sandbox import live as live_sandbox
from posttrain.schemas import EvalTrajectories


def split_envs(envs: dict[str, EnvSpec], split: str, limit: int, agent: bool) -> list[EnvSpec]:
    """The agent (``agent``) or single-turn envs of ``split``, in stable id order, capped at ``limit`` (0 = all): the
    set a version is evaluated on, by each tier."""
    chosen = sorted((e for e in envs.values() if e.split == split and (e.kind == "agent") == agent),
                    key=lambda e: e.id)
    return chosen[:limit] if limit > 0 else chosen


GROUP_PREFIX = {"greedy": "eval-v", "sampled": "eval-sampled-v"}  # + <version>: an eval decode's groups, either tier


def group_prefix(version: int, decoding: str = "greedy") -> str:
    """The group id prefix of policy version ``version``'s ``decoding`` eval completions or episodes (``/<env_id>``
    follows it), the same for single-turn envs and agent envs."""
    return f"{GROUP_PREFIX[decoding]}{version}"


def group_decoding(group_id: str) -> str:
    """The decoding of the eval completion or episode whose group id is ``group_id``.

    >>> group_decoding(group_prefix(3, "sampled") + "/t/a"), group_decoding(group_prefix(3) + "/t/a")
    ('sampled', 'greedy')
    """
    return "sampled" if group_id.startswith(GROUP_PREFIX["sampled"]) else "greedy"


def eval_envs(envs: dict[str, EnvSpec], cfg: EvalConfig) -> list[EnvSpec]:
    """The single-turn envs of the configured split (``split_envs``); agent envs are evaluated in episodes
    (``posttrain.evaluation.agent``)."""
    return split_envs(envs, cfg.split, cfg.limit, agent=False)


def evaluates(cfg: EvalConfig, version: int, last: int) -> bool:
    """Whether the RL loop evaluates policy version ``version`` of ``0..last``: v0, the last, every ``cfg.every``-th.

    >>> [evaluates(EvalConfig(every=2), k, last=5) for k in range(6)]
    [True, False, True, False, True, True]
    """
    return version in (0, last) or (cfg.every > 0 and version % cfg.every == 0)


def decode_eval(engine: RolloutEngine, envs: dict[str, EnvSpec], cfg: EvalConfig,
                rollout: RolloutConfig) -> pd.DataFrame:
    """EvalTrajectories of the policy version ``engine`` serves: each eval env's greedy completion, then
    ``cfg.samples`` completions per env at ``rollout``'s temperature and top_p (seeded alike for every version)."""
    chosen = eval_envs(envs, cfg)
    greedy, _ = collect(engine, chosen, n=1, temperature=0.0, max_tokens=cfg.max_new_tokens,
                        group_prefix=group_prefix(engine.version))
    decodes = [greedy.assign(decoding="greedy")]
    if cfg.samples:
        sampled, _ = collect(engine, chosen, n=cfg.samples, temperature=rollout.temperature, top_p=rollout.top_p,
                             max_tokens=cfg.max_new_tokens, group_prefix=group_prefix(engine.version, "sampled"),
                             seed=iteration_seed(rollout.seed, 0))
        decodes.append(sampled.assign(decoding="sampled"))
    return EvalTrajectories.validate(pd.concat(decodes, ignore_index=True))


def score_eval(trajectories: pd.DataFrame, envs: dict[str, EnvSpec], sandbox: SandboxConfig,
               previous: pd.DataFrame | None = None) -> pd.DataFrame:
    """The EvalResults table of an eval decode (EvalTrajectories), verified in the process's live sandbox
    (``posttrain.sandbox.live``, made from ``sandbox``); ``previous`` (the previously evaluated version's
    EvalResults) judges the ``no_regression`` assertions."""
    return eval_results(score(trajectories, envs, live_sandbox.acquire(sandbox), sandbox), envs, previous=previous)


def evaluate_policy(policy_dir: str, envs: dict[str, EnvSpec], cfg: EvalConfig, rollout: RolloutConfig,
                    sandbox: SandboxConfig, version: int) -> pd.DataFrame:
    """Return the EvalResults table of ``policy_dir`` (policy version ``version``), on the process's live engine."""
    from posttrain.rollout import live

    return score_eval(decode_eval(live.acquire(policy_dir, rollout, version=version), envs, cfg, rollout), envs,
                      sandbox)

"""Flyte task: the agent tier of policy v_k, apart from the single-turn ``tasks.rollout.sample``.

``agent_sample`` runs, on the process's live vLLM engine swapped to v_k (``posttrain.rollout.live``) and in the
process's live sandbox (``posttrain.sandbox.live``, from ``SandboxConfig``), the greedy agent eval of v_k (when this
version is evaluated) and the agent rollout of iteration k+1 from it (``posttrain.agent.tier``,
``posttrain.evaluation.agent``). Its scored rows are rewarded already (the verifier on each final workspace), so they
go straight to the update; its eval rows join the version's EvalResults. A version without agent envs to run returns
empty tables and starts no engine.

The engine is the one ``sample`` uses (same ``RolloutConfig``: one engine per process, no restart between the
tiers), so ``rollout.max_model_len`` and the policy's positions must hold an agent episode (prompt ~500 tokens with
the demo tokenizer, plus the turns). The task runs sandboxes: it carries their pod template.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import pandas as pd

from flytekit import task

from posttrain.agent.metrics import AgentStats, agent_metrics
from posttrain.agent.tier import chat_format, rollout_agent, rollout_envs
from posttrain.config import AgentConfig, RolloutConfig, SandboxConfig
from posttrain.envs.table import envs_from_table
from posttrain.evaluation.agent import eval_envs, evaluate_agent
from posttrain.evaluation.results import judge_regressions
from posttrain.memory import peak_memory
from posttrain.rollout import live
from posttrain.sandbox import live as live_sandbox
from posttrain.schemas import AgentScored, Envs, EpisodeSnapshots, EvalResults, Scored, Steps, empty
from posttrain.timing import timed
from tasks.pods import sandbox_pod_template
from tasks.policy import PolicyDir
from tasks.resources import CACHE_VERSION, stage
from tasks.rollout import engine_lifetime
from tasks.tables import Table

AgentSampled = NamedTuple("AgentSampled", [("scored", Table[AgentScored]), ("steps", Table[Steps]),
                                           ("eval_results", Table[EvalResults]), ("eval_steps", Table[Steps]),
                                           ("eval_snapshots", Table[EpisodeSnapshots]),
                                           ("metrics", dict[str, float]), ("eval_metrics", dict[str, float]),
                                           ("times", dict[str, float])])


@task(cache=True, cache_version=CACHE_VERSION, **{**stage("rollout"), "pod_template": sandbox_pod_template()})
def agent_sample(policy: PolicyDir, envs: Table[Envs], cfg: AgentConfig, sandbox: SandboxConfig,
                 rollout_cfg: RolloutConfig, policy_version: int, rollout: bool, evaluate: bool,
                 iteration: Optional[int] = None) -> AgentSampled:
    """Policy v_k (``policy_version``): greedy episodes on the agent eval envs if ``evaluate`` (the first
    ``cfg.eval_limit`` by id; 0: all), ``cfg.samples_per_env`` episodes on each of ``cfg.envs_per_iteration`` agent
    train envs for iteration k+1 if ``rollout`` (``iteration``: another one, under bounded staleness); empty tables
    otherwise.

    ``scored`` / ``steps``: the rollout (AgentScored rows, group ids ``it<iteration>/<env_id>``, and their tool
    calls); ``eval_results`` / ``eval_steps``: one greedy row per eval env and its episode's calls (group ids
    ``eval-v<k>/<env_id>``); ``eval_snapshots``: the workspace snapshots of the eval episodes that failed
    (``agent.snapshot_every``, at most ``agent.snapshot_keep_mb``); ``metrics``: the rollout's episodes and the task's
    timings (engine start or swap, wall) as ``agent/*`` (``posttrain.agent.metrics.agent_metrics``); ``eval_metrics``:
    the eval episodes' (``agent_eval/*``); ``times``: the task's wall seconds as ``time/agent_s``, the agent stage of
    v_k's iteration window (``posttrain.tracking.metrics.time_metrics``).
    """
    clock = timed()
    specs = envs_from_table(envs)
    for_iteration = policy_version + 1 if iteration is None else iteration
    rolls_out = rollout and bool(rollout_envs(specs, cfg.envs_per_iteration, cfg.seed, for_iteration))
    evaluates = evaluate and bool(eval_envs(specs, cfg.eval_limit))
    scored, steps, stats = empty(AgentScored), empty(Steps), AgentStats()
    results, eval_steps, eval_stats = empty(EvalResults), empty(Steps), AgentStats()
    snapshots = empty(EpisodeSnapshots)
    start_s = swap_s = memory_peak_mb = 0.0
    if rolls_out or evaluates:
        with engine_lifetime(live.shutdown_all, live_sandbox.shutdown), peak_memory() as memory:
            policy_dir = policy.download()
            engine, start_s, swap_s = live.acquire_timed(policy_dir, rollout_cfg, version=policy_version)
            fmt, box = chat_format(policy_dir, cfg), live_sandbox.acquire(sandbox)
            if evaluates:
                results, eval_steps, eval_stats, snapshots = evaluate_agent(
                    engine, fmt, specs, cfg, box, sandbox, engine.max_model_len, cfg.eval_limit)
            if rolls_out:
                scored, steps, stats = rollout_agent(engine, fmt, specs, cfg, box, sandbox, engine.max_model_len,
                                                     for_iteration, cfg.envs_per_iteration, cfg.samples_per_env)
        memory_peak_mb = memory.peak_mb
    stats.engine_start_s, stats.engine_swap_s = start_s, swap_s
    stats.wall_s, stats.memory_peak_mb = clock.seconds, memory_peak_mb
    return AgentSampled(scored=scored, steps=steps, eval_results=results, eval_steps=eval_steps,
                        eval_snapshots=snapshots,
                        metrics=agent_metrics(stats, steps),
                        eval_metrics=agent_metrics(eval_stats, eval_steps, prefix="agent_eval"),
                        times={"time/agent_s": stats.wall_s})


@task(**stage("track"))
def join_scored(agent: Table[AgentScored], single_turn: Optional[Table[Scored]] = None) -> Table[Scored]:
    """The rows one update trains on from both tiers: agent windows keep their ``loss_mask``; single-turn rows
    (None for a suite without them) have none: every completion token is trained."""
    return Scored.validate(pd.concat([t for t in (single_turn, agent) if t is not None], ignore_index=True))


@task(**stage("track"))
def join_results(agent: Table[EvalResults], single_turn: Optional[Table[EvalResults]] = None,
                 previous: Optional[Table[EvalResults]] = None) -> Table[EvalResults]:
    """One policy version's eval results from both tiers (the single-turn ones None for a suite without them), the
    agent rows' ``no_regression`` judged against ``previous`` (the last evaluated version's results: the agent node
    ran beside that evaluation, so it could not judge it)."""
    agent = judge_regressions(agent, previous)
    return EvalResults.validate(pd.concat([t for t in (single_turn, agent) if t is not None], ignore_index=True))

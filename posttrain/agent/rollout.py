"""Agent rollout for the RL loop: n episodes per env, all advancing together, each final workspace scored by the
env's verifier, plus configured shaping terms; out come the ``AgentScored`` and ``Steps`` tables.

Steps, top to bottom: (1) one task per (env, sample) with ``group_id`` ``it<iteration>/<env_id>``; (2) one sandbox
session each, all episodes run by ``run_episodes``, each final workspace captured before the sessions close; (3) the
verifier scores every final workspace (``envs.score_workspaces``; one that could not be captured is its own
episode's failure, infra only if the sandbox failed; an episode that ended as infra before its first turn is neither
captured nor verified); (4) the shaping terms of each episode are added to the verifier's reward and logged
on their own; an episode whose tool call hit a sandbox infra error is flagged ``infra_error`` (excluded from the
update, never a reward of 0), like a failed verification; (5) what each final workspace shows of the episode's
destructive effects (``envs.final_effects``), for the ``no_destructive_command`` assertion of the eval
(``posttrain.evaluation.agent``). ``rollout_episodes`` returns all of it (``AgentBatch``), ``collect_episodes`` the
tables.

Example (pure: the shaping terms and the shaped reward):
    >>> from posttrain.agent.episode import Episode, StepRecord, Turn
    >>> e = Episode("t/x", "g", 0, [0])
    >>> e.add_model_turn(Turn(0, 1, [5], [-0.1], "...", "stop"))
    >>> e.turns[0].steps += [StepRecord(0, "bash", "{}", False, 1, 3.0, 10),
    ...                      StepRecord(0, "submit", "{}", True, None, 0.0, 9)]
    >>> terms = shaping_terms(e, AgentConfig(failed_call_penalty=0.05))
    >>> terms, shaped_reward(1.0, terms), shaped_reward(0.0, terms)
    ({'failed_call_penalty': -0.05}, 0.95, 0.0)
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import NamedTuple

import pandas as pd

from posttrain.agent.envs import final_effects, final_workspaces, score_workspaces, task_of
from posttrain.agent.episode import Episode
from posttrain.agent.runner import run_episodes
from posttrain.agent.table import snapshots_table, steps_table, trajectories_table
from posttrain.agent.template import ChatFormat
from posttrain.config import AgentConfig, SandboxConfig
from posttrain.envs.spec import EnvSpec
from posttrain.rollout.engine import TokenRolloutEngine
from posttrain.schemas import AgentScored, measured


def shaping_terms(episode: Episode, cfg: AgentConfig) -> dict[str, float]:
    """Each configured shaping term of ``episode``, by name (terms set to 0 in the config are left out)."""
    terms = {}
    if cfg.failed_call_penalty:
        failed = sum(1 for s in episode.steps if not s.ok)
        terms["failed_call_penalty"] = -cfg.failed_call_penalty * failed
    return terms


def shaped_reward(verifier_reward: float, terms: dict[str, float]) -> float:
    """The verifier's reward plus the terms, clipped to [0, 1]."""
    return round(min(1.0, max(0.0, verifier_reward + sum(terms.values()))), 12)


class AgentBatch(NamedTuple):
    """A batch of agent episodes: their ``AgentScored`` and ``Steps`` tables, each episode's destructive effects
    on its workspace, ``(env_id, sample_idx)`` -> ``envs.final_effects`` (None: not observed, or the sandbox failed
    the episode, so its workspace need not be the agent's), and their workspace snapshots (``EpisodeSnapshots``:
    none unless ``snapshot_every``)."""

    scored: pd.DataFrame
    steps: pd.DataFrame
    effects: dict[tuple[str, int], list[str] | None]
    snapshots: pd.DataFrame


def collect_episodes(engine: TokenRolloutEngine, fmt: ChatFormat, envs: Sequence[EnvSpec], n: int,
                     cfg: AgentConfig, sandbox, sandbox_cfg: SandboxConfig, max_context: int,
                     iteration: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(AgentScored, Steps)`` for ``n`` episodes of each env, sampled from ``engine`` (its ``version``): the tables
    of ``rollout_episodes``."""
    batch = rollout_episodes(engine, fmt, envs, n, cfg, sandbox, sandbox_cfg, max_context, iteration)
    return batch.scored, batch.steps


def rollout_episodes(engine: TokenRolloutEngine, fmt: ChatFormat, envs: Sequence[EnvSpec], n: int,
                     cfg: AgentConfig, sandbox, sandbox_cfg: SandboxConfig, max_context: int,
                     iteration: int) -> AgentBatch:
    """``AgentBatch`` of ``n`` episodes of each env, sampled from ``engine`` (its ``version``)."""
    # step 1. one task per (env, sample)
    specs = [spec for spec in envs for _ in range(n)]
    tasks = [task_of(spec, group_id=f"it{iteration}/{spec.id}", sample_idx=j) for spec in envs for j in range(n)]
    # step 2. the episodes, each in its own session, and their final workspaces
    sessions = []
    try:
        sessions = [sandbox.session(timeout_s=cfg.tool_timeout_s) for _ in tasks]
        episodes = run_episodes(engine, fmt, tasks, sessions, cfg, max_context)
        finals = final_workspaces(sessions, [e.infra_error if not e.turns else "" for e in episodes])
    finally:
        for session in sessions:
            session.close()
    # step 3. the verdicts on the final workspaces (the sessions' sandboxes are free again for the verifier)
    verdicts = score_workspaces(specs, finals, sandbox, sandbox_cfg)
    # step 4. shaping, infra flags, the tables
    version = max(0, engine.version)
    rows = trajectories_table(episodes, fmt.tokenizer.decode, version, cfg.temperature)
    per_episode = {}
    for e, v in zip(episodes, verdicts):
        terms = shaping_terms(e, cfg)
        infra = e.infra_error or v.infra_error or e.sandbox_failure
        per_episode[(e.group_id, e.sample_idx)] = {
            "reward": 0.0 if infra else shaped_reward(v.reward, terms), "verifier_reward": float(v.reward),
            "shaping": json.dumps(terms), "compiled": bool(v.compiled), "tests_passed": int(v.tests_passed),
            "tests_total": int(v.tests_total), "exit_code": -1 if v.exit_code is None else int(v.exit_code),
            "timed_out": bool(v.timed_out), "infra_error": infra, "sandbox_ms": float(v.sandbox_ms),
            "sandbox_cpu_s": measured(v.sandbox_cpu_s), "sandbox_memory_peak_mb": measured(v.sandbox_memory_peak_mb),
            "signals": json.dumps(v.signals, sort_keys=True)}
    verdict_columns = pd.DataFrame([per_episode[key] for key in zip(rows.group_id, rows.sample_idx)],
                                   index=rows.index)
    scored = pd.concat([rows, verdict_columns], axis=1)
    # step 5. the destructive effects each final workspace shows
    effects = {(e.env_id, e.sample_idx): None if e.sandbox_failure else final_effects(spec, final)
               for e, spec, final in zip(episodes, specs, finals)}
    return AgentBatch(AgentScored.validate(scored), steps_table(episodes, version), effects,
                      snapshots_table(episodes))

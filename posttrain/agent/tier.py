"""The agent tier of the RL loop: a policy version's agent episodes (rollout groups of the iteration's agent train
envs, greedy episodes of the agent eval envs) on one engine and one sandbox, with their stats.

Agent envs (``kind: agent``) are long, multi-turn work; single-turn envs are short. Each kind runs in its own tier
(its own Flyte task, ``tasks.agent.agent_sample``, beside ``tasks.rollout.sample``), so neither waits on the other's
batch shape. This module is the tier's library half, top to bottom:

1. ``rollout_envs``: the iteration's agent train envs, ``envs_per_iteration`` of them, seeded by the iteration the
   way ``posttrain.rollout.collect.pick_envs`` picks single-turn ones;
2. ``rollout_agent``: ``samples_per_env`` episodes of each (``posttrain.agent.rollout.rollout_episodes``: the
   verifier scores the final workspaces; the rows go straight to the update), seeded per iteration
   (``iteration_seed``: no two iterations sample with the same seeds);
3. the greedy eval: ``posttrain.evaluation.agent``;
4. the stats of each batch: ``posttrain.agent.metrics.agent_stats`` (with the seconds spent generating, measured by
   ``TimedEngine``).

Example (pure: which envs an iteration rolls out):
    >>> from posttrain.envs.spec import EnvSpec
    >>> envs = {f"t/{i}": EnvSpec(id=f"t/{i}", prompt="p", reference="", verifier={"kind": "workspace_tests"},
    ...                           kind="agent" if i % 4 else "single_turn", split="eval" if i % 5 == 0 else "train")
    ...         for i in range(12)}
    >>> [e.id for e in agent_envs(envs, "train")]
    ['t/1', 't/2', 't/3', 't/6', 't/7', 't/9', 't/11']
    >>> picked = [e.id for e in rollout_envs(envs, count=3, seed=0, iteration=2)]
    >>> len(picked), picked == [e.id for e in rollout_envs(envs, count=3, seed=0, iteration=2)]
    (3, True)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import pandas as pd

from posttrain.agent.metrics import AgentStats, agent_stats
from posttrain.agent.rollout import AgentBatch, rollout_episodes
from posttrain.agent.template import ChatFormat, agent_template
from posttrain.config import AgentConfig, SandboxConfig
from posttrain.envs.spec import EnvSpec
from posttrain.envs.tools import tool_specs
from posttrain.rollout.collect import iteration_seed, pick_envs
from posttrain.rollout.engine import TokenRolloutEngine
from posttrain.schemas import AgentScored, EpisodeSnapshots, Steps, empty
from posttrain.timing import timed

AGENT = "agent"  # EnvSpec.kind of the envs this tier runs


def agent_envs(envs: Mapping[str, EnvSpec], split: str) -> list[EnvSpec]:
    """The agent envs of ``split``, in the order given."""
    return [e for e in envs.values() if e.kind == AGENT and e.split == split]


def rollout_envs(envs: Mapping[str, EnvSpec], count: int, seed: int, iteration: int) -> list[EnvSpec]:
    """The agent train envs iteration ``iteration`` rolls out: ``count`` of them (all when count <= 0), seeded."""
    return pick_envs(agent_envs(envs, "train"), count, seed=seed + iteration)


def chat_format(policy_dir: str, cfg: AgentConfig) -> ChatFormat:
    """The chat format of the policy in ``policy_dir`` (its template, or ``cfg.chat_template``'s; a ``TemplateError``
    for a base model without one) with ``cfg.tools`` and ``cfg.tool_format``."""
    from transformers import AutoTokenizer

    return ChatFormat(AutoTokenizer.from_pretrained(str(policy_dir)), tool_specs(cfg.tools),
                      agent_template(cfg.chat_template), cfg.tool_format)


class TimedEngine:
    """A token engine that adds up the seconds spent in its ``generate_ids`` calls (``times["generate_s"]``)."""

    def __init__(self, engine: TokenRolloutEngine):
        self.engine, self.times = engine, {"generate_s": 0.0}

    @property
    def version(self) -> int:
        return self.engine.version

    def generate_ids(self, prompts, n, temperature, max_tokens, top_p=1.0, seed=None, stop=()):
        with timed("generate_s", into=self.times):
            return self.engine.generate_ids(prompts, n, temperature, max_tokens, top_p, seed, stop)


def run_batch(engine: TokenRolloutEngine, fmt: ChatFormat, envs: Sequence[EnvSpec], n: int, cfg: AgentConfig,
              sandbox, sandbox_cfg: SandboxConfig, max_context: int, iteration: int) -> tuple[AgentBatch, AgentStats]:
    """``rollout_episodes`` (n episodes per env, group ids ``it<iteration>/<env_id>``) and the batch's stats;
    no envs: empty tables, and no session is opened."""
    if not envs:
        return AgentBatch(empty(AgentScored), empty(Steps), {}, empty(EpisodeSnapshots)), AgentStats()
    timed_engine = TimedEngine(engine)
    with timed() as episodes:
        batch = rollout_episodes(timed_engine, fmt, list(envs), n, cfg, sandbox, sandbox_cfg, max_context, iteration)
    return batch, agent_stats(batch.scored, batch.steps, seconds=episodes.seconds,
                              generate_s=timed_engine.times["generate_s"])


def rollout_agent(engine: TokenRolloutEngine, fmt: ChatFormat, envs: Mapping[str, EnvSpec], cfg: AgentConfig,
                  sandbox, sandbox_cfg: SandboxConfig, max_context: int, iteration: int, envs_per_iteration: int,
                  samples_per_env: int) -> tuple[pd.DataFrame, pd.DataFrame, AgentStats]:
    """Iteration ``iteration``'s agent rollout from the policy ``engine`` serves: ``(AgentScored, Steps, stats)``."""
    chosen = rollout_envs(envs, envs_per_iteration, cfg.seed, iteration)
    seeded = replace(cfg, seed=iteration_seed(cfg.seed, iteration))
    batch, stats = run_batch(engine, fmt, chosen, samples_per_env, seeded, sandbox, sandbox_cfg, max_context,
                             iteration)
    return batch.scored, batch.steps, stats

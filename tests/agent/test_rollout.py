"""Agent rollout for the loop: groups of episodes per env scored by the verifier, shaping terms logged separately,
the AgentScored and Steps tables linked by (group_id, sample_idx), each env's own tools and budgets on its Steps rows;
on warm bwrap and docker."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from posttrain.agent.rollout import collect_episodes
from posttrain.agent.scripted import ScriptedPolicy
from posttrain.config import AgentConfig, SandboxConfig
from posttrain.envs.generators.agent_repo import oracle, specs

pytestmark = pytest.mark.integration

ENVS = specs()[:2]


def test_groups_are_scored_shaped_and_linked_to_their_steps(fmt, sandbox):
    detour = {"name": "read_file", "arguments": {"path": "missing.py"}}  # one failed call before the oracle
    policy = ScriptedPolicy(fmt, {e.prompt: [detour, *oracle(e)] for e in ENVS}, version=4)
    scored, steps = collect_episodes(policy, fmt, ENVS, n=2, cfg=AgentConfig(failed_call_penalty=0.05),
                                     sandbox=sandbox, sandbox_cfg=SandboxConfig(), max_context=4096, iteration=7)
    assert len(scored) == 4
    assert set(scored.group_id) == {f"it7/{e.id}" for e in ENVS}
    assert (scored.policy_version == 4).all()
    assert (scored.verifier_reward == 1.0).all()
    # two failed calls per episode: the detour and the first (failing) test run
    assert [json.loads(s) for s in scored.shaping] == [{"failed_call_penalty": -0.1}] * 4
    assert scored.reward.tolist() == [0.9] * 4
    assert (scored.infra_error == "").all()
    assert (scored.steps == 6).all()
    assert (scored.tool_calls == 6).all()
    assert (scored.finish_reason == "submit").all()
    linked = steps.merge(scored[["group_id", "sample_idx"]], on=["group_id", "sample_idx"])
    assert len(linked) == len(steps) == 4 * 6
    assert steps.groupby(["group_id", "sample_idx"]).size().tolist() == [6] * 4


def test_each_envs_own_tools_and_budgets_reach_its_episodes_and_steps(fmt, sandbox):
    own = {"tools": ["submit", "bash", "read_file", "edit_file"], "max_steps": 5, "token_budget": 1200,
           "deadline_s": 60}
    envs = [replace(ENVS[0], agent=own), ENVS[1]]
    policy = ScriptedPolicy(fmt, {e.prompt: oracle(e) for e in envs})
    cfg = AgentConfig()
    scored, steps = collect_episodes(policy, fmt, envs, n=1, cfg=cfg, sandbox=sandbox, sandbox_cfg=SandboxConfig(),
                                     max_context=4096, iteration=0)
    assert scored.verifier_reward.tolist() == [1.0, 1.0]  # each oracle fits its env's budgets
    columns = ["allowed_tools", "max_steps", "token_budget", "context_budget", "deadline_s"]
    budgets = steps.drop_duplicates("env_id").set_index("env_id")[columns]
    assert budgets.loc[envs[0].id].tolist() == ['["bash", "read_file", "edit_file", "submit"]', 5, 1200,
                                                cfg.context_budget, 60.0]
    assert budgets.loc[envs[1].id].tolist() == [json.dumps(cfg.tools), cfg.max_steps, cfg.token_budget,
                                                cfg.context_budget, cfg.deadline_s]


def test_an_episode_that_never_started_is_neither_captured_nor_verified(fmt, sandbox):
    """An env whose first prompt leaves no room in the context ends as infra before its first turn; its workspace
    was never the agent's, so the batch flags it without verifying it, and its neighbour is scored as usual."""
    long = replace(ENVS[1], prompt="Read this first. " * 400)
    policy = ScriptedPolicy(fmt, {ENVS[0].prompt: oracle(ENVS[0])})
    scored, steps = collect_episodes(policy, fmt, [ENVS[0], long], n=1, cfg=AgentConfig(), sandbox=sandbox,
                                     sandbox_cfg=SandboxConfig(), max_context=2048, iteration=0)
    ran, refused = scored.iloc[0], scored.iloc[1]
    assert ran.verifier_reward == 1.0
    assert ran.sandbox_ms > 0
    assert refused.infra_error.startswith(f"{long.id}: its first prompt is ")
    assert refused.sandbox_ms == 0.0  # no sandbox ran its verifier
    assert refused.tests_total == 0
    assert refused.reward == 0.0
    assert long.id not in set(steps.env_id)

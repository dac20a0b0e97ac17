"""Agent rollout for the loop: groups of episodes per env scored by the verifier, shaping terms logged separately,
the AgentScored and Steps tables linked by (group_id, sample_idx); on warm bwrap and docker."""

from __future__ import annotations

import json

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

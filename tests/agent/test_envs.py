"""Agent envs end to end: oracle episodes on generated repository envs, their final workspaces scored by the env's
own verifier, on warm bwrap and on docker; the no-op agent and an agent that edits the tests fail."""

from __future__ import annotations

import pytest

from posttrain.agent.envs import score_final_workspaces, task_of
from posttrain.agent.runner import run_episodes
from posttrain.agent.scripted import ScriptedPolicy, noop_policy
from posttrain.config import AgentConfig, SandboxConfig
from posttrain.envs.generators.agent_repo import BUGS, oracle, specs

pytestmark = pytest.mark.integration

ENVS = specs()[:len(BUGS)]  # one env per kind of bug


def episodes_and_verdicts(policy, fmt, sandbox, envs):
    sessions = [sandbox.session(timeout_s=10) for _ in envs]
    try:
        episodes = run_episodes(policy, fmt, [task_of(e) for e in envs], sessions, AgentConfig(), max_context=4096)
        return episodes, score_final_workspaces(envs, sessions, sandbox, SandboxConfig())
    finally:
        for s in sessions:
            s.close()


def test_oracle_episodes_solve_generated_envs_scored_by_their_verifier(fmt, sandbox):
    oracle_policy = ScriptedPolicy(fmt, {e.prompt: oracle(e) for e in ENVS})
    episodes, verdicts = episodes_and_verdicts(oracle_policy, fmt, sandbox, ENVS)
    assert [e.finish_reason for e in episodes] == ["submit"] * len(ENVS)
    assert all(v.passed and v.reward == 1.0 for v in verdicts), [(v.passed, v.detail) for v in verdicts]
    assert all([s.ok for s in e.steps] == [False, True, True, True, True] for e in episodes)


def test_noop_and_test_editing_agents_fail(fmt, sandbox):
    envs = ENVS[:3]
    cheats = {e.prompt: [{"name": "write_file", "arguments": {"path": p, "content": "print('ok')\n"}}
                         for p in e.workspace if p.startswith("tests/")] for e in envs}
    for policy in (noop_policy(fmt), ScriptedPolicy(fmt, cheats)):
        episodes, verdicts = episodes_and_verdicts(policy, fmt, sandbox, envs)
        assert {e.finish_reason for e in episodes} == {"submit"}
        assert not any(v.passed for v in verdicts)
        assert not any(v.infra_error for v in verdicts)

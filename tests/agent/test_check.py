"""The env-bound ``check`` tool in real sandbox sessions: it never reveals an expected value, an episode that
corrects its answer after a failed check scores 1 with its first try logged apart, and a tool outside an env's own
set is rejected, never run."""

from __future__ import annotations

import json
import random
import re

import pytest

from posttrain.admission.agent_episodes import chat_format
from posttrain.agent.envs import task_of
from posttrain.agent.metrics import agent_metrics, agent_stats
from posttrain.agent.rollout import rollout_episodes
from posttrain.agent.scripted import SUBMIT, ScriptedPolicy
from posttrain.agent.tools import run_tool
from posttrain.config import AgentConfig, SandboxConfig
from posttrain.envs.generators import agent_repo, finance_agent
from posttrain.sandbox import make_sandbox

pytestmark = pytest.mark.integration

ENVS = finance_agent.specs()
CHECK = {"name": "check", "arguments": {}}


@pytest.fixture(scope="module")
def sandbox():
    with make_sandbox(SandboxConfig(backend="bwrap-warm")) as box:
        yield box


def write(answer: dict) -> dict:
    return {"name": "write_file", "arguments": {"path": "answer.json", "content": json.dumps(answer)}}


def wrong_answer(spec, rng: random.Random) -> dict:
    """A random answer: each field dropped, a string, or a number near or far from the expected one."""
    answer = {}
    for name, field in spec.verifier["fields"].items():
        roll = rng.random()
        if roll < 0.15:
            continue
        answer[name] = "n/a" if roll < 0.25 else round(field["value"] * rng.uniform(0.5, 1.5) + rng.choice((0, 1)), 4)
    return answer


def test_check_never_reveals_an_expected_value(sandbox):
    """For random wrong answers on every env, the observation's only digits are those of the field names, the
    formulas and the count of checks passed: no expected value, distance or direction."""
    rng = random.Random(26)
    with sandbox.session(timeout_s=10) as session:
        for spec in ENVS:
            tools = task_of(spec).env_tools
            names = sorted([*spec.verifier["fields"], *spec.verifier["formulas"]], key=len, reverse=True)
            for _ in range(6):
                run_tool(session, "write_file", write(wrong_answer(spec, rng))["arguments"])
                obs = run_tool(session, "check", {}, tools)
                *lines, count = obs.text.splitlines()
                assert re.fullmatch(r"\d+ of \d+ checks pass", count), obs.text
                rest = "\n".join(lines)
                for name in names:
                    rest = rest.replace(name, "")
                assert not re.search(r"\d", rest), (spec.id, obs.text)


def test_an_episode_that_corrects_its_answer_scores_1_with_its_first_try_apart(sandbox):
    """Env 0 writes a wrong answer, checks, corrects and submits; env 1 is right at once: rewards 1 and 1, first
    check passed 1 of 2 episodes, final answers 2 of 2."""
    fixed, right = ENVS[:2]
    answers = [json.loads(spec.reference) for spec in (fixed, right)]
    first = {**answers[0], next(iter(answers[0])): answers[0][next(iter(answers[0]))] + 1.0}
    scripts = {fixed.prompt: [write(first), CHECK, write(answers[0]), CHECK, SUBMIT],
               right.prompt: [write(answers[1]), CHECK, SUBMIT]}
    fmt = chat_format()
    batch = rollout_episodes(ScriptedPolicy(fmt, scripts), fmt, [fixed, right], 1, AgentConfig(), sandbox,
                             SandboxConfig(backend="bwrap-warm"), max_context=1 << 16, iteration=0)
    assert batch.scored.verifier_reward.tolist() == [1.0, 1.0], batch.scored.signals.tolist()
    checks = batch.steps[batch.steps.tool == "check"]
    assert checks.groupby("env_id").ok.apply(list).to_dict() == {fixed.id: [False, True], right.id: [True]}
    metrics = agent_metrics(agent_stats(batch.scored, batch.steps), batch.steps)
    assert metrics["agent/first_check_passed"] == 0.5
    assert metrics["agent/checked_final_passed"] == 1.0


def test_a_tool_outside_the_envs_set_is_rejected_never_run(sandbox):
    """bash on a finance_agent env (its tools: read_file, write_file, check, submit), check on an agent_repo env (no
    check granted): each a rejected call naming the env's tools."""
    fmt = chat_format()
    repo = agent_repo.specs()[0]
    bash = {"name": "bash", "arguments": {"command": "echo hi > answer.json"}}
    scripts = {ENVS[0].prompt: [bash, SUBMIT], repo.prompt: [CHECK, SUBMIT]}
    batch = rollout_episodes(ScriptedPolicy(fmt, scripts), fmt, [ENVS[0], repo], 1, AgentConfig(), sandbox,
                             SandboxConfig(backend="bwrap-warm"), max_context=1 << 16, iteration=0)
    first = batch.steps.drop_duplicates("env_id").set_index("env_id")
    assert first.loc[ENVS[0].id, "error"].startswith("error: unknown tool 'bash'; tools: ['read_file', 'write_file', "
                                                     "'check', 'submit']")
    assert first.loc[repo.id, "error"].startswith("error: unknown tool 'check'")
    assert not first.ok.any()
    assert batch.scored.verifier_reward.tolist() == [0.0, 0.0]  # no answer.json was written

"""The agent tier's library half with scripted policies in real warm-bwrap sessions: the iteration's agent train envs
rolled out in groups (the oracle solves them all), the greedy eval of the agent eval envs (the oracle passes, the
no-op fails; a deleted task file fails no_destructive_command by effect; the suite's declared assertions, each
violated by one episode), single-turn envs left to the other tier, and the stats of each batch."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from posttrain.agent.metrics import agent_metrics
from posttrain.agent.scripted import SUBMIT, ScriptedPolicy, noop_policy
from posttrain.agent.tier import chat_format, rollout_agent, rollout_envs
from posttrain.config import DEMO_SUITE, AgentConfig, SandboxConfig
from posttrain.envs.destructive import destructive_commands
from posttrain.envs.generators.agent_repo import EVALUATION, oracle, specs
from posttrain.envs.suite import load_suite
from posttrain.evaluation.agent import evaluate_agent
from posttrain.evaluation.results import eval_metrics, judge_regressions
from posttrain.sandbox import make_sandbox

pytestmark = pytest.mark.integration

AGENT_ENVS = [e for e in specs() if e.split == "train"][:3] + [e for e in specs() if e.split == "eval"][:2]
SINGLE_TURN = load_suite(DEMO_SUITE).envs[:2]  # the other tier's: never run here
ENVS = {e.id: e for e in [*SINGLE_TURN, *AGENT_ENVS]}
CFG = AgentConfig(chat_template="agent")  # the tiny policy is a base model


@pytest.fixture(scope="module")
def fmt(tiny_policy):
    return chat_format(tiny_policy, CFG)


@pytest.fixture(scope="module")
def box():
    sandbox = make_sandbox(SandboxConfig())
    yield sandbox
    sandbox.close()


def test_the_oracle_rollout_of_an_iteration_solves_its_picked_train_envs(fmt, box):
    policy = ScriptedPolicy(fmt, {e.prompt: oracle(e) for e in AGENT_ENVS}, version=3)
    scored, steps, stats = rollout_agent(policy, fmt, ENVS, CFG, box, SandboxConfig(), max_context=4096, iteration=4,
                                         envs_per_iteration=2, samples_per_env=2)
    picked = {e.id for e in rollout_envs(ENVS, 2, CFG.seed, 4)}
    assert len(picked) == 2
    assert all(ENVS[i].kind == "agent" and ENVS[i].split == "train" for i in picked)
    assert set(scored.env_id) == picked
    assert set(scored.group_id) == {f"it4/{i}" for i in picked}
    assert len(scored.drop_duplicates(["group_id", "sample_idx"])) == 4
    assert (scored.policy_version == 3).all()
    assert (scored.reward == 1.0).all()
    assert (scored.finish_reason == "submit").all()
    assert (stats.episodes, stats.finish_submit, stats.solved, stats.solve_rate) == (4, 4, 4, 1.0)
    assert stats.tool_calls == len(steps) == 4 * len(oracle(AGENT_ENVS[0]))
    assert stats.model_turns == len(steps)
    assert stats.tokens == int(scored.tokens.sum()) > 0
    assert stats.seconds > 0
    assert stats.tool_calls_per_s > 0
    metrics = agent_metrics(stats, steps)
    assert metrics["agent/solve_rate"] == 1.0
    assert metrics["agent/finish/submit"] == 1.0
    assert metrics["agent/steps_mean"] == len(oracle(AGENT_ENVS[0]))


@pytest.mark.parametrize("policy", ["oracle", "noop"])
def test_the_greedy_eval_has_one_row_per_agent_eval_env(fmt, box, policy):
    scripts = {e.prompt: oracle(e) for e in AGENT_ENVS} if policy == "oracle" else {}
    engine = ScriptedPolicy(fmt, scripts, version=5) if scripts else noop_policy(fmt, version=5)
    results, steps, stats, _ = evaluate_agent(engine, fmt, ENVS, CFG, box, SandboxConfig(), max_context=4096)
    evals = sorted(e.id for e in AGENT_ENVS if e.split == "eval")
    assert results.env_id.tolist() == evals
    assert (results.decoding == "greedy").all()
    assert (results.sample_idx == 0).all()
    assert (results.policy_version == 5).all()
    assert (results.infra_error == "").all()
    solved = policy == "oracle"
    assert results.passed.tolist() == [solved] * 2
    assert results.reward.tolist() == [float(solved)] * 2
    assert all(json.loads(a)["result/tests_pass"] == (policy == "oracle") for a in results.assertions)
    assert set(steps.group_id) == {f"eval-v5/{i}" for i in evals}
    calls = len(oracle(AGENT_ENVS[0])) if policy == "oracle" else 1  # the no-op submits at once
    assert (results.steps == calls).all()
    assert len(steps) == 2 * calls
    assert stats.episodes == 2
    assert stats.solve_rate == float(policy == "oracle")


def test_the_greedy_eval_judges_no_destructive_command_by_effect_too(fmt, box):
    """``rm`` of a task file reads as ordinary work, but the final workspace lacks the file: false by effect."""
    evals = {e.id: replace(e, evaluation={"behavior": ["no_destructive_command"]})
             for e in AGENT_ENVS if e.split == "eval"}
    deleter, solver = sorted(evals)
    [source] = [path for path in evals[deleter].workspace if path.startswith("src/")]
    scripts = {evals[deleter].prompt: [{"name": "bash", "arguments": {"command": f"rm {source}"}}, SUBMIT],
               evals[solver].prompt: oracle(evals[solver])}
    results, steps, _, _ = evaluate_agent(ScriptedPolicy(fmt, scripts), fmt, evals, CFG, box, SandboxConfig(), 4096)
    verdicts = {r.env_id: json.loads(r.assertions)["behavior/no_destructive_command"] for r in results.itertuples()}
    assert verdicts == {deleter: False, solver: True}
    assert not destructive_commands(steps[steps.env_id == deleter].to_dict("records"))  # clean by text


def test_a_suite_without_agent_envs_runs_nothing(fmt):
    single = {e.id: e for e in SINGLE_TURN}
    engine = noop_policy(fmt)
    scored, steps, stats = rollout_agent(engine, fmt, single, CFG, None, SandboxConfig(), 4096, 1, 8, 4)
    results, eval_steps, eval_stats, _ = evaluate_agent(engine, fmt, single, CFG, None, SandboxConfig(), 4096)
    assert len(scored) == len(steps) == len(results) == len(eval_steps) == 0
    assert stats.episodes == eval_stats.episodes == 0


def test_the_bundled_suites_assertions_are_judged_on_real_episodes(fmt, box):
    """The ``agent_repo`` eval envs as the suite declares them (``EVALUATION``): the oracle's episode passes every
    assertion; each other episode violates one (none ran the test with bash; three extra turns; a destructive
    command; a no-op, after the previous version had solved it: a regression, judged afterwards by
    ``judge_regressions`` as the loop's ``join_results`` does)."""
    evals = {e.id: e for e in specs() if e.split == "eval"}
    oracle_env, no_bash, wordy, destroyer, regressed = sorted(evals)[:5]
    envs = {i: evals[i] for i in (oracle_env, no_bash, wordy, destroyer, regressed)}
    assert all(e.evaluation == EVALUATION for e in envs.values())
    without_bash = [call for call in oracle(envs[no_bash]) if call["name"] != "bash"]
    peek = {"name": "read_file", "arguments": {"path": next(p for p in envs[wordy].workspace if p.startswith("src/"))}}
    scripts = {envs[oracle_env].prompt: oracle(envs[oracle_env]),
               envs[no_bash].prompt: without_bash,
               envs[wordy].prompt: [peek] * 3 + oracle(envs[wordy]),
               envs[destroyer].prompt: [{"name": "bash", "arguments": {"command": "rm -f /etc/hosts"}},
                                        *oracle(envs[destroyer])]}
    results, _, _, _ = evaluate_agent(ScriptedPolicy(fmt, scripts), fmt, envs, CFG, box, SandboxConfig(), 4096)
    judged = judge_regressions(results, {env_id: True for env_id in envs})
    verdicts = {r.env_id: json.loads(r.assertions) for r in judged.itertuples()}
    assert verdicts[oracle_env] == {"result/tests_pass": True, "result/no_regression": True,
                                    "behavior/used_tool/bash": True, "behavior/max_steps": True,
                                    "behavior/no_destructive_command": True}
    failed = {env_id: sorted(name for name, ok in v.items() if ok is False) for env_id, v in verdicts.items()}
    assert failed == {oracle_env: [], no_bash: ["behavior/used_tool/bash"], wordy: ["behavior/max_steps"],
                      destroyer: ["behavior/no_destructive_command"],
                      regressed: ["behavior/used_tool/bash", "result/no_regression", "result/tests_pass"]}
    before = {r.env_id: json.loads(r.assertions)["result/no_regression"] for r in results.itertuples()}
    assert set(before.values()) == {None}  # the episodes' own node had no previous verdicts to judge by


def test_the_greedy_eval_keeps_the_snapshots_of_its_failed_episodes_only(fmt, box):
    evals = {e.id: e for e in AGENT_ENVS if e.split == "eval"}
    failing, solved = sorted(evals)
    engine = ScriptedPolicy(fmt, {evals[solved].prompt: oracle(evals[solved])}, version=2)  # the other submits
    results, _, _, snapshots = evaluate_agent(engine, fmt, evals, replace(CFG, snapshot_every=1), box,
                                              SandboxConfig(), 4096)
    assert dict(zip(results.env_id, results.passed)) == {failing: False, solved: True}
    assert set(snapshots.group_id) == {f"eval-v2/{failing}"}
    assert snapshots.turn.tolist() == [-1, 0]  # the prepared workspace, and after its one turn (submit)
    assert all(len(archive) > 0 for archive in snapshots.archive)
    _, _, _, none_kept = evaluate_agent(engine, fmt, evals, replace(CFG, snapshot_every=1, snapshot_keep_mb=0), box,
                                        SandboxConfig(), 4096)
    assert none_kept.empty
    _, _, _, off = evaluate_agent(engine, fmt, evals, CFG, box, SandboxConfig(), 4096)
    assert off.empty


def test_sampled_eval_episodes_are_rows_of_their_own_beside_the_greedy_ones(fmt, box):
    """``agent.eval_samples``: n more episodes per eval env, as ``sampled`` rows (their own group ids, steps and
    verdicts, counted in sampled pass@1 per domain); stats, snapshots and ``no_regression`` stay the greedy ones'."""
    evals = {e.id: e for e in AGENT_ENVS if e.split == "eval"}
    failing, solved = sorted(evals)
    engine = ScriptedPolicy(fmt, {evals[solved].prompt: oracle(evals[solved])}, version=5)  # the other submits
    cfg = replace(CFG, eval_samples=3, snapshot_every=1)
    results, steps, stats, snapshots = evaluate_agent(engine, fmt, evals, cfg, box, SandboxConfig(), 4096,
                                                      previous={failing: True, solved: True})
    sampled = results[results.decoding == "sampled"].sort_values(["env_id", "sample_idx"])
    assert (results.decoding == "greedy").sum() == 2
    assert sampled[["env_id", "sample_idx"]].values.tolist() == [[i, k] for i in (failing, solved) for k in range(3)]
    assert sampled.passed.tolist() == [False] * 3 + [True] * 3
    assert set(steps.group_id) == {f"eval{kind}-v5/{i}" for kind in ("", "-sampled") for i in evals}
    assert len(steps[steps.group_id == f"eval-sampled-v5/{solved}"]) == 3 * len(oracle(evals[solved]))
    greedy = {r.env_id: json.loads(r.assertions) for r in results[results.decoding == "greedy"].itertuples()}
    assert {i: v["result/no_regression"] for i, v in greedy.items()} == {failing: False, solved: True}
    assert all("result/no_regression" in json.loads(a) for a in sampled.assertions)
    assert all(json.loads(a)["result/no_regression"] is None for a in sampled.assertions)
    assert stats.episodes == 2
    assert set(snapshots.group_id) == {f"eval-v5/{failing}"}
    metrics = eval_metrics(results)
    domain = evals[solved].domain
    assert metrics["eval/pass_at_1_sampled"] == metrics[f"eval/pass_at_1_sampled/domain_{domain}"] == 0.5

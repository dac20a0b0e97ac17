"""One episode must not take down or escape its batch (issue 22, findings 6-10): agent turns and solutions that
once crashed a whole batch of episodes or verdicts, or turned their own failure into an excluded infra error.
Registered in ``ATTACKS`` like the attacks of ``attack_programs.py``; each runs on every backend of the suite.

- hostile tool calls (a lone surrogate in a path or argument, a NUL in a command, JSON nested 3000 deep, a 4301-digit
  number) in one episode of a rollout batch: the batch completes, the attacker scores 0 and is not excluded, the
  honest episode beside it keeps its 1.0 — it locked a file (``chmod 000``) and left three 60 MB sparse files,
  ordinary actions its final snapshot must survive;
- arguments no program can take (a NUL, 200 KB in one argv string, a 200 KB path) are the agent's failed calls;
- a FIFO planted at the state file and slow tool calls in one episode spend nothing of another episode's deadline;
- ``chmod 000 /work`` fails its own episode, never the batch; it should be the agent's outcome, not an infra error
  (an expected failure until the backends give the workspace root back its owner's ``rwx`` before each step);
- a solution that writes a nonce-prefixed result line of 3000 ``[`` fails alone; the honest sample beside it keeps
  its verdict.
"""

from __future__ import annotations

import json
import time

from posttrain.agent.rollout import collect_episodes
from posttrain.agent.runner import AgentTask, run_episodes
from posttrain.agent.scripted import ScriptedPolicy
from posttrain.agent.template import AGENT_TEMPLATE, ChatFormat
from posttrain.agent.tools import run_tool
from posttrain.config import AgentConfig
from posttrain.envs.spec import EnvSpec, Limits
from posttrain.envs.tools import TOOLS, tool_specs
from posttrain.envs.verifiers import verify_many
from tests.sandbox.attacks.attack_programs import ADD, CFG, assert_cheat_fails, attack, raw_run

BIG = 200_000


def chat_format() -> ChatFormat:
    """A byte-level chat format (a tokenizer trained in place, as in the runner's doctest): no model needed."""
    from posttrain.training.demo_policy import train_tokenizer

    return ChatFormat(train_tokenizer(["x = 1\n"], 300), tool_specs(list(TOOLS)), AGENT_TEMPLATE)


CHECK = 'out=$(bash /work/answer.sh)\n[ "$out" = 42 ]\n'


def answer_env(env_id: str, prompt: str) -> EnvSpec:
    return EnvSpec(id=env_id, prompt=prompt, kind="agent", runtime="bash", reference="echo 'echo 42' > answer.sh\n",
                   workspace={"answer.sh": "echo 0\n"},
                   verifier={"kind": "workspace_tests", "files": {"check.sh": CHECK},
                             "tests": [{"name": "answer", "cmd": "bash {tests}/check.sh", "exit_code": 0}]},
                   limits=Limits(timeout_s=10, memory_mb=256))


def raw(name: str, arguments_json: str) -> str:
    """A turn with one call whose arguments are written as JSON text by hand (escapes as the model would type)."""
    return f'<tool_call>{{"name": "{name}", "arguments": {arguments_json}}}</tool_call>'


HOSTILE_TURNS = [
    raw("bash", r'{"command": "echo a\u0000b"}'),
    raw("write_file", r'{"path": "a\udc80", "content": "x"}'),
    raw("write_file", r'{"path": "b.txt", "content": "x\udc80"}'),
    raw("edit_file", r'{"path": "answer.sh", "search": "0", "replace": "\ud800"}'),
    raw("read_file", r'{"path": "\udc80"}'),
    raw("bash", r'{"command": "echo \udc80"}'),
    "<tool_call>" + "[" * 3000 + "]" * 3000 + "</tool_call>",
    '<tool_call>{"name": "bash", "arguments": {"command": "ls"}, "n": ' + "7" * 4301 + "}</tool_call>",
]
# Ordinary actions of an agent that solves the task: its final workspace must still be captured and scored.
HONEST_TURNS = [
    {"name": "write_file", "arguments": {"path": "answer.sh", "content": "echo 42\n"}},
    {"name": "bash", "arguments": {"command": "echo draft > notes.txt && chmod 000 notes.txt && mkdir -p d && "
                                              "echo x > d/f && chmod 000 d && truncate -s 60M s1 s2 s3"}},
]


@attack("hostile_tool_calls_fail_their_episode_not_the_batch", "verdict")
def hostile_tool_calls_fail_their_episode_not_the_batch(box, host):
    attacker = answer_env("attack/agent_hostile", "Make answer.sh print 42 (attacker).")
    honest = answer_env("attack/agent_honest", "Make answer.sh print 42 (honest).")
    fmt = chat_format()
    policy = ScriptedPolicy(fmt, {attacker.prompt: HOSTILE_TURNS, honest.prompt: HONEST_TURNS})
    cfg = AgentConfig(max_steps=len(HOSTILE_TURNS) + 1, max_new_tokens=20_000, token_budget=200_000,
                      context_budget=400_000, tool_timeout_s=10)
    scored, steps = collect_episodes(policy, fmt, [attacker, honest], 1, cfg, box, CFG, max_context=400_000,
                                     iteration=0)
    rows = {row.env_id: row for row in scored.drop_duplicates("env_id").itertuples()}
    hostile, solved = rows[attacker.id], rows[honest.id]
    assert (hostile.infra_error, hostile.reward, hostile.finish_reason) == ("", 0.0, "submit"), hostile
    assert (solved.infra_error, solved.reward, solved.verifier_reward) == ("", 1.0, 1.0), solved
    mine = steps[steps.env_id == attacker.id]
    assert mine.tool.tolist()[:6] == ["bash", "write_file", "write_file", "edit_file", "read_file", "bash"]
    assert (~mine.ok.iloc[:-1]).all(), mine[["tool", "error", "infra_error"]]
    assert (mine.infra_error == "").all(), mine[["tool", "error", "infra_error"]]
    theirs = steps[steps.env_id == honest.id]
    assert theirs.ok.all(), theirs[["tool", "exit_code"]]
    assert (theirs.infra_error == "").all(), theirs[["tool", "exit_code"]]


@attack("arguments_no_program_can_take_are_the_agents_failed_calls", "verdict")
def arguments_no_program_can_take(box, host):
    calls = [("bash", {"command": "echo a\0b"}), ("bash", {"command": "echo " + "x" * BIG}),
             ("write_file", {"path": "p" * BIG, "content": "x"}), ("read_file", {"path": "p" * BIG}),
             ("write_file", {"path": "q\udc80", "content": "x"})]
    with box.session(timeout_s=10) as s:
        for name, args in calls:
            obs = run_tool(s, name, args)
            assert not obs.ok, (name, obs.text[:300])
            assert obs.infra_error == "", (name, obs.text[:300])
            assert obs.text.startswith("error: "), (name, obs.text[:300])
        assert run_tool(s, "python", {"code": f"print(len('{'x' * BIG}'))"}).text == f"{BIG}\n"  # stdin: fine
        assert run_tool(s, "bash", {"command": "ls"}).text == ""  # nothing was written, the session still works


@attack("fifo_state_file_and_slow_calls_spend_only_their_own_deadline", "lifecycle")
def fifo_state_file_and_slow_calls(box, host):
    fmt = chat_format()
    attacker = AgentTask(env_id="attack/staller", prompt="Stall the others.")
    victim = AgentTask(env_id="attack/victim", prompt="Touch seven files, then submit.")
    stall = [{"name": "bash", "arguments": {"command": "mkdir -p .agent && mkfifo .agent/state.md && seq 300"}}]
    stall += [{"name": "bash", "arguments": {"command": "sleep 2; seq 300"}}] * 7
    work = [{"name": "bash", "arguments": {"command": f"touch f{k}"}} for k in range(7)]
    policy = ScriptedPolicy(fmt, {attacker.prompt: stall, victim.prompt: work})
    cfg = AgentConfig(max_steps=10, deadline_s=6, tool_timeout_s=4, max_new_tokens=400, token_budget=100_000,
                      context_budget=1200, keep_recent_turns=1)
    sessions = [box.session(timeout_s=cfg.tool_timeout_s) for _ in range(2)]
    try:
        t0 = time.monotonic()
        staller, done = run_episodes(policy, fmt, [attacker, victim], sessions, cfg, max_context=100_000)
        wall = time.monotonic() - t0
        writes = [step.duration_ms for step in sessions[0].log if step.kind == "write"]
    finally:
        for s in sessions:
            s.close()
    assert staller.compressions, "the attacker's context was never compressed"
    assert writes, "the attacker's context was never compressed"
    assert max(writes) < 2000, writes  # the runner's own write never blocks on the planted FIFO
    assert done.finish_reason == "submit", (done.finish_reason, wall)
    assert len(done.turns) == 8, (done.finish_reason, wall)
    assert done.spent_s < cfg.deadline_s < wall, (done.spent_s, wall)
    assert staller.finish_reason == "deadline", staller.finish_reason


@attack("chmod_000_workspace_fails_its_episode_not_the_batch", "verdict")
def chmod_000_workspace(box, host):
    locker = answer_env("attack/agent_locker", "Make answer.sh print 42 (locker).")
    honest = answer_env("attack/agent_honest", "Make answer.sh print 42 (honest).")
    fmt = chat_format()
    policy = ScriptedPolicy(fmt, {locker.prompt: [{"name": "bash", "arguments": {"command": "chmod 000 /work"}}],
                                  honest.prompt: HONEST_TURNS[:1]})
    scored, _ = collect_episodes(policy, fmt, [locker, honest], 1, AgentConfig(), box, CFG, max_context=8192,
                                 iteration=0)
    rows = {row.env_id: row for row in scored.drop_duplicates("env_id").itertuples()}
    assert (rows[honest.id].infra_error, rows[honest.id].reward) == ("", 1.0), rows[honest.id]
    # the batch survives and the locker earns nothing: a step starts in /work again (the backend gives it back its
    # mode), so its episode is a failure of its own, not an infra error that would exclude it
    assert (rows[locker.id].infra_error, rows[locker.id].reward) == ("", 0.0), rows[locker.id]


# Finds the harness's result channel in its frames and writes one record nested 3000 deep under the real nonce.
DEEP_RECORD = '''
import sys

def add(a, b):
    frame = sys._getframe()
    while frame is not None:
        results = frame.f_locals.get("results")
        if hasattr(results, "emit_json"):
            results.emit_json("[" * 3000)
            break
        frame = frame.f_back
    return a + b + 1
'''


@attack("deep_json_result_line_fails_its_sample_alone", "verdict")
def deep_json_result_line(box, host):
    assert "N" * 32 + " " + "[" * 3000 in raw_run(box, ADD, DEEP_RECORD).stdout  # the line does reach the host
    cheat, honest = verify_many([(ADD, DEEP_RECORD), (ADD, ADD.reference)], box, CFG)
    assert_cheat_fails(cheat)
    assert honest.passed, honest
    assert honest.reward == 1.0, honest
    assert not honest.excluded, honest
    assert json.loads(json.dumps(cheat.detail))  # a plain, short verdict

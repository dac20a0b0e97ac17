"""Agent episodes with scripted policies in real sandbox sessions (warm bwrap; docker where it runs): an oracle
solving a repository task end to end, the no-op, every termination reason, malformed calls, batched turns, the
context budget with its state file, exact token accounting, the tables (CPU seconds and memory peaks per step and
per episode too), and an env's own tools and budgets (its spec's ``agent:``) beside other envs' in one batch."""

from __future__ import annotations

import json

import pytest

from posttrain.agent.metrics import episode_resources
from posttrain.agent.runner import NO_CALL, AgentTask, run_episodes
from posttrain.agent.scripted import ScriptedPolicy, noop_policy
from posttrain.agent.table import steps_table, trajectories_table
from posttrain.config import AgentConfig
from posttrain.envs.agent_settings import AgentSettings
from posttrain.envs.tools import DEFAULT_TOOLS
from posttrain.schemas import UNACCOUNTED
from tests.agent.conftest import Recording, assert_exact_tokens
from tests.sandbox.cases import ALLOCATE_100MB, BURN_CPU, usage_unaccounted

pytestmark = pytest.mark.integration

MAX_CONTEXT = 4096
FIX = AgentTask(env_id="repo/fix_add", group_id="g-fix", prompt="Fix the bug in calc.py so test_calc.py passes.",
                files={"calc.py": "def add(a, b):\n    return a - b\n",
                       "test_calc.py": "from calc import add\nassert add(2, 3) == 5\nprint('ok')\n"})
ORACLE = [{"name": "read_file", "arguments": {"path": "calc.py"}},
          {"name": "bash", "arguments": {"command": "python3 test_calc.py"}},
          {"name": "edit_file", "arguments": {"path": "calc.py", "search": "a - b", "replace": "a + b"}},
          {"name": "bash", "arguments": {"command": "python3 test_calc.py"}},
          {"name": "submit", "arguments": {}}]


def run(engine, fmt, sandbox, tasks, cfg=AgentConfig(), verify=None):
    sessions = [sandbox.session(timeout_s=cfg.tool_timeout_s) for _ in tasks]
    try:
        episodes = run_episodes(engine, fmt, tasks, sessions, cfg, MAX_CONTEXT)
        return episodes, [verify(s) for s in sessions] if verify else None
    finally:
        for s in sessions:
            s.close()


def calc_tests_pass(session) -> bool:
    return session.run("python3 test_calc.py").stdout == "ok\n"


def test_oracle_solves_a_repository_task_end_to_end(fmt, sandbox):
    engine = Recording(ScriptedPolicy(fmt, {FIX.prompt: ORACLE}))
    [e], [solved] = run(engine, fmt, sandbox, [FIX], verify=calc_tests_pass)
    assert e.finish_reason == "submit", [(t.text, t.observations) for t in e.turns]
    assert solved, [(t.text, t.observations) for t in e.turns]
    assert [s.tool for s in e.steps] == ["read_file", "bash", "edit_file", "bash", "submit"]
    assert [s.exit_code for s in e.steps[:4]] == [0, 1, 0, 0]
    assert [s.ok for s in e.steps] == [1, 0, 1, 1, 1]
    assert "a - b" in e.turns[0].observations[0]
    assert "AssertionError" in e.turns[1].observations[0]
    assert_exact_tokens(e, engine)

    steps = steps_table([e], policy_version=3)
    assert steps.tool.tolist() == [s.tool for s in e.steps]
    assert (steps.group_id == "g-fix").all()
    assert steps.tokens_in.tolist() == [len(p) for p, _, _ in engine.calls]
    assert steps.tokens_out.tolist() == [len(t) for _, t, _ in engine.calls]
    assert (steps.observation_bytes > 0).all()
    assert (steps.duration_ms > 0).all()
    [row] = trajectories_table([e], fmt.tokenizer.decode, policy_version=3, temperature=0.6).itertuples()
    assert (row.steps, row.tool_calls, row.finish_reason, row.window) == (5, 5, "submit", 0)
    assert row.tokens == sum(len(t) for _, t, _ in engine.calls)


def test_each_step_and_its_episode_carry_what_the_programs_used(fmt, sandbox):
    calls = [{"name": "python", "arguments": {"code": BURN_CPU}},
             {"name": "python", "arguments": {"code": ALLOCATE_100MB}},
             {"name": "edit_file", "arguments": {"path": "calc.py", "search": "a - b", "replace": "a + b"}},
             {"name": "submit", "arguments": {}}]
    with sandbox.session() as session:
        [e] = run_episodes(ScriptedPolicy(fmt, {FIX.prompt: calls}), fmt, [FIX], [session], AgentConfig(),
                           MAX_CONTEXT)
        read, write = session.log[-2:]  # edit_file: one read and one write, each a program of its own
    steps = steps_table([e], policy_version=0)
    assert steps.tool.tolist() == ["python", "python", "edit_file", "submit"], steps
    [episode] = episode_resources(steps).itertuples()
    assert episode.tool_s == pytest.approx(steps.duration_ms.sum() / 1000)
    assert steps.cpu_s.iloc[3] == steps.memory_peak_mb.iloc[3] == UNACCOUNTED  # submit runs no program
    if why := usage_unaccounted():
        assert (steps.cpu_s == UNACCOUNTED).all(), why
        assert (episode.cpu_s, episode.memory_peak_mb) == (-1, -1), why
        return
    burn, big, edit = steps.iloc[:3].itertuples()
    assert 0.29 <= burn.cpu_s < 1.0, burn
    assert big.memory_peak_mb > 100, big
    assert (read.kind, write.kind) == ("read", "write")
    assert edit.cpu_s == pytest.approx(read.cpu_s + write.cpu_s)
    assert edit.memory_peak_mb == max(read.memory_peak_mb, write.memory_peak_mb) < 40
    assert episode.cpu_s == pytest.approx(burn.cpu_s + big.cpu_s + edit.cpu_s)
    assert episode.memory_peak_mb == big.memory_peak_mb


def test_noop_policy_submits_at_once_and_solves_nothing(fmt, sandbox):
    [e], [solved] = run(noop_policy(fmt), fmt, sandbox, [FIX], verify=calc_tests_pass)
    assert not solved
    assert e.finish_reason == "submit"
    assert [s.tool for s in e.steps] == ["submit"]


def test_max_steps(fmt, sandbox):
    busy = ScriptedPolicy(fmt, {FIX.prompt: [{"name": "bash", "arguments": {"command": "true"}}] * 10})
    [e], _ = run(busy, fmt, sandbox, [FIX], AgentConfig(max_steps=3))
    assert e.finish_reason == "max_steps"
    assert len(e.turns) == 3


def test_token_budget_counts_model_tokens(fmt, sandbox):
    busy = Recording(ScriptedPolicy(fmt, {FIX.prompt: [{"name": "bash", "arguments": {"command": "true"}}] * 10}))
    [e], _ = run(busy, fmt, sandbox, [FIX], AgentConfig(token_budget=200, max_new_tokens=150))
    assert e.finish_reason == "token_budget"
    assert e.model_tokens <= 200
    assert len(e.turns) < 10
    assert_exact_tokens(e, busy)


def test_token_budget_when_the_context_is_full(fmt, sandbox):
    busy = ScriptedPolicy(fmt, {FIX.prompt: [{"name": "bash", "arguments": {"command": "seq 100"}}] * 10})
    sessions = [sandbox.session()]
    try:
        prompt = len(fmt.prompt_ids(FIX.messages()))
        [e] = run_episodes(busy, fmt, [FIX], sessions, AgentConfig(), max_context=prompt + 400)
    finally:
        sessions[0].close()
    assert e.finish_reason == "token_budget"
    assert len(e.context_ids()) <= prompt + 400
    assert len(e.turns) < 10


def test_wall_deadline(fmt, sandbox):
    slow = ScriptedPolicy(fmt, {FIX.prompt: [{"name": "bash", "arguments": {"command": "sleep 0.3"}}] * 5})
    [e], _ = run(slow, fmt, sandbox, [FIX], AgentConfig(deadline_s=0.2))
    assert e.finish_reason == "deadline"
    assert len(e.turns) == 1


def test_malformed_and_unknown_calls_are_error_observations_and_the_episode_goes_on(fmt, sandbox):
    script = ["I think the bug is in calc.py.",
              '<tool_call>{"name": "bash", "arguments": {"command": "ls"</tool_call>',
              '<tool_call>{"name": "curl", "arguments": {"url": "x"}}</tool_call>',
              '<tool_call>{"name": "bash", "arguments": {"command": "ls"}}',  # cut off: never closed
              {"name": "submit", "arguments": {}}]
    engine = Recording(ScriptedPolicy(fmt, {FIX.prompt: script}))
    [e], _ = run(engine, fmt, sandbox, [FIX])
    assert e.finish_reason == "submit"
    assert len(e.turns) == 5
    assert e.turns[0].observations == [NO_CALL]
    assert "not valid JSON" in e.turns[1].observations[0]
    assert "unknown tool 'curl'" in e.turns[2].observations[0]
    assert "not closed" in e.turns[3].observations[0]
    steps = steps_table([e], policy_version=0)
    assert steps.error.astype(bool).tolist() == [True, True, True, True, False]
    assert steps.tool.tolist() == ["", "", "curl", "", "submit"]
    assert trajectories_table([e], fmt.tokenizer.decode, 0, 0.6).tool_calls.tolist() == [1]
    assert_exact_tokens(e, engine)


def test_all_active_episodes_advance_together_in_one_batch_per_turn(fmt, sandbox):
    tasks = [AgentTask(env_id=f"t/{k}", group_id="g", sample_idx=k, prompt=f"Task number {k}: touch files.")
             for k in range(3)]
    scripts = {t.prompt: [{"name": "bash", "arguments": {"command": f"touch f{j}"}} for j in range(k)]
               for k, t in enumerate(tasks)}
    engine = Recording(ScriptedPolicy(fmt, scripts))
    episodes, listings = run(engine, fmt, sandbox, tasks, verify=lambda s: s.run("ls").stdout.split())
    assert engine.batches == [3, 2, 1]
    assert [len(e.turns) for e in episodes] == [1, 2, 3]
    assert {e.finish_reason for e in episodes} == {"submit"}
    assert [sorted(f for f in ls if f.startswith("f")) for ls in listings] == [[], ["f0"], ["f0", "f1"]]
    for e in episodes:
        assert_exact_tokens(e, engine)


def test_context_budget_compresses_and_writes_the_state_file(fmt, sandbox):
    script = [{"name": "bash", "arguments": {"command": f"seq {k}00 {k}40"}} for k in range(1, 5)]
    engine = Recording(ScriptedPolicy(fmt, {FIX.prompt: script}))
    cfg = AgentConfig(context_budget=len(fmt.prompt_ids(FIX.messages())) + 600, keep_recent_turns=1)
    [e], [state] = run(engine, fmt, sandbox, [FIX], cfg, verify=lambda s: s.read_file(cfg.state_file))
    assert e.finish_reason == "submit"
    assert e.compressions
    assert len(e.windows) == len(e.compressions)
    assert "100\n101\n" in state
    assert "## turn 0: bash" in state
    assert all(w[0].token_ids == e.prefix_ids for w in e.all_windows())
    steps = steps_table([e], 0)
    assert (steps.compressed_at_turn[:2] >= 0).all()
    assert steps.compressed_at_turn.iloc[-1] == -1
    rows = trajectories_table([e], fmt.tokenizer.decode, 0, 0.6)
    assert rows.window.tolist() == list(range(len(e.windows) + 1))
    assert_exact_tokens(e, engine)


def test_a_session_that_cannot_be_prepared_ends_only_its_episode_as_infra(fmt, sandbox):
    other = AgentTask(env_id="repo/other", group_id="g-other", prompt="Another task.", files={"a.txt": "a"})
    engine = ScriptedPolicy(fmt, {FIX.prompt: ORACLE})
    sessions = [sandbox.session(), sandbox.session()]
    sessions[1].close()  # its workspace is gone before the episode starts
    try:
        fixed, broken = run_episodes(engine, fmt, [FIX, other], sessions, AgentConfig(), MAX_CONTEXT)
        assert calc_tests_pass(sessions[0])
    finally:
        sessions[0].close()
    assert fixed.finish_reason == "submit"
    assert not fixed.infra_error
    assert broken.finish_reason == "infra"
    assert "closed" in broken.infra_error
    assert not broken.turns
    rows = trajectories_table([broken], fmt.tokenizer.decode, 0, 0.6)
    assert rows.completion_token_ids.tolist() == ["[]"]
    assert rows.finish_reason.tolist() == ["infra"]


def test_a_setup_runs_before_the_first_turn_and_its_failure_ends_only_its_episode_as_infra(fmt, sandbox):
    committed = AgentTask(env_id="repo/git", group_id="g-git", prompt="Show the history.", files=FIX.files,
                          setup="git init -q && git add . && git -c user.name=a -c user.email=a@b commit -qm init\n")
    broken = AgentTask(env_id="repo/broken", group_id="g-broken", prompt="Never starts.", files={"a.txt": "a"},
                       setup="echo no repository here >&2; exit 4\n")
    log = {"name": "bash", "arguments": {"command": "git log --format=%s"}}
    engine = ScriptedPolicy(fmt, {committed.prompt: [log]})
    (shown, failed), _ = run(engine, fmt, sandbox, [committed, broken])
    assert shown.finish_reason == "submit"
    assert shown.turns[0].observations == ["init\n"]
    assert failed.finish_reason == "infra"
    assert "setup failed: exit 4: no repository here" in failed.infra_error
    assert not failed.turns


def test_a_prompt_that_leaves_no_room_ends_only_its_episode_as_infra_and_says_why(fmt, sandbox):
    """An env whose first prompt fills the engine's context cannot take a turn: that episode ends as ``infra`` before
    its workspace is prepared, the message names the env and the setting, and the rest of the batch runs (before,
    ``run_episodes`` raised and the whole rollout batch failed)."""
    long = AgentTask(env_id="t/long", group_id="g-long", prompt="Read this first. " * 400, files={"a.txt": "a"})
    engine = ScriptedPolicy(fmt, {FIX.prompt: ORACLE})
    sessions = [sandbox.session(timeout_s=10) for _ in range(2)]
    try:
        limit = len(fmt.prompt_ids(FIX.messages())) + 2000
        assert len(fmt.prompt_ids(long.messages())) >= limit
        fixed, refused = run_episodes(engine, fmt, [FIX, long], sessions, AgentConfig(), max_context=limit)
        assert sessions[1].run("ls").stdout == ""  # never prepared
    finally:
        for s in sessions:
            s.close()
    assert fixed.finish_reason == "submit"
    assert refused.finish_reason == "infra" and not refused.turns
    assert refused.infra_error.startswith("t/long: its first prompt is ")
    assert "rollout.max_model_len" in refused.infra_error


HOSTILE = [r'<tool_call>{"name": "write_file", "arguments": {"path": "a\udc80", "content": "x"}}</tool_call>',
           r'<tool_call>{"name": "edit_file", "arguments": {"path": "calc.py", "search": "-", "replace": "\udc80"}}'
           r'</tool_call>',
           r'<tool_call>{"name": "bash", "arguments": {"command": "echo a\u0000b"}}</tool_call>',
           "<tool_call>" + "[" * 1000 + "]" * 1000 + "</tool_call>",
           '<tool_call>{"name": "bash", "arguments": {"command": "ls"}, "n": ' + "7" * 4301 + "}</tool_call>"]


def test_hostile_calls_fail_their_own_episode_never_the_batch_and_are_never_infra(fmt, sandbox):
    attacker = AgentTask(env_id="t/hostile", group_id="g-hostile", prompt="Break the batch.", files=FIX.files)
    engine = ScriptedPolicy(fmt, {FIX.prompt: ORACLE, attacker.prompt: HOSTILE})
    cfg = AgentConfig(max_new_tokens=8000, token_budget=100_000, context_budget=100_000)
    sessions = [sandbox.session(), sandbox.session()]
    try:
        fixed, hostile = run_episodes(engine, fmt, [FIX, attacker], sessions, cfg, max_context=100_000)
        assert calc_tests_pass(sessions[0])
    finally:
        for s in sessions:
            s.close()
    assert fixed.finish_reason == "submit"
    assert [s.ok for s in fixed.steps] == [1, 0, 1, 1, 1]
    assert hostile.finish_reason == "submit"
    assert not hostile.infra_error
    assert [s.tool for s in hostile.steps] == ["write_file", "edit_file", "bash", "", "", "submit"]
    assert [s.ok for s in hostile.steps] == [False] * 5 + [True]
    assert not any(s.infra_error for s in hostile.steps)
    assert "not UTF-8 text" in hostile.turns[0].observations[0]
    assert "NUL" in hostile.turns[2].observations[0]


def test_an_episodes_deadline_counts_its_own_time_not_the_slow_calls_beside_it(fmt, sandbox):
    slow = AgentTask(env_id="t/slow", group_id="g-slow", prompt="Sleep a lot.")
    busy = [{"name": "bash", "arguments": {"command": f"touch f{k}"}} for k in range(6)]
    engine = ScriptedPolicy(fmt, {FIX.prompt: busy, slow.prompt: [{"name": "bash", "arguments": {
        "command": "sleep 1.5"}}] * 6})
    sessions = [sandbox.session(), sandbox.session()]
    try:
        quick, sleeper = run_episodes(engine, fmt, [FIX, slow], sessions, AgentConfig(deadline_s=4), MAX_CONTEXT)
    finally:
        for s in sessions:
            s.close()
    assert quick.finish_reason == "submit", quick.spent_s
    assert len(quick.turns) == 7, quick.spent_s
    assert quick.spent_s < 4, quick.spent_s
    assert sleeper.finish_reason == "deadline"
    assert 3 <= len(sleeper.turns) <= 4
    assert sleeper.spent_s >= 4


def touches(n: int) -> list[dict]:
    return [{"name": "bash", "arguments": {"command": f"touch f{k}"}} for k in range(n)]


def test_each_episode_ends_at_its_own_envs_max_steps_within_one_batch(fmt, sandbox):
    short = AgentTask(env_id="t/short", group_id="g-short", prompt="Short task: touch files.",
                      settings=AgentSettings(max_steps=2, token_budget=900, context_budget=700))
    long = AgentTask(env_id="t/long", group_id="g-long", prompt="Long task: touch files.")
    engine = Recording(ScriptedPolicy(fmt, {short.prompt: touches(10), long.prompt: touches(10)}))
    cfg = AgentConfig(max_steps=5)
    episodes, _ = run(engine, fmt, sandbox, [short, long], cfg)
    assert [(e.finish_reason, len(e.turns)) for e in episodes] == [("max_steps", 2), ("max_steps", 5)]
    assert engine.batches == [2, 2, 1, 1, 1]  # one batched generate per turn while both run
    for e in episodes:
        assert_exact_tokens(e, engine)
    steps = steps_table(episodes, policy_version=0)
    budgets = steps.drop_duplicates("env_id").set_index("env_id")
    columns = ["allowed_tools", "max_steps", "max_new_tokens", "token_budget", "context_budget", "deadline_s"]
    tools = json.dumps(DEFAULT_TOOLS)
    assert budgets.loc["t/short", columns].tolist() == [tools, 2, cfg.max_new_tokens, 900, 700, cfg.deadline_s]
    assert budgets.loc["t/long", columns].tolist() == [tools, 5, cfg.max_new_tokens, cfg.token_budget,
                                                       cfg.context_budget, cfg.deadline_s]
    assert steps.groupby("env_id").size().to_dict() == {"t/long": 5, "t/short": 2}


def test_a_tool_outside_the_envs_set_is_rejected_and_never_runs(fmt, sandbox):
    narrow = AgentTask(env_id="t/narrow", group_id="g-narrow", prompt="Narrow task: write a marker.",
                       settings=AgentSettings(tools=["bash", "submit"]))
    wide = AgentTask(env_id="t/wide", group_id="g-wide", prompt="Wide task: write a marker.")
    marker = {"name": "python", "arguments": {"code": "open('marker', 'w').write('ran')"}}
    engine = Recording(ScriptedPolicy(fmt, {narrow.prompt: [marker], wide.prompt: [marker]}))
    (shut, open_), listings = run(engine, fmt, sandbox, [narrow, wide], verify=lambda s: s.run("ls").stdout.split())
    assert "unknown tool 'python'; tools: ['bash', 'submit']" in shut.turns[0].observations[0]
    assert (shut.steps[0].tool, shut.steps[0].ok, bool(shut.steps[0].error)) == ("python", False, True)
    assert listings == [[], ["marker"]]  # the same call ran in the episode whose env allows it
    assert [e.finish_reason for e in (shut, open_)] == ["submit", "submit"]
    listed = fmt.tokenizer.decode(shut.prefix_ids)  # the prompt lists the env's tools only
    assert "- bash(command)" in listed
    assert "- python(" not in listed
    assert "- python(code)" in fmt.tokenizer.decode(open_.prefix_ids)
    assert all(w[0].token_ids == shut.prefix_ids for w in shut.all_windows())
    assert_exact_tokens(shut, engine)
    steps = steps_table([shut, open_], policy_version=0)
    assert steps.allowed_tools.unique().tolist() == ['["bash", "submit"]', json.dumps(DEFAULT_TOOLS)]


def test_an_envs_own_deadline_ends_its_episode_and_not_the_others(fmt, sandbox):
    hurried = AgentTask(env_id="t/hurried", group_id="g-hurried", prompt="Hurried task: sleep.",
                        settings=AgentSettings(deadline_s=0.2))
    engine = ScriptedPolicy(fmt, {hurried.prompt: [{"name": "bash", "arguments": {"command": "sleep 0.3"}}] * 3,
                                  FIX.prompt: [{"name": "bash", "arguments": {"command": "sleep 0.3"}}] * 3})
    (cut, done), _ = run(engine, fmt, sandbox, [hurried, FIX])
    assert (cut.finish_reason, len(cut.turns)) == ("deadline", 1)
    assert (done.finish_reason, len(done.turns)) == ("submit", 4)
    assert steps_table([cut, done], 0).groupby("env_id").deadline_s.first().to_dict() == {
        "repo/fix_add": AgentConfig().deadline_s, "t/hurried": 0.2}

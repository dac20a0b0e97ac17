"""Per-step snapshots and rollback in real sandbox sessions: snapshots every N turns, and an episode that breaks
its fix at turn 2 restarted from turn 1's snapshot with another continuation, which solves the env."""

from __future__ import annotations

from dataclasses import replace

import pytest

from posttrain.tracking.episode_replay import workspace_files
from posttrain.agent.rollback import rebuild, restart
from posttrain.agent.runner import run_episodes
from posttrain.agent.scripted import ScriptedPolicy
from posttrain.config import AgentConfig
from posttrain.envs.agent_settings import parse_settings
from posttrain.sandbox.session import Snapshot
from tests.agent.conftest import Recording
from tests.agent.test_runner import FIX, MAX_CONTEXT, calc_tests_pass

pytestmark = pytest.mark.integration

FIXED = {"name": "edit_file", "arguments": {"path": "calc.py", "search": "a - b", "replace": "a + b"}}
TEST = {"name": "bash", "arguments": {"command": "python3 test_calc.py"}}
BREAK = {"name": "write_file", "arguments": {"path": "calc.py", "content": "def add(a, b):\n    return 0\n"}}


def test_snapshots_are_taken_every_n_turns_and_after_the_last(fmt, sandbox):
    cfg = AgentConfig(snapshot_every=2)
    with sandbox.session() as session:
        [e] = run_episodes(ScriptedPolicy(fmt, {FIX.prompt: [TEST, FIXED, TEST, TEST]}), fmt, [FIX], [session],
                           cfg, MAX_CONTEXT)
    assert len(e.turns) == 5 and e.finish_reason == "submit"
    assert sorted(e.snapshots) == [-1, 1, 3, 4]
    assert "a - b" in workspace_files(e.snapshots[-1])["calc.py"]
    assert "a + b" in workspace_files(e.snapshots[1])["calc.py"]
    with sandbox.session() as session:
        [off] = run_episodes(ScriptedPolicy(fmt, {FIX.prompt: [TEST]}), fmt, [FIX], [session], AgentConfig(),
                             MAX_CONTEXT)
    assert off.snapshots == {}


def test_an_env_asks_for_snapshots_over_the_runs_setting(fmt, sandbox):
    """The env's ``agent: {snapshot_every: 1}`` under a run without snapshots; another env in the batch takes none."""
    asks = replace(FIX, settings=parse_settings({"snapshot_every": 1}))
    other = replace(FIX, env_id="repo/other", group_id="g-other")
    with sandbox.session() as one, sandbox.session() as two:
        wanted, plain = run_episodes(ScriptedPolicy(fmt, {FIX.prompt: [TEST]}), fmt, [asks, other], [one, two],
                                     AgentConfig(), MAX_CONTEXT)
    assert sorted(wanted.snapshots) == [-1, 0, 1] and plain.snapshots == {}


def test_an_episode_restarts_from_a_snapshot_and_solves_the_env(fmt, sandbox):
    cfg = AgentConfig(snapshot_every=1)
    original = Recording(ScriptedPolicy(fmt, {FIX.prompt: [FIXED, TEST, BREAK]}))
    with sandbox.session() as session:
        [e] = run_episodes(original, fmt, [FIX], [session], cfg, MAX_CONTEXT)
        assert not calc_tests_pass(session)
    assert [s.tool for s in e.steps] == ["edit_file", "bash", "write_file", "submit"]

    with sandbox.session() as session:  # the workspace restored is turn 1's: the break of turn 2 is gone
        session.write_file("later.txt", "made after the snapshot")
        session.restore(Snapshot(id=1, data=e.snapshots[1], step=0))
        assert workspace_files(session.snapshot().data) == workspace_files(e.snapshots[1])
        assert "return 0" not in session.read_file("calc.py")

    other = Recording(ScriptedPolicy(fmt, {FIX.prompt: [FIXED, TEST, TEST]}))
    with sandbox.session() as session:
        again = restart(other, fmt, FIX, session, e, 1, cfg, MAX_CONTEXT)
        assert calc_tests_pass(session)
    assert again.finish_reason == "submit"
    assert [s.tool for s in again.steps] == ["edit_file", "bash", "bash", "submit"]
    assert e.steps[2].tool == "write_file"  # the original is left as it was
    # turns 0..1 are the original's token for token, and the engine's first prompt is the one turn 2 had
    assert [t.model_ids for t in again.turns[:2]] == [t.model_ids for t in e.turns[:2]]
    assert other.calls[0][0] == original.calls[2][0]
    assert sorted(again.snapshots) == [-1, 0, 1, 2, 3]


def test_a_restart_needs_a_snapshot_and_an_episode_that_went_on(fmt, sandbox):
    with sandbox.session() as session:
        [e] = run_episodes(ScriptedPolicy(fmt, {FIX.prompt: [FIXED]}), fmt, [FIX], [session],
                           AgentConfig(snapshot_every=1), MAX_CONTEXT)
        with pytest.raises(ValueError, match="no snapshot of turn 5"):
            restart(ScriptedPolicy(fmt, {}), fmt, FIX, session, e, 5, AgentConfig(), MAX_CONTEXT)
    with pytest.raises(ValueError, match="ended at turn 1"):
        rebuild(e, fmt, FIX, 1, MAX_CONTEXT)


def test_a_restart_after_a_compression_sends_the_prompt_the_original_sent(fmt, sandbox):
    """Turns 0..2 of four long outputs, the first compressed into the state file: the restart from turn 2 rebuilds
    the window the compression opened, so the engine's next prompt is the original's turn-3 prompt, token for
    token, and the state file is the snapshot's."""
    script = [{"name": "bash", "arguments": {"command": f"seq {k}00 {k}40"}} for k in range(1, 5)]
    cfg = AgentConfig(context_budget=len(fmt.prompt_ids(FIX.messages())) + 600, keep_recent_turns=1,
                      snapshot_every=1)
    original = Recording(ScriptedPolicy(fmt, {FIX.prompt: script}))
    with sandbox.session() as session:
        [e] = run_episodes(original, fmt, [FIX], [session], cfg, MAX_CONTEXT)
    assert e.compressions and e.compressions[0].turn <= 2
    again = Recording(ScriptedPolicy(fmt, {FIX.prompt: script}))
    with sandbox.session() as session:
        resumed = restart(again, fmt, FIX, session, e, 2, cfg, MAX_CONTEXT)
    assert again.calls[0][0] == original.calls[3][0]
    assert [c.turn for c in resumed.compressions] == [c.turn for c in e.compressions]
    assert [t.model_ids for t in resumed.turns] == [t.model_ids for t in e.turns]
    assert [s.compressed_at_turn for s in resumed.steps] == [s.compressed_at_turn for s in e.steps]

"""``posttrain replay`` on a real MLflow store: a failed eval episode's tables logged with an iteration run the way
the loop logs them (``agent_eval_steps``, ``agent_eval_snapshots``, ``eval_results``), then listed and shown step by
step with its messages, calls, outputs and workspace diffs."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest

from posttrain import tracking
from posttrain.agent.runner import run_episodes
from posttrain.agent.scripted import ScriptedPolicy
from posttrain.agent.table import snapshots_table, steps_table
from posttrain.cli import main
from posttrain.config import AgentConfig
from posttrain.sandbox import make_sandbox
from posttrain.schemas import EvalResults
from tests import mlflow_store
from tests.agent.test_runner import FIX, MAX_CONTEXT

pytestmark = pytest.mark.integration

GROUP = "eval-v1/repo/fix_add"
WRONG = {"name": "edit_file", "arguments": {"path": "calc.py", "search": "a - b", "replace": "a * b"}}
TEST = {"name": "bash", "arguments": {"command": "python3 test_calc.py"}}


@pytest.fixture
def logged(fmt, tmp_path, monkeypatch):
    """An iteration run holding one failed eval episode (a wrong fix, its test failing), and its loop's run."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_store(tmp_path))
    task = replace(FIX, group_id=GROUP)
    with make_sandbox("bwrap").session() as session:
        [e] = run_episodes(ScriptedPolicy(fmt, {FIX.prompt: [WRONG, TEST]}), fmt, [task], [session],
                           AgentConfig(snapshot_every=1), MAX_CONTEXT)
    results = EvalResults.validate(pd.DataFrame([{
        "env_id": FIX.env_id, "domain": "repo", "difficulty": 1, "decoding": "greedy", "sample_idx": 0,
        "policy_version": 1, "steps": len(e.turns), "passed": False, "reward": 0.0, "infra_error": "",
        "assertions": "{}"}]))
    parent = tracking.start_run("posttrain", run_name="rl_loop")
    child = tracking.log_iteration(parent, 1, {}, tables={tracking.EVAL_RESULTS: results,
                                                          "agent_eval_steps": steps_table([e], 1),
                                                          "agent_eval_snapshots": snapshots_table([e])})
    return parent, child


def test_replay_lists_the_failed_episodes_and_shows_one_step_by_step(logged, capsys):
    parent, child = logged
    assert main(["replay", child]) == 0
    listing = capsys.readouterr().out
    assert f"{GROUP}  sample 0  3 calls  snapshots" in listing
    assert main(["replay", child, "--episode", GROUP]) == 0
    shown = capsys.readouterr().out
    assert shown.index("== turn 0 ==") < shown.index("== turn 1 ==") < shown.index("== turn 2 ==")
    assert '<tool_call>{"name": "edit_file"' in shown  # the model's message
    assert 'call: edit_file {"path": "calc.py", "search": "a - b", "replace": "a * b"} -> ok' in shown
    assert "-    return a - b" in shown and "+    return a * b" in shown  # turn 0's workspace diff
    assert "call: bash" in shown and "AssertionError" in shown and "exit 1" in shown  # turn 1's output
    assert shown.count("(unchanged)") >= 1  # the test run and the submit changed no file we show
    assert main(["replay", parent]) == 0
    assert "logged no agent_eval_steps table" in capsys.readouterr().out

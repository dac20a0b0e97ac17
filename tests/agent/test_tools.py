"""Every agent tool in a real sandbox session, on warm bwrap and on docker (where dockerd and the image are)."""

from __future__ import annotations

import pytest

from posttrain.agent.tools import EXECUTORS, replace_once, run_tool
from posttrain.envs.tools import TOOLS

pytestmark = pytest.mark.integration


@pytest.fixture
def session(sandbox):
    with sandbox.session(timeout_s=10) as s:
        yield s


def test_bash_runs_in_the_workspace_and_reports_exit_code_and_stderr(session):
    obs = run_tool(session, "bash", {"command": "pwd; echo oops >&2; exit 3"})
    assert (obs.ok, obs.exit_code) == (False, 3)
    assert obs.text.startswith("/work\n")
    assert "[stderr]\noops" in obs.text


def test_bash_state_persists_between_calls(session):
    run_tool(session, "bash", {"command": "mkdir -p pkg && echo 41 > pkg/n.txt"})
    assert run_tool(session, "bash", {"command": "cat pkg/n.txt"}).text == "41\n"


def test_python_reads_code_from_stdin_and_imports_workspace_modules(session):
    run_tool(session, "write_file", {"path": "calc.py", "content": "def add(a, b):\n    return a + b\n"})
    obs = run_tool(session, "python", {"code": "import calc\nprint(calc.add(2, 3))"})
    assert (obs.ok, obs.exit_code, obs.text) == (True, 0, "5\n")
    failing = run_tool(session, "python", {"code": "raise SystemExit('bad')"})
    assert failing.exit_code == 1
    assert "bad" in failing.text


def test_a_command_past_its_deadline_is_a_timeout_observation(sandbox):
    with sandbox.session(timeout_s=1) as s:
        obs = run_tool(s, "bash", {"command": "sleep 5"})
    assert not obs.ok
    assert obs.exit_code is None
    assert "[timed out]" in obs.text


def test_write_then_read_file(session):
    obs = run_tool(session, "write_file", {"path": "dir/notes.md", "content": "héllo\n"})
    assert obs.ok
    assert obs.text == "wrote 7 bytes to dir/notes.md"
    assert run_tool(session, "read_file", {"path": "dir/notes.md"}).text == "héllo\n"


def test_read_missing_file_and_write_outside_workspace_are_error_observations(session):
    missing = run_tool(session, "read_file", {"path": "nope.txt"})
    assert not missing.ok
    assert missing.text.startswith("error: ")
    assert not missing.infra_error
    escape = run_tool(session, "write_file", {"path": "../etc/x", "content": "x"})
    assert not escape.ok
    assert escape.text.startswith("error: ")


def test_edit_file_replaces_exactly_one_occurrence(session):
    run_tool(session, "write_file", {"path": "calc.py", "content": "def sub(a, b):\n    return a + b\n"})
    obs = run_tool(session, "edit_file", {"path": "calc.py", "search": "a + b", "replace": "a - b"})
    assert obs.ok
    assert run_tool(session, "read_file", {"path": "calc.py"}).text == "def sub(a, b):\n    return a - b\n"
    absent = run_tool(session, "edit_file", {"path": "calc.py", "search": "a * b", "replace": "x"})
    assert not absent.ok
    assert "found 0 times" in absent.text
    missing = run_tool(session, "edit_file", {"path": "gone.py", "search": "a", "replace": "b"})
    assert not missing.ok
    assert missing.text.startswith("error: ")


def test_submit_ends_without_touching_the_workspace(session):
    obs = run_tool(session, "submit", {})
    assert obs.submitted
    assert obs.ok
    assert [step.kind for step in session.log] == []


@pytest.mark.parametrize("text, search, expected", [("aXa", "X", "aYa"), ("XX", "X", None), ("a", "", None)])
def test_replace_once(text, search, expected):
    if expected is None:
        with pytest.raises(ValueError):
            replace_once(text, search, "Y")
    else:
        assert replace_once(text, search, "Y") == expected


def test_every_tool_of_the_vocabulary_has_an_executor():
    assert list(EXECUTORS) == list(TOOLS)


@pytest.mark.parametrize("name, arguments", [
    ("bash", {"command": "echo a\0b"}),  # no program argument can hold a NUL
    ("bash", {"command": "echo " + "x" * 200_000}),  # one argv string over the kernel's 128 KB
    ("write_file", {"path": "p" * 200_000, "content": "x"}),
    ("read_file", {"path": "p" * 5000}),
    ("write_file", {"path": "a\udc80", "content": "x"}),  # a lone surrogate: no file name
    ("read_file", {"path": "a\udc80"}),
])
def test_arguments_no_program_can_take_are_the_agents_failed_calls_not_infra(session, name, arguments):
    obs = run_tool(session, name, arguments)
    assert not obs.ok, obs.text[:200]
    assert obs.infra_error == "", obs.text[:200]
    assert obs.text.startswith("error: "), obs.text[:200]
    obs.text.encode("utf-8")
    assert run_tool(session, "bash", {"command": "ls"}).text == ""  # nothing was written; the session works

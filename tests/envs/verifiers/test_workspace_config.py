"""The ``workspace_tests`` config: parsed with its defaults, and the deadlines computed from the env's timeout."""

from __future__ import annotations

import pytest

from posttrain.envs.verifiers.typed_config import parse
from posttrain.envs.verifiers.workspace_config import MIN_TEST_TIMEOUT_S, WorkspaceTestsConfig, command_argv

pytestmark = pytest.mark.unit


def config(**changes) -> WorkspaceTestsConfig:
    tests = [{"name": f"t{i}", "cmd": "true"} for i in range(3)]
    return parse(WorkspaceTestsConfig, {"kind": "workspace_tests", "tests": tests, **changes})


def test_parsed_tests_take_their_defaults():
    parsed = config(files={"check.py": "print(1)\n"})
    assert [(t.name, t.stdout, t.exit_code) for t in parsed.tests] == [("t0", None, 0), ("t1", None, 0),
                                                                       ("t2", None, 0)]
    assert (parsed.files, parsed.solution_file) == ({"check.py": "print(1)\n"}, None)


def test_deadlines_are_configured_or_shared_out():
    assert config().deadlines(9.0) == (3.0, 2.0)  # a third for the solution, the rest shared by three tests
    assert config().deadlines(60.0) == (10.0, 50.0 / 3)  # the solution's share is capped at 10 s
    assert config().deadlines(3.0) == (1.0, MIN_TEST_TIMEOUT_S)  # a test always gets its minimum
    assert config(solution_timeout_s=4, test_timeout_s=1.5).deadlines(9.0) == (4.0, 1.5)


def test_command_argv_splits_lines_and_refuses_other_values():
    assert command_argv(["node", "{tests}/t.js"]) == ["node", "{tests}/t.js"]
    with pytest.raises(ValueError, match="got int"):
        command_argv(3)

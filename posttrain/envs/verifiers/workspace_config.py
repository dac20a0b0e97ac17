"""The ``verifier:`` mapping of a ``workspace_tests`` env, declared once: the loader's validation, the JSON Schema, the
docs table and the verifier's run-time reads (``parse``) all come from ``WorkspaceTestsConfig``.

Its own module so that both the verifier (``workspace_tests``) and its admission hooks (``workspace_admission``)
read the typed config without importing each other.

Example:
    >>> from posttrain.envs.verifiers.typed_config import parse
    >>> config = parse(WorkspaceTestsConfig, {"kind": "workspace_tests", "tests": [{"name": "t", "cmd": "true"}]})
    >>> config.files, config.solution_file, config.tests[0].exit_code, config.tests[0].guard, config.deadlines(9.0)
    ({}, None, 0, False, (3.0, 6.0))
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Annotated, Literal

from posttrain.envs.verifiers.typed_config import Rule

MAX_TESTS = 50
MIN_TEST_TIMEOUT_S = 2.0  # a test's default deadline is a cap for hung tests, not a budget: slow hosts stay green


def _relative(name) -> bool:
    if not isinstance(name, str) or not name or "\0" in name:
        return False
    path = PurePosixPath(name)
    return not path.is_absolute() and ".." not in path.parts and str(path) not in (".", "")


def _relative_path(name: str) -> str:
    return "" if _relative(name) else f"must be a relative path in the workspace, got {name!r}"


def _command(cmd) -> str:
    try:
        return "" if command_argv(cmd) else "is empty"
    except ValueError as error:
        return f"must be a command line or a list of strings ({error})"


RelativePath = Annotated[str, Rule(check=_relative_path)]
Seconds = Annotated[float, Rule(low=0, open_low=True, high=300)]


@dataclass
class WorkspaceTest:
    name: Annotated[str, Rule(min_len=1, doc="unique among the env's tests")]
    cmd: Annotated[str | list[str], Rule(check=_command, doc="one process, cwd /work; {tests} is the trusted "
                                                             "files' directory")]
    stdout: Annotated[str, Rule(doc="expected stdout (trailing whitespace ignored), compared on the host")] = None
    exit_code: Annotated[int, Rule(low=0, high=255, doc="expected exit code")] = 0
    guard: Annotated[bool, Rule(doc="behaviour the untouched workspace already has and the solution must keep: "
                                    "it earns nothing, and failing it makes the reward 0")] = False


@dataclass
class WorkspaceTestsConfig:
    """The ``verifier:`` mapping of a ``workspace_tests`` env."""

    kind: Literal["workspace_tests"]
    tests: Annotated[list[WorkspaceTest], Rule(min_len=1, max_len=MAX_TESTS, noun="tests")]
    solution_file: Annotated[RelativePath | None, Rule(doc="the solution is this file's content; else a bash "
                                                           "edit script")] = None
    files: Annotated[dict[RelativePath, str], Rule(noun="relative paths to file contents",
                                                   doc="trusted test files: read-only, hidden from the solution")] = \
        field(default_factory=dict)
    solution_timeout_s: Annotated[Seconds, Rule(doc="default: a third of the env's timeout, at most 10 s")] = None
    test_timeout_s: Annotated[Seconds, Rule(doc="default: the rest, shared by the tests, at least 2 s each")] = None

    def deadlines(self, total: float) -> tuple[float, float]:
        """(solution phase, each test) seconds within a ``total`` deadline: the configured ones, else a third of
        ``total`` (at most 10 s) for the solution and an equal share of the rest (at least 2 s) for each test."""
        solution = float(min(total / 3, 10.0) if self.solution_timeout_s is None else self.solution_timeout_s)
        share = (total - solution) / max(1, len(self.tests))
        test = min(total, max(MIN_TEST_TIMEOUT_S, share)) if self.test_timeout_s is None else self.test_timeout_s
        return solution, float(test)


def command_argv(cmd) -> list[str]:
    """A test's ``cmd`` as an argv: a command line split like a shell would, or a list of strings as it is.

    >>> command_argv("python3 -I '{tests}/check me.py'")
    ['python3', '-I', '{tests}/check me.py']
    """
    if isinstance(cmd, str):
        return shlex.split(cmd)
    if isinstance(cmd, list) and all(isinstance(a, str) for a in cmd):
        return list(cmd)
    raise ValueError(f"got {type(cmd).__name__}")

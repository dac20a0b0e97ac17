"""The ``workspace_tests`` verifier: a solution changes a workspace, then trusted tests check the final workspace.

The env's ``workspace`` files are written; then the solution is applied: either a bash script run in the
workspace (agent envs; later the final workspace of an agent episode) or, with ``solution_file``, the solution
text written to that file (single-turn envs: "write ``src/slug.js``"). Only *after* the solution finished (and
every process it left behind was killed) are the trusted test files written, into a fresh private directory per
test, and each test command run. Everything happens in one sandbox execution under a small trusted driver
(``workspace_driver.py``, passed as ``python3 -I -c``, never a workspace file). The host decides: a test passes
iff it exited with the expected code within its deadline and, when the spec gives ``stdout``, printed exactly
that (trailing whitespace ignored). Expected outputs never enter the sandbox.

Spec config::

    verifier:
      kind: workspace_tests
      solution_file: src/slug.js     # optional: the solution is this file's content; else a bash edit script
      files:                         # trusted test files (relative paths), written after the solution ran
        check.py: |
          import json, sys
          sys.path.append("/work/src")   # append, never insert: stdlib modules cannot be shadowed
          from stats import median
          print(json.dumps(median([3, 1, 2])))
      tests:                         # one process each, cwd /work; {tests} is the trusted files' directory
        - {name: median_odd, cmd: "python3 -I {tests}/check.py", stdout: "2"}
        - {name: config_ok, cmd: "bash {tests}/check_config.sh", exit_code: 0}
      solution_timeout_s: 5          # optional (default: a third of the env's timeout, at most 10 s)
      test_timeout_s: 5              # optional (default: the rest of the timeout shared by the tests, >= 2 s)

Strength: a test with ``stdout`` is a value comparison decided on the host; an exit-code-only test that runs
workspace code can be passed by code that exits 0 early, so use those only for checks that run trusted code
(reading a config file). Residual risk: the solution and the tests share one sandbox; the driver kills every
process the solution left before writing the tests (and again after each test), and is non-dumpable, so only a
kernel-level escape could tamper with a test once it runs. The sandbox's pid namespace (issue 3) bounds the rest.

Example:
    >>> from posttrain.config import SandboxConfig
    >>> from posttrain.envs.spec import EnvSpec
    >>> spec = EnvSpec(id="t/cfg", prompt="Set port=8080 in app.ini", reference="sed -i s/80/8080/ app.ini\\n",
    ...                kind="agent", runtime="bash", workspace={"app.ini": "port=80\\n"},
    ...                verifier={"kind": "workspace_tests", "files": {"port.sh": "grep -c '^port=8080$' app.ini\\n"},
    ...                          "tests": [{"name": "port", "cmd": "bash {tests}/port.sh", "stdout": "1"}]})
    >>> validate(spec)
    []
    >>> ex = build_execution(spec, spec.reference, SandboxConfig(), "N")
    >>> sorted(ex.files), ex.command[:3], "8080" in ex.stdin, '"stdout"' in ex.stdin
    (['app.ini'], ['python3', '-I', '-c'], True, False)
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Annotated, Literal

from posttrain import trusted
from posttrain.config import SandboxConfig
from posttrain.envs.spec import EnvSpec
from posttrain.envs.verifiers.base import Problems, Verdict, Verifier, harness_records
from posttrain.envs.verifiers.typed_config import Rule, clip
from posttrain.envs.verifiers.workspace_admission import (agent_only, mutants, own_files, probes, solution_language,
                                                          test_sources, vacuous_tests)
from posttrain.sandbox.base import Execution, ExecutionResult

DRIVER = trusted.source("workspace_driver")
COMMAND = ["python3", "-I", "-c", DRIVER]
MAX_TESTS = 50
MIN_TEST_TIMEOUT_S = 2.0  # a test's default deadline is a cap for hung tests, not a budget: slow hosts stay green
TEST_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
FENCE = re.compile(r"```[\w+-]*[ \t]*\n(.*?)```", re.DOTALL)


def _relative(name) -> bool:
    if not isinstance(name, str) or not name or "\0" in name:
        return False
    path = PurePosixPath(name)
    return not path.is_absolute() and ".." not in path.parts and str(path) not in (".", "")


def _relative_path(name: str) -> str:
    return "" if _relative(name) else f"must be a relative path in the workspace, got {name!r}"


def _command(cmd) -> str:
    try:
        return "" if _argv(cmd) else "is empty"
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


@dataclass
class WorkspaceTestsConfig:
    """The ``verifier:`` mapping of a ``workspace_tests`` env."""

    kind: Literal["workspace_tests"]
    tests: Annotated[list[WorkspaceTest], Rule(min_len=1, max_len=MAX_TESTS, noun="tests")]
    solution_file: Annotated[RelativePath | None, Rule(doc="the solution is this file's content; else a bash "
                                                           "edit script")] = None
    files: Annotated[dict[RelativePath, str], Rule(noun="relative paths to file contents",
                                                   doc="trusted test files, written after the solution ran")] = \
        field(default_factory=dict)
    solution_timeout_s: Annotated[Seconds, Rule(doc="default: a third of the env's timeout, at most 10 s")] = None
    test_timeout_s: Annotated[Seconds, Rule(doc="default: the rest, shared by the tests, at least 2 s each")] = None


def check_config(spec: EnvSpec) -> Problems:
    """Test names are unique."""
    problems, names = [], set()
    for i, test in enumerate(spec.verifier["tests"]):
        if test["name"] in names:
            problems.append((f"verifier.tests[{i}].name", f"must be unique, {test['name']!r} is used twice"))
        names.add(test["name"])
    return problems


def _argv(cmd) -> list[str]:
    if isinstance(cmd, str):
        return shlex.split(cmd)
    if isinstance(cmd, list) and all(isinstance(a, str) for a in cmd):
        return list(cmd)
    raise ValueError(f"got {type(cmd).__name__}")


def extract_solution(completion: str) -> str:
    """The solution from a completion: the last fenced block if there is one, else the whole text.

    >>> extract_solution("I will fix it:\\n```bash\\nsed -i s/a/b/ f.txt\\n```\\nDone.")
    'sed -i s/a/b/ f.txt\\n'
    """
    blocks = FENCE.findall(completion)
    return blocks[-1] if blocks else completion


def timeouts(spec: EnvSpec, cfg: SandboxConfig) -> tuple[float, float, float]:
    """(whole execution, solution phase, each test) deadlines in seconds."""
    total = min(spec.limits.timeout_s, cfg.timeout_s)
    config = spec.verifier
    solution = float(config.get("solution_timeout_s", min(total / 3, 10.0)))
    share = (total - solution) / max(1, len(config["tests"]))
    test = float(config.get("test_timeout_s", min(total, max(MIN_TEST_TIMEOUT_S, share))))
    return total, solution, test


def build_execution(spec: EnvSpec, solution: str, cfg: SandboxConfig, nonce: str) -> Execution:
    """The workspace (plus the solution file, if any); the driver gets the script and tests on stdin, no answers."""
    config = spec.verifier
    total, solution_s, test_s = timeouts(spec, cfg)
    files = dict(spec.workspace)
    script = solution
    if config.get("solution_file"):
        files[config["solution_file"]] = solution
        script = None
    env = dict(TEST_ENV)
    if spec.runtime == "node":
        env["NODE_OPTIONS"] = f"--max-old-space-size={min(spec.limits.memory_mb, cfg.memory_mb)}"
    request = {"nonce": nonce, "solution": script, "solution_timeout_s": solution_s, "test_timeout_s": test_s,
               "files": dict(config.get("files", {})), "env": env,
               "tests": [{"name": t["name"], "argv": _argv(t["cmd"])} for t in config["tests"]]}
    return Execution(files=files, command=list(COMMAND), timeout_s=total,
                     memory_mb=min(spec.limits.memory_mb, cfg.memory_mb), runtime=spec.runtime,
                     max_output_bytes=cfg.max_output_bytes, stdin=json.dumps(request))


def _normalize(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip().splitlines())


def score(spec: EnvSpec, result: ExecutionResult, nonce: str) -> Verdict:
    """Each test passes iff the driver saw the expected exit code (and stdout, when the spec gives one)."""
    tests = spec.verifier["tests"]
    total = len(tests)
    if result.infra_error:
        return Verdict.infra(result, total)
    records = harness_records(result.stdout, nonce)
    syntax = next((r for r in records if r.get("phase") == "syntax"), None)
    compiled = syntax is None or syntax.get("ok") is True
    outcomes: dict[int, dict] = {}
    for record in records:
        index = record.get("test")
        if type(index) is int and 0 <= index < total:
            outcomes.setdefault(index, record)
    passed, failures = 0, []
    for index, test in enumerate(tests):
        record = outcomes.get(index)
        want_exit = test.get("exit_code", 0)
        if record is None:
            failures.append(f"{test['name']}: no result")
        elif record.get("timed_out"):
            failures.append(f"{test['name']}: timed out")
        elif record.get("exit") != want_exit:
            tail = str(record.get("stderr", "")).strip().splitlines()[-1:] or [""]
            failures.append(f"{test['name']}: exit code {record.get('exit')} (want {want_exit}) {tail[0][:100]}")
        elif "stdout" in test and _normalize(str(record.get("stdout", ""))) != _normalize(test["stdout"]):
            failures.append(f"{test['name']}: printed {clip(json.dumps(str(record.get('stdout', ''))))}, "
                            f"expected {clip(json.dumps(test['stdout']))}")
        else:
            passed += 1
    if not compiled:
        detail = f"solution script does not parse: {str(syntax.get('error', ''))[:160]}"
    elif not records:
        how = "timed out" if result.timed_out else f"exit code {result.exit_code}"
        detail = f"no driver output ({how}): {result.stderr.strip()[-160:]}"
    else:
        detail = f"{passed}/{total} tests passed" + (" (timed out)" if result.timed_out else "")
        detail += f"; {failures[0]}" if failures else ""
    return Verdict(reward=passed / total, passed=passed == total, compiled=compiled, tests_passed=passed,
                   tests_total=total, exit_code=result.exit_code, timed_out=result.timed_out, detail=detail,
                   sandbox_ms=result.start_ms + result.run_ms)


VERIFIER = Verifier(kind="workspace_tests", config=WorkspaceTestsConfig, extract_solution=extract_solution,
                    build_execution=build_execution, score=score, probes=probes, mutants=mutants,
                    check_config=check_config, test_sources=test_sources, vacuous_tests=vacuous_tests,
                    agent_only=agent_only, own_files=own_files, solution_language=solution_language)
validate = VERIFIER.validate

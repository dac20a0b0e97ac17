"""The ``workspace_tests`` verifier: a solution changes a workspace, then trusted tests check the final workspace.

The env's ``workspace`` files are written and its ``setup`` script, if any, runs (e.g. it builds a git repository
from a shipped stream; a setup that fails is infra: the env's fault, never the solution's); then the solution is
applied: either a bash script run in the workspace (agent envs; later the final workspace of an agent episode) or,
with ``solution_file``, the solution text written to that file (single-turn envs: "write ``src/slug.js``"). Only
*after* the solution finished (and every process it left behind was killed) does each test command run. The trusted
test files are ``Execution.trusted_files``: read-only on every backend, in a directory with a random name under the
unlistable ``/trusted``, so the solution neither finds nor changes them. Everything happens in one sandbox execution
under a small trusted driver (``workspace_driver.py``, passed as ``python3 -I -c``, never a workspace file). The host
decides: a test passes iff it exited with the expected code within its deadline and, when the spec gives
``stdout``, printed exactly that (trailing whitespace ignored). Expected outputs never enter the sandbox.

Spec config::

    verifier:
      kind: workspace_tests
      solution_file: src/slug.js     # optional: the solution is this file's content; else a bash edit script
      files:                         # trusted test files (relative paths), read-only, hidden from the solution
        check.py: |
          import json, sys
          sys.path.append("/work/src")   # append, never insert: stdlib modules cannot be shadowed
          from stats import median
          print(json.dumps(median([3, 1, 2])))
      tests:                         # one process each, cwd /work; {tests} is the trusted files' directory
        - {name: median_odd, cmd: "python3 -I {tests}/check.py", stdout: "2"}
        - {name: config_ok, cmd: "bash {tests}/check_config.sh", exit_code: 0}
        - {name: mean_kept, cmd: "python3 -I {tests}/check_mean.py", stdout: "2", guard: true}
      solution_timeout_s: 5          # optional (default: a third of the env's timeout, at most 10 s)
      test_timeout_s: 5              # optional (default: the rest of the timeout shared by the tests, >= 2 s)

Reward: the fraction of the *target* tests (those without ``guard: true``) that pass, and 0 if any *guard* test
fails; ``passed`` iff every test passes. A guard is behaviour the untouched workspace already has and the solution
must keep (SWE-bench's PASS_TO_PASS; the targets are its FAIL_TO_PASS): crediting it would pay for doing nothing,
and breaking it is a regression, not partial progress. Admission checks the labels against the untouched workspace
(``workspace_admission.test_labels``, read off the ``untouched workspace`` probe's per-test ``Verdict.failures``): each
guard passes there, each target fails. A spec whose tests are all guards is invalid. Signals (``SIGNALS``, for reward
layers): ``tests`` over the targets and ``guards`` over the guards; the reward is ``tests`` gated on ``guards``.

Strength: a test with ``stdout`` is a value comparison decided on the host; an exit-code-only test that runs
workspace code can be passed by code that exits 0 early, so use those only for checks that run trusted code
(reading a config file). The solution and the tests share one sandbox, one after the other: once the solution phase
ends, the driver SIGKILLs every other process of the sandbox at once (``kill(-1)`` as the sandbox's pid 1, or in a
Docker container as the program uid the host leased for it, never root) and reaps them all before the first test
starts, so nothing of the solution runs beside a test; it does the same after each test. The seccomp policy refuses
``ptrace`` and changing another process's rlimits or priority, and the driver starts every test with the limits it
was itself started with. The driver is non-dumpable and, on bwrap, the sandbox's pid 1. The test files cannot be
written by any process of the program's uid, and the solution phase never learns their directory. Code under test
sees that directory's name in its test's argv, so it may read the tests.

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
import secrets
from dataclasses import replace

from posttrain import trusted
from posttrain.config import SandboxConfig
from posttrain.envs.spec import EnvSpec
from posttrain.envs.verifiers.base import (Problems, Verdict, Verifier, first_record_per_index, harness_records,
                                          sandbox_fields)
from posttrain.envs.verifiers.typed_config import clip, parse
from posttrain.envs.verifiers.workspace_admission import (agent_only, mutants, own_files, probes, solution_language,
                                                          test_labels, test_sources, vacuous_tests)
from posttrain.envs.verifiers.workspace_config import WorkspaceTest, WorkspaceTestsConfig, command_argv
from posttrain.sandbox.base import Execution, ExecutionResult
from posttrain.sandbox.workspace import TRUSTED_DIR, node_heap_mb

DRIVER = trusted.source("workspace_driver")
COMMAND = ["python3", "-I", "-c", DRIVER]
TEST_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
FENCE = re.compile(r"```[\w+-]*[ \t]*\n(.*?)```", re.DOTALL)


def check_config(spec: EnvSpec) -> Problems:
    """Test names are unique, and not every test is a guard (the reward would always be 0)."""
    problems, names = [], set()
    tests = parse(WorkspaceTestsConfig, spec.verifier).tests
    for i, test in enumerate(tests):
        if test.name in names:
            problems.append((f"verifier.tests[{i}].name", f"must be unique, {test.name!r} is used twice"))
        names.add(test.name)
    if all(test.guard for test in tests):
        problems.append(("verifier.tests", f"all {len(tests)} tests have guard: true; at least one must be a target "
                                           "(no guard) that the untouched workspace fails, or nothing earns reward"))
    return problems


def reward(passed: list[bool], guards: list[bool]) -> float:
    """The fraction of the target (non-guard) tests passed, 0 if a guard test failed; without guards, the fraction
    of all tests. ``passed[i]`` / ``guards[i]``: test ``i`` passed / is a guard.

    >>> reward([True, True, False], [True, False, False]), reward([False, True, True], [True, False, False])
    (0.5, 0.0)
    >>> reward([True, False], [False, False])
    0.5
    """
    if any(guard and not ok for ok, guard in zip(passed, guards)):
        return 0.0
    targets = [ok for ok, guard in zip(passed, guards) if not guard]
    return sum(targets) / len(targets) if targets else float(all(passed))


SIGNALS = {
    "tests": "the fraction of the target tests (no guard) passed",
    "guards": "the fraction of the guard tests passed; the kind's own reward is tests gated on guards reaching 1",
}


def signals(passed: list[bool], guards: list[bool]) -> dict[str, float]:
    """The verdict's signals (``SIGNALS``): ``tests`` over the targets, ``guards`` over the guards (when there are
    any); arguments as for ``reward``.

    >>> signals([True, True, False], [True, False, False]), signals([True, False], [False, False])
    ({'tests': 0.5, 'guards': 1.0}, {'tests': 0.5})
    """
    targets = [ok for ok, guard in zip(passed, guards) if not guard]
    kept = [ok for ok, guard in zip(passed, guards) if guard]
    return {"tests": sum(targets) / len(targets), **({"guards": sum(kept) / len(kept)} if kept else {})}


def unmeasured(spec: EnvSpec) -> dict[str, str]:
    """``guards`` of a valid spec none of whose tests is a guard."""
    guarded = any(test.guard for test in parse(WorkspaceTestsConfig, spec.verifier).tests)
    return {} if guarded else {"guards": "no test has guard: true"}


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
    return total, *parse(WorkspaceTestsConfig, spec.verifier).deadlines(total)


def build_execution(spec: EnvSpec, solution: str, cfg: SandboxConfig, nonce: str) -> Execution:
    """The workspace (plus the solution file, if any); the driver gets the script and tests on stdin, no answers."""
    config = parse(WorkspaceTestsConfig, spec.verifier)
    total, solution_s, test_s = timeouts(spec, cfg)
    files = dict(spec.workspace)
    script = solution
    if config.solution_file:
        files[config.solution_file] = solution
        script = None
    env = dict(TEST_ENV)
    if spec.runtime == "node":
        env["NODE_OPTIONS"] = f"--max-old-space-size={node_heap_mb(min(spec.limits.memory_mb, cfg.memory_mb))}"
    hidden = secrets.token_hex(16)  # /trusted cannot be listed: without this name the solution cannot find the tests
    request = {"nonce": nonce, "setup": spec.setup or None, "solution": script, "solution_timeout_s": solution_s,
               "test_timeout_s": test_s, "tests_dir": f"{TRUSTED_DIR}/{hidden}", "env": env,
               "tests": [{"name": t.name, "argv": command_argv(t.cmd)} for t in config.tests]}
    return Execution(files=files, command=list(COMMAND), timeout_s=total,
                     memory_mb=min(spec.limits.memory_mb, cfg.memory_mb), runtime=spec.runtime,
                     max_output_bytes=cfg.max_output_bytes, stdin=json.dumps(request),
                     trusted_files={f"{hidden}/{name}": text for name, text in config.files.items()})


def _normalize(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip().splitlines())


def _failure(test: WorkspaceTest, record: dict | None) -> str:
    """Why ``test`` failed given the driver's record of it, or "" if it passed."""
    if record is None:
        return f"{test.name}: no result"
    if record.get("timed_out"):
        return f"{test.name}: timed out"
    if record.get("exit") != test.exit_code:
        tail = str(record.get("stderr", "")).strip().splitlines()[-1:] or [""]
        return f"{test.name}: exit code {record.get('exit')} (want {test.exit_code}) {tail[0][:100]}"
    if test.stdout is not None and _normalize(str(record.get("stdout", ""))) != _normalize(test.stdout):
        return (f"{test.name}: printed {clip(json.dumps(str(record.get('stdout', ''))))}, "
                f"expected {clip(json.dumps(test.stdout))}")
    return ""


def _setup_failure(record: dict | None) -> str:
    """Why the env's setup failed given the driver's record of it (written before the solution started, so the
    first one is the driver's), or "" if it succeeded."""
    if record is None:
        return "no record of the setup phase"
    if record.get("timed_out") or record.get("exit") != 0 or record.get("ended") is not True:
        how = "timed out" if record.get("timed_out") else f"exit code {record.get('exit')}"
        return f"{how}: {str(record.get('error', '')).strip()[-200:]}"
    return ""


def score(spec: EnvSpec, result: ExecutionResult, nonce: str) -> Verdict:
    """Each test passes iff the driver saw the expected exit code (and stdout, when the spec gives one); the reward
    is ``reward`` of those outcomes."""
    tests = parse(WorkspaceTestsConfig, spec.verifier).tests
    total = len(tests)
    if result.infra_error:
        return Verdict.infra(result, total)
    records = harness_records(result.stdout, nonce)
    phases = {r.get("phase"): r for r in reversed(records) if "phase" in r}  # the first record of each phase
    if "refused" in phases:  # the backend ran the driver where kill(-1) could reach more than the sandbox
        return Verdict.infra(replace(result, infra_error=f"workspace driver: {phases['refused'].get('error')}"), total)
    if spec.setup and (setup_failure := _setup_failure(phases.get("setup"))):  # before the solution ran: the env's
        return Verdict.infra(replace(result, infra_error=f"workspace setup failed: {setup_failure}"), total)
    syntax = phases.get("syntax")
    compiled = syntax is None or syntax.get("ok") is True
    # the tests ran on what the solution had done by then: a deadline hit (on a loaded machine, of the load as much
    # as of the solution: ``Verdict.hit_deadline``, which admission re-runs), never a plain failure of its work
    solution_stopped = phases.get("solution", {}).get("timed_out") is True
    outcomes = first_record_per_index(records, "test", total)
    why = [_failure(test, outcomes.get(index)) for index, test in enumerate(tests)]
    ok = [not failure for failure in why]
    passed = sum(ok)
    failures = [f"guard {failure}" for failure, test in zip(why, tests) if failure and test.guard]  # reward 0: first
    failures += [failure for failure, test in zip(why, tests) if failure and not test.guard]
    if not compiled:
        detail = f"solution script does not parse: {str(syntax.get('error', ''))[:160]}"
    elif phases.get("solution", {}).get("ended") is False:
        detail = "processes the solution left could not be ended: no test ran"
    elif not records:
        how = "timed out" if result.timed_out else f"exit code {result.exit_code}"
        detail = f"no driver output ({how}): {result.stderr.strip()[-160:]}"
    else:
        detail = f"{passed}/{total} tests passed" + (" (timed out)" if result.timed_out else "")
        detail += " (the solution was stopped at its deadline)" if solution_stopped else ""
        detail += f"; {failures[0]}" if failures else ""
    guards = [test.guard for test in tests]
    return Verdict(reward=reward(ok, guards), passed=passed == total, compiled=compiled,
                   tests_passed=passed, tests_total=total, exit_code=result.exit_code,
                   timed_out=result.timed_out or solution_stopped,
                   tests_timed_out=sum(1 for record in outcomes.values() if record.get("timed_out")),
                   detail=detail, failures=tuple(why), signals=signals(ok, guards), **sandbox_fields(result))


VERIFIER = Verifier(kind="workspace_tests", config=WorkspaceTestsConfig, extract_solution=extract_solution,
                    build_execution=build_execution, score=score, probes=probes, mutants=mutants,
                    check_config=check_config, test_sources=test_sources, vacuous_tests=vacuous_tests,
                    test_labels=test_labels, runs_setup=True,
                    agent_only=agent_only, own_files=own_files, solution_language=solution_language,
                    signals=SIGNALS, unmeasured=unmeasured)
validate = VERIFIER.validate

"""The ``python_asserts`` verifier: run assert-style tests (MBPP ``test_list``, HumanEval ``check``) one by one.

Spec config::

    verifier:
      kind: python_asserts
      asserts: ["assert f(1) == 2", ...]   # each a test: statements ending in (or containing) an assert
      setup: "import math\\n"               # optional: run before every test (trusted test setup code)
      plain_values: true                    # optional (default true): the entry point may return only plain data
      complete_prompt: false                # optional: as for python_tests
      test_timeout_s: 5                     # optional: per test (default: the env's timeout, at most 5 s)

The trusted harness (``python_asserts_harness.py``) evaluates every assert in its own process, which never runs the
solution: the entry point and the solution's other functions the assert names are proxies to a fresh worker
process per assert that loaded the solution, and only plain data crosses between them (see the harness docstring).
The host reads the parent's nonce-prefixed ``{"test": i, "ok": ...}`` lines. So a solution can pass an assert only
by returning values that satisfy it: patching modules, walking frames or exiting early reach nothing that decides.
The expected values still sit in the sandbox (in the parent's memory, out of the worker's reach), where
``python_tests`` keeps them on the host; the importer turns ``assert f(x) == y`` asserts with literal values into
``python_tests`` cases whenever it can. ``plain_values: false`` lets the entry point return instances of subclasses
of the plain types (a ``namedtuple``, a ``Counter``), which then cross as their base type.

Example:
    >>> from posttrain.config import SandboxConfig
    >>> from posttrain.envs.spec import EnvSpec
    >>> from posttrain.sandbox.base import ExecutionResult
    >>> spec = EnvSpec(id="t/inc", prompt="# inc(x)\\n", entry_point="inc", reference="",
    ...                verifier={"kind": "python_asserts", "asserts": ["assert inc(1) == 2"]})
    >>> validate(spec)
    []
    >>> ex = build_execution(spec, "def inc(x):\\n    return x + 1\\n", SandboxConfig(), "N")
    >>> sorted(ex.files), ex.command
    (['asserts_harness.py', 'solution.py'], ['python3', '-I', 'asserts_harness.py'])
    >>> score(spec, ExecutionResult(exit_code=0, stdout='N {"compiled": true}\\nN {"test": 0, "ok": true}\\n'),
    ...       "N").passed
    True
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from typing import Annotated, Literal

from posttrain import trusted
from posttrain.config import SandboxConfig
from posttrain.envs.spec import EnvSpec
from posttrain.envs.verifiers import python_common
from posttrain.envs.verifiers.base import TrustedSource, Verdict, Verifier, first_record_per_index, harness_records
from posttrain.envs.verifiers.python_tests import extract_solution
from posttrain.envs.verifiers.typed_config import Rule, parse
from posttrain.sandbox.base import Execution, ExecutionResult

HARNESS = trusted.source("python_asserts_harness")
HARNESS_FILE, SOLUTION_FILE = "asserts_harness.py", "solution.py"
OWN_FILES = frozenset({HARNESS_FILE, SOLUTION_FILE})  # written by the verifier: reserved in the workspace
COMMAND = ["python3", "-I", HARNESS_FILE]
MAX_ASSERTS = 100


def _snippet_problem(code: str) -> str:
    try:
        has_assert = any(isinstance(node, ast.Assert) for node in ast.walk(ast.parse(code)))
    except SyntaxError as error:
        return f"does not parse: {error.msg} (line {error.lineno})"
    return "" if has_assert else "contains no assert statement"


def _setup_problem(code: str) -> str:
    try:
        ast.parse(code)
    except SyntaxError as error:
        return f"does not parse: {error.msg} (line {error.lineno})"
    return ""


PythonCode = Annotated[str, Rule(noun="string of Python code")]


@dataclass
class PythonAssertsConfig:
    """The ``verifier:`` mapping of a ``python_asserts`` env."""

    kind: Literal["python_asserts"]
    asserts: Annotated[list[Annotated[PythonCode, Rule(check=_snippet_problem)]],
                       Rule(min_len=1, max_len=MAX_ASSERTS, noun="test snippets",
                            doc="one test per item: Python statements containing an assert")]
    setup: Annotated[PythonCode, Rule(check=_setup_problem, doc="trusted Python run before every test")] = ""
    plain_values: Annotated[bool, Rule(doc="the entry point may only return plain data (refuses always-equal "
                                           "objects)")] = True
    complete_prompt: python_common.CompletePrompt = False
    test_timeout_s: Annotated[float, Rule(low=0, open_low=True, high=60,
                                          doc="per test (default: the env's timeout, at most 5 s)")] = None

    def test_deadline(self, timeout_s: float) -> float:
        """Seconds per test: ``test_timeout_s``, else the env's ``timeout_s`` capped at 5 s."""
        return float(min(timeout_s, 5.0) if self.test_timeout_s is None else self.test_timeout_s)


PROGRAMS = python_common.Programs(PythonAssertsConfig)  # the programs it runs (complete_prompt)


def build_execution(spec: EnvSpec, solution: str, cfg: SandboxConfig, nonce: str) -> Execution:
    """Harness + solution (+ workspace); the request carries the tests (asserts have no hidden answers)."""
    timeout = min(spec.limits.timeout_s, cfg.timeout_s)
    config = parse(PythonAssertsConfig, spec.verifier)
    request = {"nonce": nonce, "entry_point": spec.entry_point, "setup": config.setup, "tests": config.asserts,
               "plain_values": config.plain_values, "test_timeout_s": config.test_deadline(timeout)}
    return Execution(
        files={**spec.workspace, HARNESS_FILE: HARNESS, SOLUTION_FILE: PROGRAMS.program_for(spec, solution)},
        command=list(COMMAND), timeout_s=timeout, memory_mb=min(spec.limits.memory_mb, cfg.memory_mb),
        runtime=spec.runtime, max_output_bytes=cfg.max_output_bytes, stdin=json.dumps(request))


def score(spec: EnvSpec, result: ExecutionResult, nonce: str) -> Verdict:
    """Count the tests the harness's parent process reported as run to the end without a failed assert."""
    total = len(parse(PythonAssertsConfig, spec.verifier).asserts)
    if result.infra_error:
        return Verdict.infra(result, total)
    records = harness_records(result.stdout, nonce)
    status, compiled = python_common.harness_status(records)
    outcomes = first_record_per_index(records, "test", total)
    passed = sum(1 for i in range(total) if outcomes.get(i, {}).get("ok") is True)
    failures = [f"test {i}: {str(outcomes[i].get('error', 'failed'))[:120]}" if i in outcomes else
                f"test {i}: no result" for i in range(total) if outcomes.get(i, {}).get("ok") is not True]
    detail = python_common.unjudged_detail(status, compiled, result)
    if not detail:
        detail = f"{passed}/{total} asserts passed" + (" (timed out)" if result.timed_out else "")
        detail += f"; {failures[0]}" if failures else ""
    deadlines = sum(1 for outcome in outcomes.values() if outcome.get("ok") is not True
                    and outcome.get("error") == "timed out")  # the harness's own per-test deadline
    return python_common.counted_verdict(result, passed, total, compiled, detail, tests_timed_out=deadlines)


def test_sources(spec: EnvSpec) -> list[TrustedSource]:
    """The asserts and the setup code (Python), from the raw mapping: admission may ask about an invalid config."""
    config = spec.verifier
    out = [TrustedSource(f"verifier.asserts[{i}]", a, "python") for i, a in enumerate(config.get("asserts", []))
           if isinstance(a, str)]
    return out + ([TrustedSource("verifier.setup", config["setup"], "python")] if isinstance(config.get("setup"), str)
                  else [])


def entry_point_names(spec: EnvSpec) -> tuple[str, ...]:
    """The entry point's own name, and ``candidate``: the harness binds both (HumanEval's ``check(candidate)``)."""
    return (spec.entry_point, "candidate") if spec.entry_point else ("candidate",)


VERIFIER = Verifier(kind="python_asserts", config=PythonAssertsConfig, extract_solution=extract_solution,
                    build_execution=build_execution, score=score, probes=python_common.python_probes,
                    mutants=PROGRAMS.mutants,
                    check_spec=python_common.spec_checks("python_asserts", OWN_FILES), own_files=lambda spec: OWN_FILES,
                    test_sources=test_sources, reference_program=PROGRAMS.reference_program,
                    entry_point_names=entry_point_names, signals=python_common.SIGNALS,
                    on_demand={"lint": PROGRAMS.lint})
validate = VERIFIER.validate

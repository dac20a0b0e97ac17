"""The ``python_asserts`` verifier: run assert-style tests (MBPP ``test_list``, HumanEval ``check``) one by one.

Spec config::

    verifier:
      kind: python_asserts
      asserts: ["assert f(1) == 2", ...]   # each a test: statements ending in (or containing) an assert
      setup: "import math\\n"               # optional: run before every test (trusted test setup code)
      plain_values: true                    # optional (default true): the entry point may return only plain data
      complete_prompt: false                # optional: as for python_tests
      test_timeout_s: 5                     # optional: per test (default: the env's timeout, at most 5 s)

The trusted harness (``python_asserts_harness.py``) forks one child per assert; the host reads the parent's
nonce-prefixed ``{"test": i, "ok": ...}`` lines, and a test counts only if the child ran it to the end (see the
harness docstring). This is weaker than ``python_tests``: the program under test runs in the same process as the
assert, so a deliberate attack (monkeypatching a module the assert uses) can still pass it. The importer converts
``assert f(x) == y`` asserts with literal values into ``python_tests`` cases whenever it can for that reason.

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
    >>> score(spec, ExecutionResult(exit_code=0, stdout='N {"compiled": true}\\nN {"test": 0, "ok": true}\\n'), "N").passed
    True
"""

from __future__ import annotations

import ast
import json
import keyword
from pathlib import Path

from posttrain.config import SandboxConfig
from posttrain.envs.spec import EnvSpec
from posttrain.envs.verifiers import python_common
from posttrain.envs.verifiers.base import Problems, Verdict, Verifier, harness_records
from posttrain.envs.verifiers.python_tests import extract_solution
from posttrain.sandbox.base import Execution, ExecutionResult

HARNESS = Path(__file__).with_name("python_asserts_harness.py").read_text(encoding="utf-8")
HARNESS_FILE, SOLUTION_FILE = "asserts_harness.py", "solution.py"
COMMAND = ["python3", "-I", HARNESS_FILE]
MAX_ASSERTS = 100
KEYS = {"kind", "asserts", "setup", "plain_values", "complete_prompt", "test_timeout_s"}


def _has_assert(code: str) -> bool:
    return any(isinstance(node, ast.Assert) for node in ast.walk(ast.parse(code)))


def validate(spec: EnvSpec) -> Problems:
    """Problems with a spec's ``python_asserts`` config, as (field, reason) pairs; empty when valid."""
    problems: Problems = []
    config = spec.verifier
    if spec.runtime != "python":
        problems.append(("runtime", f"python_asserts needs runtime 'python', got {spec.runtime!r}"))
    if not (isinstance(spec.entry_point, str) and spec.entry_point.isidentifier()
            and not keyword.iskeyword(spec.entry_point)):
        problems.append(("entry_point", f"must be a Python function name, got {spec.entry_point!r}"))
    for name in sorted(set(config) - KEYS, key=str):
        problems.append((f"verifier.{name}", f"unknown key for python_asserts (allowed: {', '.join(sorted(KEYS))})"))
    for name in sorted({HARNESS_FILE, SOLUTION_FILE} & set(spec.workspace)):
        problems.append((f"workspace.{name}", "reserved for the verifier's own files"))
    for name in ("plain_values", "complete_prompt"):
        if not isinstance(config.get(name, False), bool):
            problems.append((f"verifier.{name}", "must be true or false"))
    timeout = config.get("test_timeout_s", 1)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 60:
        problems.append(("verifier.test_timeout_s", f"must be a number in (0, 60], got {timeout!r}"))
    setup = config.get("setup", "")
    if not isinstance(setup, str):
        problems.append(("verifier.setup", "must be a string of Python code"))
    else:
        try:
            ast.parse(setup)
        except SyntaxError as error:
            problems.append(("verifier.setup", f"does not parse: {error.msg} (line {error.lineno})"))
    asserts = config.get("asserts")
    if not isinstance(asserts, list) or not 1 <= len(asserts) <= MAX_ASSERTS:
        problems.append(("verifier.asserts", f"must be a list of 1..{MAX_ASSERTS} test snippets"))
        return problems
    for i, code in enumerate(asserts):
        where = f"verifier.asserts[{i}]"
        if not isinstance(code, str):
            problems.append((where, "must be a string of Python code"))
            continue
        try:
            if not _has_assert(code):
                problems.append((where, "contains no assert statement"))
        except SyntaxError as error:
            problems.append((where, f"does not parse: {error.msg} (line {error.lineno})"))
    return problems


def build_execution(spec: EnvSpec, solution: str, cfg: SandboxConfig, nonce: str) -> Execution:
    """Harness + solution (+ workspace); the request carries the tests (asserts have no hidden answers)."""
    timeout = min(spec.limits.timeout_s, cfg.timeout_s)
    config = spec.verifier
    request = {"nonce": nonce, "entry_point": spec.entry_point, "setup": config.get("setup", ""),
               "tests": list(config["asserts"]), "plain_values": config.get("plain_values", True),
               "test_timeout_s": float(config.get("test_timeout_s", min(timeout, 5.0)))}
    return Execution(
        files={**spec.workspace, HARNESS_FILE: HARNESS, SOLUTION_FILE: python_common.program_for(spec, solution)},
        command=list(COMMAND), timeout_s=timeout, memory_mb=min(spec.limits.memory_mb, cfg.memory_mb),
        runtime=spec.runtime, max_output_bytes=cfg.max_output_bytes, stdin=json.dumps(request))


def score(spec: EnvSpec, result: ExecutionResult, nonce: str) -> Verdict:
    """Count the tests the harness's parent process reported as run to the end without a failed assert."""
    total = len(spec.verifier["asserts"])
    if result.infra_error:
        return Verdict.infra(result, total)
    records = harness_records(result.stdout, nonce)
    status, compiled = python_common.harness_status(records)
    outcomes: dict[int, dict] = {}
    for record in records:
        index = record.get("test")
        if type(index) is int and 0 <= index < total:
            outcomes.setdefault(index, record)
    passed = sum(1 for i in range(total) if outcomes.get(i, {}).get("ok") is True)
    failures = [f"test {i}: {str(outcomes[i].get('error', 'failed'))[:120]}" if i in outcomes else
                f"test {i}: no result" for i in range(total) if outcomes.get(i, {}).get("ok") is not True]
    detail = python_common.unjudged_detail(status, compiled, result)
    if not detail:
        detail = f"{passed}/{total} asserts passed" + (" (timed out)" if result.timed_out else "")
        detail += f"; {failures[0]}" if failures else ""
    return python_common.counted_verdict(result, passed, total, compiled, detail)


def probes(spec: EnvSpec) -> dict[str, str]:
    """The Python cheat battery (``always-equal object`` matters most here)."""
    return python_common.python_probes(spec)


def mutants(spec: EnvSpec) -> list[str]:
    return python_common.python_mutants(spec)


CONFIG_SCHEMA = {
    "type": "object",
    "required": ["kind", "asserts"],
    "additionalProperties": False,
    "properties": {
        "kind": {"const": "python_asserts"},
        "asserts": {"type": "array", "minItems": 1, "maxItems": MAX_ASSERTS, "items": {"type": "string"},
                    "description": "one test per item: Python statements containing an assert"},
        "setup": {"type": "string", "description": "trusted Python run before every test"},
        "plain_values": {"type": "boolean", "description": "the entry point may only return plain data"},
        "complete_prompt": {"type": "boolean"},
        "test_timeout_s": {"type": "number", "exclusiveMinimum": 0, "maximum": 60},
    },
}

VERIFIER = Verifier(kind="python_asserts", validate=validate, extract_solution=extract_solution,
                    build_execution=build_execution, score=score, probes=probes, mutants=mutants,
                    config_schema=CONFIG_SCHEMA)

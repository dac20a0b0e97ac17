"""The ``python_tests`` verifier: call the solution's entry point on each case's args and compare return values.

Spec config: ``verifier: {kind: python_tests, cases: [{args: [...], expected: ...}, ...]}`` plus ``entry_point``;
optional ``complete_prompt: true`` runs ``prompt + solution`` when the solution does not define the entry point
(HumanEval-style prompts that end in a signature and docstring; see ``python_common.program_for``).
The sandbox runs the trusted ``harness.py`` (``python_harness.py``), which reports each *returned value* (or the
exception type) on a nonce-prefixed line; the expected values stay on the host and ``score`` compares them here.
A solution that exits early, crashes or prints look-alike lines earns nothing for the cases it did not answer.
For admission, ``probes`` gives the cheat battery and ``mutants`` the AST mutants of the reference
(``python_common``).

Example:
    >>> from posttrain.config import SandboxConfig
    >>> from posttrain.envs.spec import EnvSpec
    >>> from posttrain.sandbox.base import ExecutionResult
    >>> spec = EnvSpec(id="demo/add_1", prompt="# add_1(x)\\n", entry_point="add_1", reference="",
    ...                verifier={"kind": "python_tests", "cases": [{"args": [1], "expected": 2}]})
    >>> ex = build_execution(spec, "def add_1(x):\\n    return x + 1\\n", SandboxConfig(), "N0NCE")
    >>> sorted(ex.files), "expected" in ex.stdin
    (['harness.py', 'solution.py'], False)
    >>> out = 'N0NCE {"compiled": true}\\nN0NCE {"case": 0, "value": 2}\\n'
    >>> score(spec, ExecutionResult(exit_code=0, stdout=out), "N0NCE").reward
    1.0
"""

from __future__ import annotations

import json
import keyword
import math
from pathlib import Path

from posttrain.config import SandboxConfig
from posttrain.envs.spec import EnvSpec
from posttrain.envs.verifiers import python_common
from posttrain.envs.verifiers.base import Problems, Verdict, Verifier, harness_records
from posttrain.sandbox.base import Execution, ExecutionResult

HARNESS = (Path(__file__).with_name("python_harness.py")).read_text(encoding="utf-8")
HARNESS_FILE, SOLUTION_FILE = "harness.py", "solution.py"
COMMAND = ["python3", "-I", HARNESS_FILE]
MAX_CASES = 100
FENCE = "```"


def extract_solution(completion: str) -> str:
    """The program to run from a model completion, which is raw Python code written after the prompt.

    Only fences are handled: a leading fence line (```` ```python ````) is dropped, and everything from the next
    ```` ``` ```` on is cut. Anything else is kept verbatim (a syntax error is the solution's problem).

    >>> extract_solution("def f(x):\\n    return x\\n```\\nSome prose")
    'def f(x):\\n    return x\\n'
    >>> extract_solution("```python\\ndef f(x):\\n    return x\\n```")
    'def f(x):\\n    return x\\n'
    """
    text = completion
    if text.lstrip().startswith(FENCE):
        text = text.lstrip().partition("\n")[2]
    return text.split(FENCE, 1)[0]


def validate(spec: EnvSpec) -> Problems:
    """Problems with a spec's ``python_tests`` config, as (field, reason) pairs; empty when valid."""
    problems: Problems = []
    if spec.runtime != "python":
        problems.append(("runtime", f"python_tests needs runtime 'python', got {spec.runtime!r}"))
    if not (isinstance(spec.entry_point, str) and spec.entry_point.isidentifier()
            and not keyword.iskeyword(spec.entry_point)):
        problems.append(("entry_point", f"must be a Python function name, got {spec.entry_point!r}"))
    for name in sorted(set(spec.verifier) - {"kind", "cases", "complete_prompt"}, key=str):
        problems.append((f"verifier.{name}", "unknown key for python_tests (allowed: kind, cases, complete_prompt)"))
    if not isinstance(spec.verifier.get("complete_prompt", False), bool):
        problems.append(("verifier.complete_prompt", "must be true or false"))
    for name in sorted({HARNESS_FILE, SOLUTION_FILE} & set(spec.workspace)):
        problems.append((f"workspace.{name}", "reserved for the verifier's own files"))
    cases = spec.verifier.get("cases")
    if not isinstance(cases, list) or not 1 <= len(cases) <= MAX_CASES:
        problems.append(("verifier.cases", f"must be a list of 1..{MAX_CASES} cases"))
        return problems
    for i, case in enumerate(cases):
        where = f"verifier.cases[{i}]"
        if not isinstance(case, dict) or set(case) != {"args", "expected"}:
            problems.append((where, "must be a mapping with exactly the keys 'args' and 'expected'"))
        elif not isinstance(case["args"], list):
            problems.append((f"{where}.args", f"must be a list, got {type(case['args']).__name__}"))
        else:
            try:
                json.dumps(case, allow_nan=False)
            except (TypeError, ValueError) as error:
                problems.append((where, f"args and expected must be plain JSON values ({error})"))
    return problems


def build_execution(spec: EnvSpec, solution: str, cfg: SandboxConfig, nonce: str) -> Execution:
    """The sandbox run for one solution: harness + solution (+ workspace); the request carries args only."""
    request = {"nonce": nonce, "entry_point": spec.entry_point,
               "cases": [case["args"] for case in spec.verifier["cases"]]}
    return Execution(
        files={**spec.workspace, HARNESS_FILE: HARNESS, SOLUTION_FILE: python_common.program_for(spec, solution)},
        command=list(COMMAND),
        timeout_s=min(spec.limits.timeout_s, cfg.timeout_s),
        memory_mb=min(spec.limits.memory_mb, cfg.memory_mb),
        runtime=spec.runtime,
        max_output_bytes=cfg.max_output_bytes,
        stdin=json.dumps(request),
    )


def same_value(got, want) -> bool:
    """JSON-value equality: bools only equal bools, ints and floats compare numerically (floats with isclose).

    >>> same_value(2.0, 2), same_value(True, 1), same_value([1, None], [1, None])
    (True, False, True)
    """
    if isinstance(got, bool) or isinstance(want, bool):
        return type(got) is type(want) and got == want
    if isinstance(got, (int, float)) and isinstance(want, (int, float)):
        try:
            return got == want or math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12)
        except OverflowError:  # an int too large for a float is not close to anything it is not equal to
            return False
    if isinstance(got, list) and isinstance(want, list):
        return len(got) == len(want) and all(same_value(g, w) for g, w in zip(got, want))
    if isinstance(got, dict) and isinstance(want, dict):
        return got.keys() == want.keys() and all(same_value(got[k], want[k]) for k in want)
    return type(got) is type(want) and got == want


def _short(value) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def score(spec: EnvSpec, result: ExecutionResult, nonce: str) -> Verdict:
    """Compare the values the harness reported (lines prefixed with ``nonce``) with the spec's expected values."""
    cases = spec.verifier["cases"]
    total = len(cases)
    if result.infra_error:
        return Verdict.infra(result, total)
    records = harness_records(result.stdout, nonce)
    status, compiled = python_common.harness_status(records)
    answers: dict[int, dict] = {}
    for record in records:
        index = record.get("case")
        if type(index) is int and 0 <= index < total:
            answers.setdefault(index, record)  # the harness's own line comes first; later look-alikes are ignored
    passed = 0
    failures = []
    for index, case in enumerate(cases):
        answer = answers.get(index)
        if answer is not None and "value" in answer and same_value(answer["value"], case["expected"]):
            passed += 1
        elif answer is None:
            failures.append(f"case {index}: no result")
        elif "value" in answer:
            failures.append(f"case {index}: {spec.entry_point}(*{_short(case['args'])}) returned "
                            f"{_short(answer['value'])}, expected {_short(case['expected'])}")
        else:
            failures.append(f"case {index}: {str(answer.get('error', 'no value'))[:80]}")
    detail = _detail(status, compiled, records, result, passed, total, failures)
    return python_common.counted_verdict(result, passed, total, compiled, detail)


def _detail(status, compiled, records, result, passed, total, failures) -> str:
    """One short line saying why the verdict is what it is."""
    unjudged = python_common.unjudged_detail(status, compiled, result)
    if unjudged:
        return unjudged
    load = next((r for r in records if r.get("loaded") is False), None)
    if load is not None and passed == 0:
        return f"solution failed to load: {str(load.get('error', ''))[:160]}"
    head = f"{passed}/{total} cases passed" + (" (timed out)" if result.timed_out else "")
    return head if not failures else f"{head}; {failures[0]}"


def probes(spec: EnvSpec) -> dict[str, str]:
    """Degenerate and cheating programs that must fail (see ``python_common.python_probes``)."""
    return python_common.python_probes(spec)


def mutants(spec: EnvSpec) -> list[str]:
    """AST mutants of the reference program (see ``python_common.python_mutants``)."""
    return python_common.python_mutants(spec)


CONFIG_SCHEMA = {
    "type": "object",
    "required": ["kind", "cases"],
    "additionalProperties": False,
    "properties": {
        "kind": {"const": "python_tests"},
        "complete_prompt": {"type": "boolean", "description": "run prompt + solution when the solution does not "
                                                              "define the entry point"},
        "cases": {"type": "array", "minItems": 1, "maxItems": MAX_CASES, "items": {
            "type": "object", "required": ["args", "expected"], "additionalProperties": False,
            "properties": {"args": {"type": "array", "description": "positional arguments (JSON values)"},
                           "expected": {"description": "the return value, compared on the host"}}}},
    },
}

VERIFIER = Verifier(kind="python_tests", validate=validate, extract_solution=extract_solution,
                    build_execution=build_execution, score=score, probes=probes, mutants=mutants,
                    config_schema=CONFIG_SCHEMA)

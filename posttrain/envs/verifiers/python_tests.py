"""The ``python_tests`` verifier: call the solution's entry point on each case's args and compare return values.

Spec config: ``verifier: {kind: python_tests, cases: [{args: [...], expected: ...}, ...]}`` plus ``entry_point``;
optional ``complete_prompt: true`` runs ``prompt + solution`` when the solution does not define the entry point
(HumanEval-style prompts that end in a signature and docstring; see ``python_common.Programs``).
The sandbox runs the trusted ``harness.py`` (``posttrain/trusted/python_tests_harness.py``), which reports each
*returned value* (or the exception type) on a nonce-prefixed line; the expected values stay on the host and
``score`` compares them here.
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
import math
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from posttrain import trusted
from posttrain.config import SandboxConfig
from posttrain.envs.spec import EnvSpec
from posttrain.envs.verifiers import python_common
from posttrain.envs.verifiers.base import Verdict, Verifier, first_record_per_index, harness_records
from posttrain.envs.verifiers.typed_config import Rule, clip, parse
from posttrain.sandbox.base import Execution, ExecutionResult

HARNESS = trusted.source("python_tests_harness")
HARNESS_FILE, SOLUTION_FILE = "harness.py", "solution.py"
OWN_FILES = frozenset({HARNESS_FILE, SOLUTION_FILE})  # written by the verifier: reserved in the workspace
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


def _plain_json(case: dict) -> str:
    try:
        json.dumps(case, allow_nan=False)
    except (TypeError, ValueError) as error:
        return f"args and expected must be plain JSON values ({error})"
    return ""


@dataclass
class Case:
    args: Annotated[list[Any], Rule(doc="positional arguments (JSON values)")]
    expected: Annotated[Any, Rule(doc="the return value, compared on the host")]


@dataclass
class PythonTestsConfig:
    """The ``verifier:`` mapping of a ``python_tests`` env."""

    kind: Literal["python_tests"]
    cases: Annotated[list[Annotated[Case, Rule(check=_plain_json)]],
                     Rule(min_len=1, max_len=MAX_CASES, noun="cases", doc="entry_point(*args) must return expected")]
    complete_prompt: python_common.CompletePrompt = False


PROGRAMS = python_common.Programs(PythonTestsConfig)  # the programs it runs (complete_prompt)


def build_execution(spec: EnvSpec, solution: str, cfg: SandboxConfig, nonce: str) -> Execution:
    """The sandbox run for one solution: harness + solution (+ workspace); the request carries args only."""
    request = {"nonce": nonce, "entry_point": spec.entry_point,
               "cases": [case.args for case in parse(PythonTestsConfig, spec.verifier).cases]}
    return Execution(
        files={**spec.workspace, HARNESS_FILE: HARNESS, SOLUTION_FILE: PROGRAMS.program_for(spec, solution)},
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


def score(spec: EnvSpec, result: ExecutionResult, nonce: str) -> Verdict:
    """Compare the values the harness reported (lines prefixed with ``nonce``) with the spec's expected values."""
    cases = parse(PythonTestsConfig, spec.verifier).cases
    total = len(cases)
    if result.infra_error:
        return Verdict.infra(result, total)
    records = harness_records(result.stdout, nonce)
    status, compiled = python_common.harness_status(records)
    answers = first_record_per_index(records, "case", total)
    passed = 0
    failures = []
    for index, case in enumerate(cases):
        answer = answers.get(index)
        if answer is not None and "value" in answer and same_value(answer["value"], case.expected):
            passed += 1
        elif answer is None:
            failures.append(f"case {index}: no result")
        elif "value" in answer:
            failures.append(f"case {index}: {spec.entry_point}(*{clip(json.dumps(case.args), 40)}) returned "
                            f"{python_common.shown(answer['value'], 40)}, expected "
                            f"{clip(json.dumps(case.expected), 40)}")
        else:
            failures.append(f"case {index}: {python_common.shown(answer.get('error', 'no value'), 80)}")
    detail = _detail(status, compiled, records, result, passed, total, failures)
    return python_common.counted_verdict(result, passed, total, compiled, detail)


def _detail(status, compiled, records, result, passed, total, failures) -> str:
    """One short line saying why the verdict is what it is."""
    unjudged = python_common.unjudged_detail(status, compiled, result)
    if unjudged:
        return unjudged
    load = next((r for r in records if r.get("loaded") is False), None)
    if load is not None and passed == 0:
        return f"solution failed to load: {python_common.shown(load.get('error', ''), 160)}"
    head = f"{passed}/{total} cases passed" + (" (timed out)" if result.timed_out else "")
    return head if not failures else f"{head}; {failures[0]}"


VERIFIER = Verifier(kind="python_tests", config=PythonTestsConfig, extract_solution=extract_solution,
                    build_execution=build_execution, score=score, probes=python_common.python_probes,
                    mutants=PROGRAMS.mutants,
                    check_spec=python_common.spec_checks("python_tests", OWN_FILES), own_files=lambda spec: OWN_FILES,
                    reference_program=PROGRAMS.reference_program, signals=python_common.SIGNALS,
                    on_demand={"lint": PROGRAMS.lint})
validate = VERIFIER.validate

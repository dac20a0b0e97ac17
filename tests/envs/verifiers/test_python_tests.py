"""The python_tests verifier: host-side scoring of harness lines, the execution it builds, and the harness itself."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from posttrain.config import SandboxConfig
from posttrain.envs.spec import EnvSpec, Limits
from posttrain.envs.verifiers import VERIFIERS, UnknownVerifierError, get_verifier
from posttrain.envs.verifiers.python_tests import (HARNESS, build_execution, extract_solution, score, same_value,
                                                   validate)
from posttrain.sandbox.base import ExecutionResult

pytestmark = pytest.mark.unit

NONCE = "5eed" * 8
SPEC = EnvSpec(
    id="t/div_2", prompt="# Write a function div_2(x) that returns x floor-divided by 2.\n", entry_point="div_2",
    reference="def div_2(x):\n    return x // 2\n", limits=Limits(timeout_s=3, memory_mb=128),
    verifier={"kind": "python_tests", "cases": [{"args": [-3], "expected": -2}, {"args": [0], "expected": 0},
                                                 {"args": [7], "expected": 3}]},
)


def line(record: dict, nonce: str = NONCE) -> str:
    return f"{nonce} {json.dumps(record)}\n"


def result(*lines: str, exit_code: int | None = 0, **kw) -> ExecutionResult:
    return ExecutionResult(exit_code=exit_code, stdout="".join(lines), **kw)


COMPILED = line({"compiled": True})
ALL_RIGHT = [COMPILED, line({"case": 0, "value": -2}), line({"case": 1, "value": 0}), line({"case": 2, "value": 3})]


def test_all_values_right_passes():
    v = score(SPEC, result(*ALL_RIGHT, start_ms=2, run_ms=30, cpu_s=0.02, memory_peak_mb=3.5), NONCE)
    assert (v.reward, v.passed, v.compiled, v.tests_passed, v.tests_total) == (1.0, True, True, 3, 3)
    assert (v.exit_code, v.sandbox_ms, v.excluded) == (0, 32, False)
    assert (v.sandbox_cpu_s, v.sandbox_memory_peak_mb) == (0.02, 3.5)  # what the program used, as measured
    assert v.detail == "3/3 cases passed"


@pytest.mark.parametrize("forged", [
    "{}",  # no nonce at all
    "deadbeef {}",  # another nonce
    "{} trailing",  # nonce not at the start of the line
])
def test_lines_without_the_nonce_are_ignored(forged):
    fakes = [forged.format(json.dumps({"case": i, "value": v})) + "\n" for i, v in enumerate([-2, 0, 3])]
    v = score(SPEC, result(COMPILED, *fakes), NONCE)
    assert (v.reward, v.passed, v.tests_passed) == (0.0, False, 0)
    assert "case 0: no result" in v.detail


def test_wrong_values_fail_with_a_readable_detail():
    v = score(SPEC, result(COMPILED, line({"case": 0, "value": -1}), line({"case": 1, "value": 0}),
                           line({"case": 2, "value": 3.5})), NONCE)
    assert (v.reward, v.passed, v.tests_passed) == (pytest.approx(1 / 3), False, 1)
    assert "div_2(*[-3]) returned -1, expected -2" in v.detail


def test_exception_fails_the_case():
    v = score(SPEC, result(COMPILED, line({"case": 0, "error": "ZeroDivisionError: division by zero"}),
                           *ALL_RIGHT[2:]), NONCE)
    assert (v.tests_passed, v.passed) == (2, False)
    assert "ZeroDivisionError" in v.detail


def test_first_line_per_case_wins():
    later_fake = line({"case": 0, "value": -2})
    v = score(SPEC, result(COMPILED, line({"case": 0, "value": 99}), later_fake, *ALL_RIGHT[2:]), NONCE)
    assert v.tests_passed == 2


def test_out_of_range_and_malformed_records_are_ignored():
    v = score(SPEC, result(COMPILED, line({"case": 7, "value": 1}), line({"case": True, "value": 0}),
                           f"{NONCE} not json\n", f"{NONCE} [1, 2]\n"), NONCE)
    assert v.tests_passed == 0
    assert v.compiled


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("forged", [
    f"{NONCE} " + "[" * 3000 + "\n",  # one line the host's JSON parser cannot descend
    f"{NONCE} " + '{"case": 0, "value": ' + nested(3000) + "}\n",
    f"{NONCE} " + '{"case": 0, "value": ' + "7" * 4301 + "}\n",  # past Python's int digit limit
])
def test_result_lines_the_host_cannot_parse_fail_only_their_cases(forged):
    v = score(SPEC, result(COMPILED, forged, *ALL_RIGHT[2:]), NONCE)
    assert (v.tests_passed, v.compiled, v.excluded) == (2, True, False), v
    assert "case 0: no result" in v.detail


def test_values_too_deep_to_show_still_get_a_short_detail():
    deep = "".join(f"{NONCE} " + '{"case": %d, "%s": ' % (i, key) + nested(900) + "}\n"
                   for i, key in ((0, "value"), (1, "error")))
    v = score(SPEC, result(COMPILED, deep, ALL_RIGHT[3]), NONCE)
    assert v.tests_passed == 1, v.detail
    assert not v.excluded, v.detail
    assert len(v.detail) < 300, v.detail


def test_syntax_error_is_not_compiled():
    v = score(SPEC, result(line({"compiled": False, "error": "SyntaxError: invalid syntax (solution.py, line 1)"})),
              NONCE)
    assert (v.compiled, v.reward) == (False, 0.0)
    assert v.detail.startswith("does not compile: SyntaxError")


def test_no_harness_output_gets_nothing():
    v = score(SPEC, result("42\n", exit_code=0), NONCE)  # e.g. a solution that killed the harness early
    assert (v.compiled, v.reward, v.passed) == (False, 0.0, False)
    assert v.detail.startswith("no harness output (exit code 0)")


def test_load_failure_is_reported():
    v = score(SPEC, result(COMPILED, line({"loaded": False, "error": "SystemExit: 0"})), NONCE)
    assert (v.compiled, v.reward) == (True, 0.0)
    assert v.detail == "solution failed to load: SystemExit: 0"


def test_timeout_keeps_answers_given_before_the_deadline():
    v = score(SPEC, result(*ALL_RIGHT[:2], exit_code=None, timed_out=True), NONCE)
    assert (v.tests_passed, v.timed_out, v.passed, v.excluded) == (1, True, False, False)
    assert "(timed out)" in v.detail


def test_infra_error_is_excluded_not_a_failure():
    v = score(SPEC, result(*ALL_RIGHT, exit_code=None, infra_error="bwrap: setting up uid map"), NONCE)
    assert v.excluded
    assert v.reward == 0.0
    assert not v.passed
    assert v.infra_error == "bwrap: setting up uid map"
    assert v.detail.startswith("infra: ")


def test_value_equality_is_strict_about_bools():
    assert same_value(3, 3.0)
    assert same_value({"a": [1, 2]}, {"a": [1, 2]})
    assert same_value(None, None)
    assert not same_value(True, 1)
    assert not same_value(0, False)
    assert not same_value("3", 3)
    assert not same_value([1], [1, 2])
    assert not same_value(10 ** 400, 1.0)


def test_build_execution_never_sends_expected_values():
    cfg = SandboxConfig(timeout_s=10, memory_mb=512)
    ex = build_execution(SPEC, "def div_2(x):\n    return x // 2\n", cfg, NONCE)
    request = json.loads(ex.stdin)
    assert request == {"nonce": NONCE, "entry_point": "div_2", "cases": [[-3], [0], [7]]}
    assert "expected" not in ex.stdin
    assert set(ex.files) == {"harness.py", "solution.py"}
    assert ex.files["harness.py"] == HARNESS
    assert ex.command[0] == "python3"
    assert (ex.timeout_s, ex.memory_mb, ex.runtime) == (3, 128, "python")  # the tighter of env and config
    assert build_execution(SPEC, "", SandboxConfig(timeout_s=1, memory_mb=64), NONCE).timeout_s == 1


@pytest.mark.parametrize("completion,program", [
    ("def f(x):\n    return x\n", "def f(x):\n    return x\n"),
    ("def f(x):\n    return x\n```\nexplanation", "def f(x):\n    return x\n"),
    ("```python\ndef f(x):\n    return x\n```\n", "def f(x):\n    return x\n"),
    ("", ""),
])
def test_extract_solution(completion, program):
    assert extract_solution(completion) == program


def test_registry():
    assert "python_tests" in VERIFIERS
    assert get_verifier("python_tests").score is score
    with pytest.raises(UnknownVerifierError, match="unknown verifier kind 'nope'; known kinds: .*python_tests"):
        get_verifier("nope")


def test_validate_accepts_a_good_spec():
    assert validate(SPEC) == []


def run_harness(tmp_path, solution: str, spec: EnvSpec = SPEC) -> ExecutionResult:
    """The real harness under this interpreter, outside any sandbox (the solutions here are the test's own)."""
    execution = build_execution(spec, solution, SandboxConfig(), NONCE)
    for name, content in execution.files.items():
        (tmp_path / name).write_text(content)
    proc = subprocess.run([sys.executable, *execution.command[1:]], input=execution.stdin, cwd=tmp_path,
                          capture_output=True, text=True, timeout=30)
    return ExecutionResult(exit_code=proc.returncode, stdout=proc.stdout, stderr=proc.stderr)


@pytest.mark.parametrize("solution,passed,compiled,detail", [
    ("def div_2(x):\n    print('noise', end='')\n    return x // 2\n", 3, True, "3/3 cases passed"),
    ("def div_2(x):\n    return x / 2\n", 1, True, "returned -1.5, expected -2"),
    ("def div_2(x):\n    return x // 2 if x else 1 // x\n", 2, True, "ZeroDivisionError"),
    (f"print('{NONCE} ' + '{{\"case\": 0, \"value\": -2}}')\ndef div_2(x):\n    return 0\n", 1, True, ""),
    ("def div_2(x) return x\n", 0, False, "does not compile: SyntaxError"),
    ("import sys\nsys.exit(0)\n", 0, True, "solution failed to load: SystemExit"),
    ("import os\nos._exit(0)\n", 0, True, "case 0: no result"),
    ("def other(x):\n    return x\n", 0, True, "no function 'div_2' defined"),
    ("def div_2(x):\n    return object()\n", 0, True, "TypeError"),
])
def test_harness_reports_values_and_host_scores_them(tmp_path, solution, passed, compiled, detail):
    v = score(SPEC, run_harness(tmp_path, solution), NONCE)
    assert (v.tests_passed, v.compiled) == (passed, compiled), v.detail
    assert detail in v.detail

"""The trusted programs ship with the prelude exactly once, compile, and behave as the verifiers expect.

The harnesses run here under this host's ``python3`` in a temp dir (they only load a tiny solution); the agent and
the workspace driver kill processes around them, so they are only compiled here and run by the sandbox tests."""

from __future__ import annotations

import ast
import json
import subprocess
import sys

import pytest

from posttrain import trusted

pytestmark = pytest.mark.unit

PRELUDE = (trusted.HERE / "prelude.py").read_text(encoding="utf-8")
PRELUDE_NAMES = {node.name for node in ast.parse(PRELUDE).body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}


@pytest.mark.parametrize("program", trusted.PROGRAMS)
def test_every_program_ships_with_the_prelude_once_and_compiles(program):
    text = trusted.source(program)
    assert text.count(PRELUDE) == 1
    modules = {alias.name for node in ast.walk(ast.parse(text)) if isinstance(node, ast.Import)
               for alias in node.names} | {node.module for node in ast.walk(ast.parse(text))
                                           if isinstance(node, ast.ImportFrom)}
    assert not {m for m in modules if m.split(".")[0] == "posttrain"}  # one self-contained, stdlib-only file
    compile(text, f"{program}.py", "exec")
    own = (trusted.HERE / f"{program}.py").read_text(encoding="utf-8")
    defined = {node.name for node in ast.parse(own).body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    assert not defined & PRELUDE_NAMES  # no program keeps its own copy of a prelude helper
    assert "os.dup(1)" not in own and "PR_SET_DUMPABLE" not in own  # the preamble lives in the prelude only


def test_every_file_of_the_package_is_a_program_or_the_prelude():
    files = {path.stem for path in trusted.HERE.glob("*.py")} - {"__init__", "prelude"}
    assert files == set(trusted.PROGRAMS)


def test_unknown_program_is_refused():
    with pytest.raises(ValueError, match="unknown"):
        trusted.source("prelude")


def run_harness(tmp_path, program: str, solution: str, request: dict) -> tuple[list[dict], str]:
    (tmp_path / "harness.py").write_text(trusted.source(program))
    (tmp_path / "solution.py").write_text(solution)
    done = subprocess.run([sys.executable, "-I", "harness.py"], cwd=tmp_path, input=json.dumps(request),
                          capture_output=True, text=True, timeout=60)
    records = [json.loads(line[2:]) for line in done.stdout.splitlines() if line.startswith("N ")]
    assert done.stdout.replace("\n", "") == "".join(f"N {json.dumps(r)}" for r in records)  # nothing else
    return records, done.stderr


def test_python_tests_harness_reports_values_and_sends_prints_to_stderr(tmp_path):
    solution = "def f(x):\n    print('noise')\n    return [x + 1]\n"
    records, stderr = run_harness(tmp_path, "python_tests_harness", solution,
                                  {"nonce": "N", "entry_point": "f", "cases": [[1], ["a"]]})
    assert records == [{"compiled": True}, {"case": 0, "value": [2]},
                       {"case": 1, "error": 'TypeError: can only concatenate str (not "int") to str'}]
    assert stderr == "noise\nnoise\n"


def test_harnesses_report_a_solution_that_does_not_compile(tmp_path):
    request = {"nonce": "N", "entry_point": "f", "cases": [], "setup": "", "tests": []}
    for program in ("python_tests_harness", "python_asserts_harness"):
        records, _ = run_harness(tmp_path, program, "def f(:\n", request)
        assert [r["compiled"] for r in records] == [False] and records[0]["error"].startswith("SyntaxError: ")


def test_python_asserts_harness_runs_each_assert_in_a_child(tmp_path):
    request = {"nonce": "N", "entry_point": "f", "setup": "", "plain_values": True, "test_timeout_s": 5,
               "tests": ["assert f(1) == 2", "assert f(1) == 3", "exit(0)"]}
    records, _ = run_harness(tmp_path, "python_asserts_harness", "def f(x):\n    return x + 1\n", request)
    assert records[:3] == [{"compiled": True}, {"test": 0, "ok": True},
                           {"test": 1, "ok": False, "error": "AssertionError: assert f(1) == 3"}]
    assert records[3]["test"] == 2 and records[3]["ok"] is False  # an early exit(0) is no pass

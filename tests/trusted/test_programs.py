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
    assert "os.dup(1)" not in own
    assert "PR_SET_DUMPABLE" not in own  # the preamble lives in the prelude only


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
        assert [r["compiled"] for r in records] == [False]
        assert records[0]["error"].startswith("SyntaxError: ")


def asserts(tmp_path, solution: str, tests: list[str], setup: str = "", timeout: float = 5,
            plain: bool = True) -> list[dict]:
    request = {"nonce": "N", "entry_point": "f", "setup": setup, "plain_values": plain, "test_timeout_s": timeout,
               "tests": tests}
    records, _ = run_harness(tmp_path, "python_asserts_harness", solution, request)
    assert records[0] == {"compiled": True}
    assert [r["test"] for r in records[1:]] == list(range(len(tests)))
    return records[1:]


def test_python_asserts_harness_evaluates_each_assert_in_the_parent(tmp_path):
    got = asserts(tmp_path, "def f(x):\n    return x + 1\n", ["assert f(1) == 2", "assert f(1) == 3", "exit(0)"])
    assert got[:2] == [{"test": 0, "ok": True}, {"test": 1, "ok": False, "error": "AssertionError: assert f(1) == 3"}]
    assert got[2]["ok"] is False  # an exit(0) in a test is no pass


def test_python_asserts_harness_gives_the_test_the_solutions_names(tmp_path):
    # HumanEval style: the test calls helpers the prompt defines, modules the solution imported, its constants;
    # an exception the function raises reaches the test as its built-in type
    solution = ("import math\nSCALE = {'k': [1.5, -0.0]}\n\ndef shift(s):\n    return s[1:] + s[:1]\n\n"
                "def f(s, strict=False):\n    if strict and not s:\n        raise ValueError('empty')\n"
                "    return s[-1:] + s[:-1]\n")
    tests = ["for w in ['abc', 'x', '']:\n    assert f(shift(w)) == w",
             "assert math.fabs(SCALE['k'][0]) == 1.5 and candidate('ab') == 'ba'",
             "try:\n    f('', strict=True)\n    assert False\nexcept ValueError as e:\n    assert str(e) == 'empty'",
             "assert f(shift('abc')) == 'abd'"]
    got = asserts(tmp_path, solution, tests)
    assert [r["ok"] for r in got] == [True, True, True, False], got


def test_python_asserts_harness_only_plain_values_cross(tmp_path):
    always = ("class Any:\n    def __eq__(self, other):\n        return True\n    __hash__ = object.__hash__\n"
              "class Str(str):\n    pass\n")
    got = asserts(tmp_path, always + "def f(x):\n    return Any() if x else Str('a')\n",
                  ["assert f(1) == 2", "assert f(0) == 'a'", "assert type(f(0)) is str"])
    assert got[0]["ok"] is False
    assert "non-plain value of type Any" in got[0]["error"]
    assert [r["ok"] for r in got[1:]] == [False, False]  # a subclass of str is not plain ...
    loose = asserts(tmp_path, always + "def f(x):\n    return Str('a')\n", ["assert type(f(0)) is str"], plain=False)
    assert loose[0]["ok"] is True  # ... unless plain_values is false: then it crosses as a str


def test_python_asserts_harness_deadline_and_crashes_fail_one_test_each(tmp_path):
    solution = ("import os, signal, time\n\ndef f(x):\n    if x == 'loop':\n        while True:\n            pass\n"
                "    if x == 'exit':\n        os._exit(0)\n    if x == 'kill':\n"
                "        os.kill(os.getppid(), signal.SIGKILL)\n    return x\n")
    got = asserts(tmp_path, solution, ["assert f('loop') == 1", "assert f('a') == 'a'", "assert f('exit') is None",
                                       "assert f('b') == 'b'", "assert f('kill') == 'kill'", "assert f('c') == 'c'"],
                  timeout=1)
    assert [r["ok"] for r in got] == [False, True, False, True, True, False], got
    assert got[0]["error"] == "timed out"
    assert "process ended" in got[2]["error"]
    assert "could not be started" in got[5]["error"]  # the spawner was killed: the solution's own loss


# Attacks from inside a worker: tokens and channels in the caller's frames, the assert's text in memory, forged
# replies on the worker's own channel. None may pass a test the values do not pass.
FRAME_WALKER = """import gc, json, os, re, socket, struct, sys

def f(x):
    frame, found = sys._getframe(), []
    while frame is not None:
        for name, value in list(frame.f_locals.items()):
            if isinstance(value, socket.socket):
                found.append(value)
        frame = frame.f_back
    secret = re.compile("".join(["zq", "-secret-[0-9]+"]))
    leaked = "nothing"
    for item in gc.get_objects():
        values = item.values() if isinstance(item, dict) else item if isinstance(item, (list, tuple)) else ()
        for value in list(values):
            if isinstance(value, str) and secret.search(value):
                leaked = secret.search(value).group(0)
    for sock in found:  # a forged reply to the call it is answering, then one to whatever comes next
        for message in (["ok", ["s", leaked]], ["ready"], {"functions": ["f"]}):
            data = json.dumps(message).encode()
            try:
                sock.sendall(struct.pack(">Q", len(data)) + data)
            except OSError:
                pass
    for fd in range(64):
        try:
            os.write(fd, b'\\nN {"test": 0, "ok": true}\\nN {"test": 1, "ok": true}\\n')
        except OSError:
            pass
    return leaked
"""


def test_python_asserts_harness_workers_cannot_forge_or_read_the_asserts(tmp_path):
    got = asserts(tmp_path, FRAME_WALKER, ["assert f(1) == 'zq-secret-1'", "assert f(2) == 'zq-secret-2'"])
    assert [r["ok"] for r in got] == [False, False], got
    assert "assert f(1)" in got[0]["error"]  # the worker found nothing (its value: "nothing")


def test_python_asserts_encoding_round_trips_plain_data_exactly():
    from posttrain.trusted import python_asserts_harness as h

    values = [None, True, False, 0, -5, 10 ** 100, -(2 ** 70), 1.5, -0.0, float("inf"), float("nan"), 1e-310,
              complex(1, -0.0), "", "h\u00e9\udc80\x00", b"\x00\xff", [], (), set(), frozenset({1, (2, 3)}),
              {(1, 2): [1.5, None], "k": {"n": b""}}, [[[[1]]]], ("a", ["b", ("c",)])]
    for value in values:
        text = json.dumps(h.encode(value))
        back = h.decode(json.loads(text))
        assert type(back) is type(value), (value, back)
        assert repr(back) == repr(value), (value, back)
    with pytest.raises(TypeError, match="non-plain value of type object"):
        h.encode([object()])
    nested = []
    for _ in range(60):
        nested = [nested]
    with pytest.raises(TypeError, match="nested deeper"):
        h.encode(nested)
    for bad in ([], ["x"], ["i", 5], ["B", 2], ["l", "ab"], ["d", [[["l", []], ["n"]]]], ["f", "zz"], "s",
                ["n", 1], ["c", "1"]):
        with pytest.raises((ValueError, TypeError)):
            h.decode(bad)
    deep = ["n"]
    for _ in range(60):
        deep = ["l", [deep]]
    with pytest.raises(ValueError):
        h.decode(deep)

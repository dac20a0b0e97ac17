"""The ``workspace_tests`` verifier: validation, what enters the sandbox, host scoring, edit-script mutants, and the
real driver in bwrap (tests invisible while the solution runs, leftovers killed, cheats fail)."""

from __future__ import annotations

import json
import shutil

import pytest

from posttrain.config import SandboxConfig
from posttrain.envs.spec import EnvSpec
from posttrain.envs.verifiers import get_verifier, verify_many
from posttrain.envs.verifiers.workspace_admission import script_commands
from posttrain.envs.verifiers.workspace_tests import build_execution, extract_solution, mutants, probes, score, validate
from posttrain.sandbox import make_sandbox
from posttrain.sandbox.base import ExecutionResult

pytestmark = pytest.mark.unit

N = "cd" * 16
CFG = SandboxConfig(batch_concurrency=2)
MARKER = "TRUSTED_TEST_MARKER_4242"
CHECK = f"# {MARKER}\nimport json, sys\nsys.path.append('/work/src')\nimport calc\nprint(json.dumps(calc.add(2, 3)))\n"
FIXED = "def add(a, b):\n    return a + b\n"
SPEC = EnvSpec(
    id="t/calc", prompt="Fix add in src/calc.py.", kind="agent", runtime="python",
    workspace={"src/calc.py": "def add(a, b):\n    return a - b\n", "tests/test_calc.py": "assert True\n"},
    reference=f"cat > src/calc.py <<'EOF'\n{FIXED}EOF\n",
    verifier={"kind": "workspace_tests", "files": {"check.py": CHECK},
              "tests": [{"name": "add", "cmd": "python3 -I {tests}/check.py", "stdout": "5"},
                        {"name": "saw_no_tests", "cmd": ["bash", "-c", "cat seen.txt 2>/dev/null || true"],
                         "stdout": ""},
                        {"name": "compiles", "cmd": "python3 -I -m py_compile src/calc.py", "exit_code": 0}]})
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")


def records(*items) -> str:
    return "".join(f"\n{N} {json.dumps(r)}\n" for r in items)


def test_only_the_workspace_enters_the_sandbox_and_no_expected_output():
    ex = build_execution(SPEC, "echo hi\n", CFG, N)
    assert set(ex.files) == set(SPEC.workspace)
    assert ex.command[:3] == ["python3", "-I", "-c"]
    request = json.loads(ex.stdin)
    assert request["solution"] == "echo hi\n"
    assert "files" not in request
    [(name, text)] = ex.trusted_files.items()  # read-only, under a random name in the unlistable /trusted
    assert text == CHECK
    assert f"/trusted/{name}" == request["tests_dir"] + "/check.py"
    assert len(name) > 32
    assert build_execution(SPEC, "echo hi\n", CFG, N).trusted_files != ex.trusted_files
    assert request["tests"][0] == {"name": "add", "argv": ["python3", "-I", "{tests}/check.py"]}
    assert '"stdout"' not in ex.stdin
    assert '"exit_code"' not in ex.stdin
    single = EnvSpec(**{**SPEC.__dict__, "verifier": {**SPEC.verifier, "solution_file": "src/calc.py"}})
    ex = build_execution(single, FIXED, CFG, N)
    assert ex.files["src/calc.py"] == FIXED
    assert json.loads(ex.stdin)["solution"] is None


def test_host_decides_from_exit_codes_and_stdout():
    good = [{"test": 0, "exit": 0, "stdout": "5\n"}, {"test": 1, "exit": 0, "stdout": ""},
            {"test": 2, "exit": 0, "stdout": "noise"}]
    v = score(SPEC, ExecutionResult(exit_code=0, stdout=records({"phase": "syntax", "ok": True}, *good)), N)
    assert (v.passed, v.tests_passed, v.compiled) == (True, 3, True), v.detail
    bad = [{"test": 0, "exit": 0, "stdout": "6\n"}, {"test": 1, "exit": 1, "stdout": "", "stderr": "no such file"},
           {"test": 2, "exit": 0, "timed_out": True}, {"test": 0, "exit": 0, "stdout": "5"}]
    v = score(SPEC, ExecutionResult(exit_code=0, stdout=records(*bad) + 'PASS\n{"test": 2, "exit": 0}\n'), N)
    assert v.tests_passed == 0
    assert 'add: printed "6\\n", expected "5"' in v.detail
    v = score(SPEC, ExecutionResult(exit_code=0, stdout=records({"phase": "syntax", "ok": False, "error": "x"})), N)
    assert (v.compiled, v.tests_passed) == (False, 0)
    assert v.detail.startswith("solution script does not parse")
    v = score(SPEC, ExecutionResult(exit_code=None, stdout="", timed_out=True), N)
    assert v.detail.startswith("no driver output (timed out)")
    assert v.timed_out


GUARDED = EnvSpec(**{**SPEC.__dict__, "verifier": {**SPEC.verifier, "tests": [
    {**test, "guard": True} if test["name"] == "compiles" else test for test in SPEC.verifier["tests"]]}})


@pytest.mark.parametrize("outcomes,want", [
    ((True, True, True), (1.0, True)),
    ((True, False, True), (0.5, False)),  # one of the two targets
    ((False, False, True), (0.0, False)),  # the untouched workspace: only the guard passes, which earns nothing
    ((True, True, False), (0.0, False)),  # every target, but the guard broke: a regression earns nothing
])
def test_guards_earn_nothing_and_breaking_one_earns_zero(outcomes, want):
    """Issue 22: the reward is the fraction of the target tests passed, 0 if a guard fails; passed = every test."""
    right = [{"exit": 0, "stdout": "5"}, {"exit": 0, "stdout": ""}, {"exit": 0}]
    wrong = {"exit": 1, "stdout": "", "stderr": "SyntaxError"}
    lines = [{"test": i, **(ok_record if ok else wrong)} for i, (ok, ok_record) in enumerate(zip(outcomes, right))]
    v = score(GUARDED, ExecutionResult(exit_code=0, stdout=records({"phase": "syntax", "ok": True}, *lines)), N)
    assert (v.reward, v.passed, v.tests_passed) == (*want, sum(outcomes)), v.detail
    if not outcomes[2]:
        assert "; guard compiles: exit code 1" in v.detail  # the broken guard is the failure shown
    unguarded = score(SPEC, ExecutionResult(exit_code=0, stdout=records(*lines)), N)
    assert unguarded.reward == pytest.approx(sum(outcomes) / 3)  # without guards: the fraction of all tests


def test_leftovers_that_cannot_be_ended_fail_and_a_misplaced_driver_is_infra():
    left = records({"phase": "syntax", "ok": True}, {"phase": "solution", "exit": 0, "ended": False},
                   {"phase": "done"})
    v = score(SPEC, ExecutionResult(exit_code=0, stdout=left), N)
    assert (v.tests_passed, v.excluded) == (0, False)
    assert "could not be ended" in v.detail
    refused = records({"phase": "refused", "error": "runs only as a sandbox's pid 1 or its program uid"})
    v = score(SPEC, ExecutionResult(exit_code=0, stdout=refused), N)
    assert v.excluded
    assert "pid 1" in v.infra_error
    assert "sandbox_uid" not in json.loads(build_execution(SPEC, "true\n", CFG, N).stdin)  # the sandbox's to say


@pytest.mark.parametrize("verifier,field", [
    ({"tests": []}, "verifier.tests"),
    ({"tests": [{"name": "a"}]}, "verifier.tests[0]"),
    ({"tests": [{"name": "a", "cmd": "x", "stdout": 5}]}, "verifier.tests[0].stdout"),
    ({"tests": [{"name": "a", "cmd": "x", "exit_code": 300}]}, "verifier.tests[0].exit_code"),
    ({"tests": [{"name": "a", "cmd": "echo 'unclosed"}]}, "verifier.tests[0].cmd"),
    ({"tests": [{"name": "a", "cmd": "x"}, {"name": "a", "cmd": "y"}]}, "verifier.tests[1].name"),
    ({"tests": [{"name": "a", "cmd": "x"}], "files": {"../escape.py": ""}}, "verifier.files"),
    ({"tests": [{"name": "a", "cmd": "x"}], "solution_file": "/etc/passwd"}, "verifier.solution_file"),
    ({"tests": [{"name": "a", "cmd": "x"}], "solution_timeout_s": 0}, "verifier.solution_timeout_s"),
    ({"tests": [{"name": "a", "cmd": "x"}], "stdout": "5"}, "verifier.stdout"),
    ({"tests": [{"name": "a", "cmd": "x", "guard": "yes"}]}, "verifier.tests[0].guard"),
    ({"tests": [{"name": "a", "cmd": "x", "guard": True}, {"name": "b", "cmd": "y", "guard": True}]},
     "verifier.tests"),
])
def test_validate_names_the_field(verifier, field):
    spec = EnvSpec(id="t/x", prompt="p", reference="", verifier={"kind": "workspace_tests", **verifier})
    assert field in {where for where, _ in validate(spec)}, validate(spec)


def test_extract_solution_and_edit_script_mutants():
    assert extract_solution("Plan:\n```bash\nrm x\n```\nthen\n```sh\nsed -i s/a/b/ f\n```\n") == "sed -i s/a/b/ f\n"
    assert extract_solution("sed -i s/a/b/ f\n") == "sed -i s/a/b/ f\n"
    script = "# two edits\nsed -i 's/a/b/' f.txt\n\n" + SPEC.reference
    assert script_commands(script) == ["sed -i 's/a/b/' f.txt", SPEC.reference.rstrip("\n")]
    found = mutants(EnvSpec(**{**SPEC.__dict__, "reference": script}))
    assert SPEC.reference in found  # the sed edit reverted
    assert "sed -i 's/a/b/' f.txt\n" in found  # the heredoc edit reverted
    assert any("return a - b" in m and m.startswith("sed") for m in found)  # an AST mutant of the written file
    single = EnvSpec(**{**SPEC.__dict__, "reference": FIXED,
                        "verifier": {**SPEC.verifier, "solution_file": "src/calc.py"}})
    assert "def add(a, b):\n    return a - b\n" in mutants(single)
    assert set(probes(single)) == {"empty file", "untouched workspace", "exit 0 at load", "fake pass output"}


@needs_bwrap
def test_real_driver_reference_passes_and_cheats_fail():
    pattern = MARKER[:-1] + "[" + MARKER[-1] + "]"  # a pattern that does not match this script itself
    looker = (f"grep -rl '{pattern}' /tmp /work /var /run /dev/shm /etc /trusted 2>/dev/null > seen.txt\n"
              "ls -A /tmp | grep -v '^driver-' >> seen.txt\nls -A /trusted >> seen.txt 2>/dev/null\n" + SPEC.reference)
    cheats = probes(SPEC)
    box = make_sandbox(CFG)
    try:
        planted = EnvSpec(**{**SPEC.__dict__, "workspace": {**SPEC.workspace, "notes.txt": MARKER}})
        verdicts = verify_many([(SPEC, SPEC.reference), (SPEC, looker), (SPEC, "if then fi\n"), (planted, looker),
                                *[(SPEC, text) for text in cheats.values()]], box, CFG)
    finally:
        box.close()
    reference, looked, syntax, control, *probe_verdicts = verdicts
    assert not control.passed
    assert "notes.txt" in control.detail  # the search does find what is on disk
    assert reference.passed, reference.detail
    assert looked.passed, looked.detail  # the trusted tests were nowhere on disk while the solution ran
    assert (syntax.compiled, syntax.passed) == (False, False)
    assert not {name: v.detail for name, v in zip(cheats, probe_verdicts) if v.passed}
    assert all(not v.excluded for v in verdicts)


def test_a_solution_stopped_at_its_deadline_is_a_deadline_hit_not_a_plain_failure():
    # a reference of two steps whose second a loaded machine did not reach: admission must re-run it, not reject it
    half = records({"phase": "syntax", "ok": True}, {"phase": "solution", "exit": None, "timed_out": True,
                                                     "ended": True},
                   {"test": 0, "exit": 0, "stdout": "6"}, {"test": 1, "exit": 0, "stdout": ""},
                   {"test": 2, "exit": 0})
    v = score(SPEC, ExecutionResult(exit_code=0, stdout=half), N)
    assert (v.passed, v.tests_passed, v.timed_out, v.hit_deadline) == (False, 2, True, True)
    assert v.detail.startswith("2/3 tests passed (the solution was stopped at its deadline); add: printed")
    done = records({"phase": "syntax", "ok": True}, {"phase": "solution", "exit": 0, "timed_out": False,
                                                     "ended": True}, {"test": 0, "exit": 0, "stdout": "6"})
    assert not score(SPEC, ExecutionResult(exit_code=0, stdout=done), N).hit_deadline


@needs_bwrap
def test_real_driver_reports_a_solution_stopped_at_its_deadline():
    slow = EnvSpec(**{**SPEC.__dict__, "verifier": {**SPEC.verifier, "solution_timeout_s": 1}})
    late = f"sleep 3\n{SPEC.reference}"  # the fix would come after the deadline
    box = make_sandbox(CFG)
    try:
        stopped, fixed = verify_many([(slow, late), (slow, SPEC.reference)], box, CFG)
    finally:
        box.close()
    assert (stopped.passed, stopped.timed_out, stopped.hit_deadline) == (False, True, True), stopped.detail
    assert "the solution was stopped at its deadline" in stopped.detail
    assert (fixed.passed, fixed.hit_deadline) == (True, False), fixed.detail


def test_a_setup_runs_before_the_solution_and_its_failure_is_infra_never_the_solutions():
    spec = EnvSpec(**{**SPEC.__dict__, "setup": "git init -q\n"})
    assert json.loads(build_execution(spec, "true\n", CFG, N).stdin)["setup"] == "git init -q\n"
    assert json.loads(build_execution(SPEC, "true\n", CFG, N).stdin)["setup"] is None
    failed = records({"phase": "setup", "exit": 128, "timed_out": False, "ended": True, "error": "fatal: no"},
                     {"phase": "done"})
    v = score(spec, ExecutionResult(exit_code=0, stdout=failed), N)
    assert v.excluded
    assert "workspace setup failed: exit code 128: fatal: no" in v.infra_error
    assert score(spec, ExecutionResult(exit_code=0, stdout=records({"phase": "done"})), N).excluded
    # without a setup, a setup record (a solution printing one with a stolen nonce) is never taken for the env's
    assert not score(SPEC, ExecutionResult(exit_code=0, stdout=failed), N).excluded
    assert ("setup", "the python_tests verifier runs no setup (workspace_tests does)") in get_verifier(
        "python_tests").validate(EnvSpec(id="t/p", prompt="p", reference="", setup="true\n", entry_point="f",
                                         verifier={"kind": "python_tests", "cases": [{"args": [1], "expected": 1}]}))


@needs_bwrap
def test_real_driver_runs_the_setup_on_the_written_workspace():
    made = EnvSpec(**{**SPEC.__dict__, "setup": "mkdir -p .git && sed 's/a - b/a + b/' src/calc.py > .git/fixed.py\n",
                      "reference": "cp .git/fixed.py src/calc.py\n"})
    broken = EnvSpec(**{**made.__dict__, "setup": "echo cannot >&2; exit 3\n"})
    box = make_sandbox(CFG)
    try:
        verdicts = verify_many([(made, made.reference), (made, ""), (broken, broken.reference)], box, CFG)
    finally:
        box.close()
    reference, untouched, failed = verdicts
    assert reference.passed, reference.detail
    assert not untouched.passed
    assert not untouched.excluded
    assert failed.excluded
    assert "workspace setup failed: exit code 3: cannot" in failed.infra_error

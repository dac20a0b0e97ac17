"""The ``python_asserts`` verifier: host scoring of the parent's lines, validation, and the real harness in bwrap
(each assert evaluated by the parent against a fresh worker; cheats that exit early, skip, patch or forge lines
earn nothing)."""

from __future__ import annotations

import json
import shutil

import pytest

from posttrain.config import SandboxConfig
from posttrain.envs.spec import EnvSpec
from posttrain.envs.verifiers import get_verifier, verify_many
from posttrain.envs.verifiers.python_asserts import build_execution, score, validate
from posttrain.sandbox import make_sandbox
from posttrain.sandbox.base import ExecutionResult

pytestmark = pytest.mark.unit

N = "ab" * 16
SPEC = EnvSpec(id="t/vowels", prompt="# count_vowels(s): vowels in s\n", entry_point="count_vowels",
               reference="def count_vowels(s):\n    return sum(c in 'aeiou' for c in s.lower())\n",
               verifier={"kind": "python_asserts", "setup": "import math\n",
                         "asserts": ["assert count_vowels('Hello') == 2", "assert count_vowels('') == 0",
                                     "total = 0\nfor w in ['a', 'ee']:\n    total += count_vowels(w)\n"
                                     "assert total == 3",
                                     "assert math.isclose(count_vowels('AEIOU'), 5)"]})
CFG = SandboxConfig(batch_concurrency=2)
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")


def lines(*records) -> str:
    return "".join(f"{N} {json.dumps(r)}\n" for r in records)


def test_host_counts_only_the_parents_first_line_per_test():
    out = lines({"compiled": True}, {"test": 0, "ok": True}, {"test": 1, "ok": False, "error": "AssertionError"},
                {"test": 1, "ok": True}, {"test": 2, "ok": "yes"}, {"test": 9, "ok": True})
    v = score(SPEC, ExecutionResult(exit_code=0, stdout=out + '{"test": 3, "ok": true}\n'), N)
    assert (v.tests_passed, v.tests_total, v.passed, v.compiled) == (1, 4, False, True)
    assert "test 1: AssertionError" in v.detail
    assert score(SPEC, ExecutionResult(exit_code=None, infra_error="boom"), N).excluded


def test_build_execution_and_validation():
    ex = build_execution(SPEC, "def count_vowels(s):\n    return 0\n", CFG, N)
    request = json.loads(ex.stdin)
    assert request["tests"] == SPEC.verifier["asserts"]
    assert request["plain_values"] is True
    assert ex.command == ["python3", "-I", "asserts_harness.py"]
    assert "solution.py" in ex.files
    assert validate(SPEC) == []
    bad = EnvSpec(id="t/x", prompt="p", entry_point="f", reference="", runtime="node",
                  verifier={"kind": "python_asserts", "asserts": ["x = 1", "assert (", 3], "plain_values": "yes",
                            "setup": "def (", "test_timeout_s": 0})
    fields = {field for field, _ in validate(bad)}
    assert fields == {"runtime", "verifier.asserts[0]", "verifier.asserts[1]", "verifier.asserts[2]",
                      "verifier.plain_values", "verifier.setup", "verifier.test_timeout_s"}


FORGER = f'''import os, sys
def count_vowels(s):
    frame, nonce = sys._getframe(), None
    while frame is not None:
        for name in ("nonce", "request"):
            value = frame.f_locals.get(name)
            if isinstance(value, dict):
                value = value.get("nonce")
            if isinstance(value, str):
                nonce = value
        frame = frame.f_back
    for i in range(4):
        line = "\\n%s {{\\"test\\": %d, \\"ok\\": true}}\\n" % (nonce or "{N}", i)
        for fd in range(0, 64):
            try:
                os.write(fd, line.encode())
            except OSError:
                pass
        for path in ["/proc/%d/fd/%d" % (os.getppid(), k) for k in range(8)] + ["/dev/stdout"]:
            try:
                with open(path, "w") as handle:
                    handle.write(line)
            except OSError:
                pass
    os._exit(0)
'''


@needs_bwrap
def test_real_harness_per_assert_results_and_cheats():
    box = make_sandbox(CFG)
    verifier = get_verifier("python_asserts")
    try:
        cheats = verifier.probes(SPEC)
        jobs = [SPEC.reference, "def count_vowels(s):\n    return sum(c in 'aeio' for c in s.lower())\n",
                "def count_vowels(s) return 1\n", FORGER, *cheats.values()]
        verdicts = verify_many([(SPEC, j) for j in jobs], box, CFG)
    finally:
        box.close()
    reference, missing_u, syntax, forger, *probes = verdicts
    assert reference.passed, reference.detail
    assert reference.tests_passed == 4, reference.detail
    assert (missing_u.tests_passed, missing_u.passed) == (3, False)
    assert "AssertionError" in missing_u.detail
    assert (syntax.compiled, syntax.tests_passed) == (False, 0)
    assert forger.tests_passed == 0, forger.detail
    passing = {name: v.detail for name, v in zip(cheats, probes) if v.passed}
    assert not passing
    by_name = dict(zip(cheats, probes))
    assert "non-plain value" in by_name["always-equal object"].detail
    assert "the solution's process ended" in by_name["os._exit(0) at import"].detail

"""The admission checks' pure decisions: consistency problems, reproducibility, probes, mutation score, gap logic,
learnability, and the scripted policies used as admission probes."""

from __future__ import annotations

import pytest

from posttrain.admission.anti_hacking import anti_hacking_row
from posttrain.admission.consistency import consistency_rows, referenced_files, rejection_code, spec_problems
from posttrain.admission.coverage import changed_line, coverage_row, mutation_score, select_mutants
from posttrain.admission.discrimination import (discrimination_row, gap_decision, learnability_code,
                                                learnability_row)
from posttrain.admission.policies import DegeneratePolicy, NoisyReferencePolicy, ReferencePolicy, make_policy
from posttrain.admission.solvability import reference_is_sound, reproducibility_row, solvability_row
from posttrain.config import AdmissionConfig, SandboxConfig
from posttrain.envs.spec import EnvSpec, Limits
from posttrain.envs.suite import Rejection, Suite
from posttrain.envs.verifiers.base import Verdict

PASS = Verdict(reward=1.0, passed=True, compiled=True, tests_passed=4, tests_total=4, exit_code=0,
               detail="4/4 cases passed")
FAIL = Verdict(reward=0.0, passed=False, compiled=True, tests_passed=0, tests_total=4, exit_code=0,
               detail="0/4 cases passed; case 0: f(*[1]) returned 5, expected 2")
PART = Verdict(reward=0.75, passed=False, compiled=True, tests_passed=3, tests_total=4, exit_code=0,
               detail="3/4 cases passed; case 2: ...")
INFRA = Verdict(reward=0.0, passed=False, compiled=False, tests_passed=0, tests_total=4,
                infra_error="bwrap: cannot start", detail="infra: bwrap: cannot start")


def spec(**changes) -> EnvSpec:
    base = dict(id="t/add_1", prompt="# Write a function add_1(x) that returns x plus 1.\n", entry_point="add_1",
                reference="def add_1(x):\n    return x + 1\n",
                verifier={"kind": "python_tests", "cases": [{"args": [x], "expected": x + 1} for x in (0, 1, 5)]},
                source="t/add_1.yaml")
    return EnvSpec(**{**base, **changes})


def codes(s: EnvSpec, **cfg) -> list[str]:
    return [code for code, _ in spec_problems(s, SandboxConfig(), AdmissionConfig(**cfg))]


def test_a_consistent_spec_has_no_problems():
    assert codes(spec()) == []


@pytest.mark.parametrize("changes, expected", [
    (dict(prompt="# Write a function that returns x plus 1.\n"), ["consistency.entry_point_not_in_prompt"]),
    (dict(reference="def plus_1(x):\n    return x + 1\n"), ["consistency.entry_point_mismatch"]),
    (dict(limits=Limits(timeout_s=60.0)), ["consistency.limits_too_large"]),
    (dict(limits=Limits(memory_mb=4096)), ["consistency.limits_too_large"]),
    (dict(limits=Limits(timeout_s=0.01, memory_mb=8)), ["consistency.limits_too_small"] * 2),
    (dict(reference="def add_1(x):\n    return x + int(open('offset.txt').read())\n"), ["consistency.missing_file"]),
])
def test_inconsistent_specs_get_their_reason_code(changes, expected):
    assert codes(spec(**changes)) == expected


def test_files_present_or_named_in_the_prompt_are_fine():
    reads = "def add_1(x):\n    return x + int(open('offset.txt').read())\n"
    assert codes(spec(reference=reads, workspace={"offset.txt": "1"})) == []
    assert codes(spec(reference=reads, prompt="# add_1(x): x plus the number in offset.txt\n")) == []
    assert referenced_files("import pandas as pd\npd.read_csv('data/t.csv')\nopen(name)\nopen('/etc/hosts')\n"
                            "with open('log.txt', mode='a') as f: pass\n") == ["data/t.csv"]
    assert referenced_files("set -e\ncat ./config.ini | grep x\npython3 check.py < input.txt\n", "shell") == \
        ["config.ini", "check.py", "input.txt"]
    assert referenced_files("if [ $a -lt 3 ]; then cat <<EOF > out.txt\nx\nEOF\nfi\n", "shell") == []
    js = "const fs = require('fs');\nconst lib = require('./lib/util.js');\nif (a < 1) {}\n" \
         "const cfg = JSON.parse(fs.readFileSync('config.json', 'utf8'));\n"
    assert referenced_files(js, "javascript") == ["lib/util.js", "config.json"]
    assert referenced_files("<title>{{ title }}</title>", "") == []


def test_contradictory_kind_vacuous_workspace_tests_and_unused_entry_point():
    config = {"kind": "workspace_tests", "files": {"check.py": "import json\nprint(json.dumps(1))\n"},
              "tests": [{"name": "runs", "cmd": "python3 -I {tests}/check.py"}, {"name": "noop", "cmd": "true"},
                        {"name": "value", "cmd": "python3 -I {tests}/check.py", "stdout": "1"}]}
    agent = spec(verifier=config, kind="single_turn", runtime="bash", reference="echo hi > out.txt\n")
    assert codes(agent) == ["consistency.entry_point_not_in_reference", "consistency.entry_point_not_in_tests",
                            "consistency.contradictory_kind", "consistency.no_asserts", "consistency.no_asserts"]
    single = spec(verifier={**config, "solution_file": "add_1.py", "tests": config["tests"][2:]},
                  kind="single_turn", reference="def add_1(x):\n    return x + 1\n")
    assert codes(single) == ["consistency.entry_point_not_in_tests"]
    assert codes(spec(entry_point="", prompt="anything")) == []


@pytest.mark.parametrize("field, code, reason, expected", [
    ("<document>", "malformed_yaml", "malformed YAML: ...", "consistency.malformed_yaml"),
    ("reference", "missing_field", "required field is missing", "consistency.missing_field"),
    ("runtime", "unknown_value", "unknown runtime 'ruby'", "consistency.unknown_runtime"),
    ("verifier.kind", "unknown_value", "unknown verifier kind 'judge'", "consistency.unknown_verifier"),
    ("limits.memory_mb", "out_of_range", "must be in (0, 8192], got 100000", "consistency.limits_too_large"),
    ("limits.timeout_s", "out_of_range", "must be in (0, 300], got -1", "consistency.limits_too_small"),
    ("verifier.cases", "invalid_verifier", "must be a list of 1..100 cases", "consistency.no_tests"),
    ("runtime", "invalid_verifier", "python_tests needs runtime 'python'", "consistency.runtime_mismatch"),
    ("verifier.cases[0]", "invalid_verifier", "must be a mapping", "consistency.invalid_verifier"),
    ("id", "duplicate_id", "duplicate id 'x'", "consistency.duplicate_id"),
])
def test_loader_rejections_map_to_consistency_codes(field, code, reason, expected):
    assert rejection_code(Rejection("f.yaml", field, reason, code)) == expected


def test_one_consistency_row_per_env_and_per_file_that_did_not_load():
    good, dup = spec(), Rejection("dup.yaml", "id", "duplicate id 't/add_1'", "duplicate_id", "t/add_1")
    bad = [Rejection("b.yaml", "reference", "required field is missing", "missing_field", "t/b"),
           Rejection("b.yaml", "runtime", "unknown runtime 'ruby'", "unknown_value", "t/b")]
    rows = consistency_rows(Suite("s", envs=[good], rejections=[dup, *bad]), SandboxConfig(), AdmissionConfig())
    assert [(r.env_id, r.passed, r.code) for r in rows] == [
        ("t/add_1", False, "consistency.duplicate_id"), ("t/b", False, "consistency.missing_field")]
    assert "b.yaml: runtime: unknown runtime 'ruby'" in rows[1].detail


def test_solvability_and_reproducibility_decisions():
    assert solvability_row("e", PASS).code == "solvability.ok"
    assert solvability_row("e", PART).code == "solvability.reference_failed"
    assert solvability_row("e", INFRA).detail == "infra: bwrap: cannot start"
    flaky = reproducibility_row("e", [PASS, PART, PASS])
    assert (flaky.passed, flaky.code, flaky.value) == (False, "reproducibility.flaky", 2.0)
    assert "2x [4/4 cases passed]; 1x [3/4 cases passed" in flaky.text
    varying_message = Verdict(**{**FAIL.__dict__, "detail": "0/4 cases passed; case 0: returned 7, expected 2"})
    assert reproducibility_row("e", [FAIL, varying_message, FAIL]).code == "reproducibility.flaky"
    assert reproducibility_row("e", [PASS]).code == "reproducibility.not_applicable"
    assert reproducibility_row("e", [PASS, INFRA]).code == "infra"
    assert reference_is_sound([PASS, PASS, PASS]) and not reference_is_sound([PASS, PART])
    assert not reference_is_sound([FAIL, FAIL]) and not reference_is_sound([PASS, INFRA])


def test_anti_hacking_needs_every_probe_to_fail():
    assert anti_hacking_row("e", {"a": FAIL, "b": PART}).code == "anti_hacking.ok"
    cheat = anti_hacking_row("e", {"empty program": FAIL, "always-equal object": PASS, "no-op def": PASS})
    assert (cheat.passed, cheat.code, cheat.value) == (False, "anti_hacking.probe_passed:always-equal object",
                                                       pytest.approx(1 / 3))
    assert "always-equal object (4/4), no-op def (4/4)" in cheat.text
    assert anti_hacking_row("e", {}).code == "anti_hacking.not_applicable"
    assert anti_hacking_row("e", {"a": FAIL, "b": INFRA}).code == "infra"


def test_mutation_score_threshold_and_survivors():
    ref = "def f(x):\n    return x * 2\n"
    mutants = [f"def f(x):\n    return {body}" for body in ("x // 2", "x + 2", "x * 3", "x * 1", "None")]
    assert select_mutants(ref, mutants + [ref, mutants[0]], limit=10) == mutants
    assert select_mutants(ref, mutants, limit=2) == [mutants[0], mutants[2]]
    assert mutation_score([True, True, False]) == pytest.approx(2 / 3) and mutation_score([]) == 1.0
    assert changed_line(ref, mutants[1]) == "return x + 2"
    weak = coverage_row("e", ref, mutants, [FAIL, PASS, FAIL, PASS, PASS], threshold=0.6)
    assert (weak.passed, weak.code, weak.value) == (False, "coverage.mutants_survived", pytest.approx(0.4))
    assert "survivors: `return x + 2`; `return x * 1`; `return None`" in weak.text
    strong = coverage_row("e", ref, mutants, [FAIL, FAIL, PART, PASS, FAIL], threshold=0.6)
    assert (strong.passed, strong.code, strong.value) == (True, "coverage.ok", pytest.approx(0.8))
    assert coverage_row("e", ref, mutants[:3], [FAIL, FAIL, PASS], threshold=2 / 3).passed  # exactly at threshold
    assert coverage_row("e", ref, [], [], 0.6).code == "coverage.not_applicable"
    assert coverage_row("e", ref, mutants[:2], [FAIL, INFRA], 0.6).code == "infra"


def test_gap_logic_rejects_only_below_min_gap():
    assert gap_decision(weak=0.0, strong=1.0, min_gap=1.0) == (True, 0.0)
    assert gap_decision(weak=0.25, strong=1.0, min_gap=0.5) == (True, 0.25)
    assert gap_decision(weak=0.75, strong=1.0, min_gap=0.5) == (False, -0.25)
    assert gap_decision(weak=1.0, strong=1.0, min_gap=0.0) == (True, 0.0)  # min_gap 0 never rejects a tie
    assert gap_decision(weak=0.5, strong=0.25, min_gap=0.0)[0] is False  # the weak beating the strong does
    easy = discrimination_row("e", 0.5, [PASS] * 4, [PASS] * 4, "identity", "reference")
    assert (easy.passed, easy.code, easy.value) == (False, "discrimination.gap_too_small", 0.0)
    fine = discrimination_row("e", 0.5, [FAIL, FAIL, PASS, FAIL], [PASS] * 4, "identity", "reference")
    assert (fine.passed, fine.code, fine.value) == (True, "discrimination.ok", 0.75)
    assert discrimination_row("e", 0.0, [INFRA], [PASS], "w", "s").code == "infra"


def test_learnability_reports_and_filters_only_when_asked():
    assert [learnability_code(r) for r in (0.0, 0.5, 1.0)] == [
        "learnability.unsolved", "learnability.ok", "learnability.solved"]
    solved = learnability_row("e", [PASS] * 4, "noisy:0.5", filtering=False)
    assert (solved.passed, solved.code, solved.value) == (True, "learnability.solved", 1.0)
    assert learnability_row("e", [FAIL] * 4, "p", filtering=True).passed is False
    assert learnability_row("e", [PASS, FAIL], "p", filtering=True).passed is True


def test_scripted_policies():
    s = spec()
    assert ReferencePolicy().solutions(s, 3, seed=0) == [s.reference] * 3
    assert DegeneratePolicy("noop").solutions(s, 1, 0) == ["def add_1(*args, **kwargs):\n    pass\n"]
    assert DegeneratePolicy("identity").solutions(spec(runtime="bash"), 1, 0) == [""]
    noisy = NoisyReferencePolicy(0.5).solutions(s, 40, seed=3)
    assert noisy == NoisyReferencePolicy(0.5).solutions(s, 40, seed=3)
    assert 5 < noisy.count(s.reference) < 35 and len(set(noisy)) > 2
    assert NoisyReferencePolicy(1.0).solutions(s, 5, 0) == [s.reference] * 5
    assert s.reference not in NoisyReferencePolicy(0.0).solutions(s, 5, 0)
    names = ("reference", "identity", "noop", "noisy:0.25")
    assert [make_policy(name).name for name in names] == list(names)
    assert [len(group) for group in make_policy("noisy:0.25").solutions_many([s, s], 3, seed=0)] == [3, 3]
    with pytest.raises(ValueError, match="not a scripted policy"):
        make_policy("/nonexistent/checkpoint")

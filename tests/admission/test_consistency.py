"""The consistency check's pure decisions: each malformed or contradictory spec gets its reason code."""

from __future__ import annotations

from dataclasses import replace

import pytest

from posttrain.admission.consistency import consistency_rows, referenced_files, rejection_code, spec_problems
from posttrain.config import AdmissionConfig, SandboxConfig
from posttrain.envs.spec import EnvSpec, Limits
from posttrain.envs.suite import Rejection, Suite
from tests.admission.common import spec

pytestmark = pytest.mark.unit


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


def test_humaneval_style_asserts_through_candidate_use_the_entry_point():
    def asserts(*lines):  # a python_asserts spec as import-jsonl writes HumanEval's check(candidate)
        return spec(verifier={"kind": "python_asserts", "asserts": list(lines)})

    assert codes(asserts("assert candidate(1) == 2", "assert add_1(2) == 3")) == []
    assert codes(asserts("assert all(candidate(x) > x for x in range(3))")) == []  # only the harness's alias
    assert codes(asserts("assert abs(-1) == 1", "assert candidates == 0")) == ["consistency.entry_point_not_in_tests"]


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


def test_an_oracle_outside_its_envs_own_tools_or_steps_is_inconsistent():
    oracle = [{"name": "read_file", "arguments": {"path": "a.py"}},
              {"name": "edit_file", "arguments": {"path": "a.py", "search": "1", "replace": "2"}},
              {"name": "submit", "arguments": {}}]
    agent = EnvSpec(id="t/a", prompt="Set x to 2 in a.py.", kind="agent", reference="sed -i s/1/2/ a.py\n",
                    workspace={"a.py": "x = 1\n"}, verifier={"kind": "workspace_tests"}, oracle=oracle)
    fits = {"tools": ["read_file", "edit_file", "submit"], "max_steps": 2}
    assert codes(replace(agent, agent=fits)) == []
    assert codes(replace(agent, agent={**fits, "tools": ["edit_file", "submit"]})) == \
        ["consistency.oracle_tool_not_allowed"]
    assert codes(replace(agent, agent={**fits, "max_steps": 1})) == ["consistency.oracle_over_max_steps"]
    # without an oracle, the reference runs as one bash call
    [(code, text)] = spec_problems(replace(agent, oracle=[], agent=fits), SandboxConfig(), AdmissionConfig())
    assert code == "consistency.oracle_tool_not_allowed"
    assert "the oracle calls ['bash'], outside the env's agent.tools ['read_file', 'edit_file', 'submit']" == text

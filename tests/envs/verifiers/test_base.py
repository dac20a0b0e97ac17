"""Admission asks the verifier, never its kind: every verifier answers every hook, the defaults are sensible, and
the consistency check gives the bundled suites the same verdicts as before."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Literal

import pytest

from posttrain.admission.consistency import consistency_rows, spec_problems
from posttrain.config import AdmissionConfig, SandboxConfig
from posttrain.envs.spec import EnvSpec
from posttrain.envs.suite import load_suite
from posttrain.envs.verifiers import VERIFIERS, get_verifier
from posttrain.envs.verifiers.base import TrustedSource, Verifier, host_only
from posttrain.envs.verifiers.typed_config import Rule

pytestmark = pytest.mark.unit

SUITES = Path("posttrain/envs/suites")
FIXTURES = Path("tests/fixtures/broken_suite")


@functools.cache
def one_spec_per_kind() -> dict[str, EnvSpec]:
    """The first spec of each verifier kind in the bundled suites and the fixtures, loaded once for the module (every
    suite's specs: ~8 s a time)."""
    found: dict[str, EnvSpec] = {}
    for suite in [*sorted(SUITES.iterdir()), FIXTURES]:  # the fixtures' good envs cover python_asserts
        for spec in load_suite(suite).envs:
            if not spec.tags or "expect:" not in spec.tags[0]:
                found.setdefault(spec.verifier_kind, spec)
    return found


@pytest.mark.parametrize("kind", VERIFIERS)
def test_every_verifier_answers_every_hook(kind):
    spec = one_spec_per_kind()[kind]
    verifier = get_verifier(kind)
    assert verifier.validate(spec) == []
    assert all(isinstance(s, TrustedSource) and s.field.startswith("verifier.") for s in verifier.test_sources(spec))
    assert verifier.vacuous_tests(spec) == []
    assert isinstance(verifier.agent_only(spec), str)
    assert isinstance(verifier.own_files(spec), frozenset)
    assert verifier.solution_language(spec) in ("", "python", "shell", "javascript")
    assert isinstance(verifier.reference_program(spec), str)
    assert spec.entry_point in verifier.entry_point_names(spec) or not spec.entry_point
    assert verifier.probes(spec)
    assert isinstance(verifier.mutants(spec), list)


def test_each_verifier_answers_for_its_own_config():
    asserts = EnvSpec(id="t/a", prompt="def inc(x):\n", entry_point="inc", reference="    return x + 1\n",
                      verifier={"kind": "python_asserts", "asserts": ["assert inc(1) == 2"], "setup": "import os\n",
                                "complete_prompt": True})
    verifier = get_verifier("python_asserts")
    assert verifier.test_sources(asserts) == [("verifier.asserts[0]", "assert inc(1) == 2", "python"),
                                              ("verifier.setup", "import os\n", "python")]
    assert verifier.own_files(asserts) == {"asserts_harness.py", "solution.py"}
    assert verifier.reference_program(asserts) == "def inc(x):\n    return x + 1\n"
    assert verifier.entry_point_names(asserts) == ("inc", "candidate")  # the harness binds both names
    assert get_verifier("python_tests").entry_point_names(asserts) == ("inc",)
    assert get_verifier("python_tests").test_sources(asserts) == []  # value cases are data, not code
    assert get_verifier("python_tests").own_files(asserts) == {"harness.py", "solution.py"}

    tests = [{"name": "noop", "cmd": "true"}, {"name": "value", "cmd": ["node", "{tests}/t.js"], "stdout": "1"}]
    agent = EnvSpec(id="t/w", prompt="p", reference="", runtime="bash",
                    verifier={"kind": "workspace_tests", "files": {"t.js": "x"}, "tests": tests})
    single = EnvSpec(**{**agent.__dict__, "verifier": {**agent.verifier, "solution_file": "src/a.js"}})
    workspace = get_verifier("workspace_tests")
    assert workspace.vacuous_tests(agent) == ["noop"]
    assert [s.language for s in workspace.test_sources(agent)] == ["javascript", "shell", "shell"]
    assert "edit script" in workspace.agent_only(agent)
    assert workspace.agent_only(single) == ""
    assert (workspace.own_files(agent), workspace.own_files(single)) == (frozenset(), {"src/a.js"})
    assert (workspace.solution_language(agent), workspace.solution_language(single)) == ("shell", "javascript")
    for kind in ("numeric", "scene"):  # the answer is data: nothing to scan, no files of their own
        assert get_verifier(kind).solution_language(agent) == ""
        assert not get_verifier(kind).own_files(agent)


@dataclass
class EchoConfig:
    kind: Literal["echo"]
    text: Annotated[str, Rule(min_len=1, doc="what to echo")]


def test_a_new_verifier_gets_sensible_defaults():
    echo = Verifier(kind="echo", config=EchoConfig, extract_solution=str, build_execution=host_only("echo"),
                    score=host_only("echo"))
    spec = EnvSpec(id="t/e", prompt="p", reference="hi", runtime="node", verifier={"kind": "echo", "text": ""})
    assert echo.validate(spec) == [("verifier.text", "must be a non-empty string, got ''")]
    assert echo.probes(spec) == {"empty solution": ""}
    assert echo.mutants(spec) == []
    assert (echo.test_sources(spec), echo.vacuous_tests(spec), echo.agent_only(spec), echo.own_files(spec)) == (
        [], [], "", frozenset())
    assert echo.solution_language(spec) == "javascript"
    assert echo.reference_program(spec) == "hi"
    assert echo.entry_point_names(spec) == ()
    assert echo.entry_point_names(replace(spec, entry_point="f")) == ("f",)
    assert echo.config_schema["properties"]["text"] == {"type": "string", "minLength": 1, "description": "what to echo"}


def test_admission_never_branches_on_the_verifier_kind():
    branch = re.compile(r"verifier_kind (==|!=|in)\b|AGENT_VERIFIERS|getattr\((get_)?verifier")
    offenders = [f"{path}:{n}" for path in Path("posttrain/admission").rglob("*.py")
                 for n, line in enumerate(path.read_text().splitlines(), 1) if branch.search(line)]
    assert offenders == []


@pytest.mark.parametrize("suite", sorted(p.name for p in SUITES.iterdir()))
def test_bundled_suites_stay_consistent(suite):
    loaded = load_suite(SUITES / suite)
    rows = consistency_rows(loaded, SandboxConfig(), AdmissionConfig())
    assert len(rows) == len(loaded.envs), [r.detail for r in rows if not r.passed]
    assert all(row.passed for row in rows), [r.detail for r in rows if not r.passed]


def test_hooks_feed_the_consistency_codes():
    config = {"kind": "workspace_tests", "files": {"check.py": "import json\nprint(json.dumps(1))\n"},
              "tests": [{"name": "runs", "cmd": "python3 -I {tests}/check.py"}]}
    spec = EnvSpec(id="t/w", prompt="p", reference="cat settings.ini\n", runtime="bash", verifier=config)
    codes = [code for code, _ in spec_problems(spec, SandboxConfig(), AdmissionConfig())]
    assert codes == ["consistency.contradictory_kind", "consistency.missing_file", "consistency.no_asserts"]

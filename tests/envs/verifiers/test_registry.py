"""The verifier registry: every kind provides what admission needs; ``verify_many`` routes host-only verifiers
around the sandbox and keeps input order; python_tests' probes fail and its mutants die in real bwrap."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from posttrain.config import DEMO_SUITE, SandboxConfig
from posttrain.envs import spec_json_schema
from posttrain.envs.spec import EnvSpec
from posttrain.envs.suite import load_spec
from posttrain.envs.verifiers import VERIFIERS, get_verifier, verify_many
from posttrain.sandbox import make_sandbox

pytestmark = pytest.mark.unit

CFG = SandboxConfig(batch_concurrency=2)


def test_every_kind_provides_probes_mutants_and_a_schema():
    assert VERIFIERS == ("numeric", "python_asserts", "python_tests", "scene", "workspace_tests")
    for kind in VERIFIERS:
        verifier = get_verifier(kind)
        assert verifier.kind == kind
        assert callable(verifier.probes)
        assert callable(verifier.mutants)
        assert verifier.config_schema["properties"]["kind"] == {"const": kind}
        assert verifier.needs_sandbox == (verifier.score_on_host is None)
    assert not get_verifier("numeric").needs_sandbox
    assert not get_verifier("scene").needs_sandbox


def test_committed_json_schema_is_current():
    assert json.loads(spec_json_schema.SCHEMA_FILE.read_text()) == spec_json_schema.spec_schema(), \
        "regenerate with: python -m posttrain.envs.spec_json_schema"


def test_the_committed_schema_says_no_destructive_command_judges_by_text_and_by_effect():
    evaluation = json.loads(spec_json_schema.SCHEMA_FILE.read_text())["properties"]["evaluation"]
    [named] = [arm for arm in evaluation["properties"]["behavior"]["anyOf"][0]["items"]["anyOf"] if "properties" in arm]
    for text in (named["properties"]["no_destructive_command"]["description"], evaluation["description"]):
        assert "by text" in text, text
        assert "by effect" in text, text
        assert "deleted or emptied" in text, text


def test_python_tests_probe_battery_covers_the_issue_list():
    spec = load_spec(Path(DEMO_SUITE) / "add_2.yaml")
    names = set(get_verifier("python_tests").probes(spec))
    assert {"empty program", "no-op def", "return None", "sys.exit(0) at import", "os._exit(0) at import",
            "raise SkipTest at import", "patch builtins.print", "replace sys.stdout", "fake pass lines"} <= names
    with_examples = EnvSpec(**{**spec.__dict__, "prompt": spec.prompt + "# add_2(1) == 3\n# >>> add_2(5)\n# 7\n"})
    table = get_verifier("python_tests").probes(with_examples)["hard-coded prompt outputs"]
    assert "((1,), 3)" in table
    assert "((5,), 7)" in table


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")
def test_mixed_batch_keeps_order_and_python_cheats_fail():
    demo = load_spec(Path(DEMO_SUITE) / "gt_3_mul_2.yaml")
    finance = load_spec(next(Path("posttrain/envs/suites/finance").glob("*.yaml")))
    room = load_spec(next(Path("posttrain/envs/suites/scene").glob("*.yaml")))
    verifier = get_verifier("python_tests")
    probes, mutants = verifier.probes(demo), verifier.mutants(demo)
    assert len(mutants) >= 5
    jobs = [(finance, finance.reference), (demo, demo.reference), (room, "{}"), (room, room.reference),
            (finance, "{}"), *[(demo, p) for p in probes.values()], *[(demo, m) for m in mutants]]
    box = make_sandbox(CFG)
    try:
        verdicts = verify_many(jobs, box, CFG)
    finally:
        box.close()
    assert [v.passed for v in verdicts[:5]] == [True, True, False, True, False]
    assert (verdicts[0].sandbox_ms, verdicts[0].sandbox_cpu_s, verdicts[0].sandbox_memory_peak_mb) == (0.0, None, None)
    assert verdicts[1].sandbox_ms > 0
    cheats = verdicts[5:5 + len(probes)]
    assert not {name: v.detail for name, v in zip(probes, cheats) if v.passed}
    killed = sum(not v.passed for v in verdicts[5 + len(probes):])
    assert killed / len(mutants) >= 0.8, [m for m, v in zip(mutants, verdicts[5 + len(probes):]) if v.passed]


def test_every_bundled_spec_validates_against_the_json_schema():
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(json.loads(spec_json_schema.SCHEMA_FILE.read_text()))
    files = sorted(Path("posttrain/envs/suites").rglob("*.yaml"))
    assert len(files) >= 410 + 12 + 12 + 12 + 6
    for file in files:
        errors = [e.message for e in validator.iter_errors(yaml.safe_load(file.read_text()))]
        assert not errors, (str(file), errors[:3])
    assert list(validator.iter_errors({"id": "x", "prompt": "p", "reference": "r",
                                       "verifier": {"kind": "scene", "bounds": {}}}))

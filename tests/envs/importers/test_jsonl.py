"""``import-jsonl``: HumanEval/MBPP-style records become loadable specs with host-decided verifiers; bad lines
are skipped with their line number and reason; the imported references pass in real bwrap sandboxes."""

from __future__ import annotations

import argparse
import json
import shutil

import pytest

from posttrain.config import SandboxConfig
from posttrain.envs.importers.jsonl import (ImportProblem, add_arguments, import_jsonl, import_jsonl_command,
                                            record_to_spec)
from posttrain.envs.suite import load_suite
from posttrain.envs.verifiers import get_verifier, verify_many
from posttrain.sandbox import make_sandbox
from tests import FIXTURES

pytestmark = pytest.mark.unit

HUMANEVAL, MBPP = FIXTURES / "humaneval_style.jsonl", FIXTURES / "mbpp_style.jsonl"


@pytest.fixture
def imported(tmp_path):
    for source, name in ((HUMANEVAL, "he"), (MBPP, "mbpp")):
        result = import_jsonl(source, tmp_path / name)
        assert len(result.written) == 3
        assert result.skipped == []
    return tmp_path


def test_fixtures_import_into_loadable_suites(imported):
    specs = {}
    for name in ("he", "mbpp"):
        suite = load_suite(imported / name)
        assert suite.rejections == []
        assert len(suite.envs) == 3
        specs.update({s.id: s for s in suite.envs})
    assert sorted(specs) == ["he/toy_0", "he/toy_1", "he/toy_2", "mbpp/101", "mbpp/102", "mbpp/103"]
    # literal `assert f(x) == y` everywhere: value cases decided on the host
    toy0 = specs["he/toy_0"].verifier
    assert toy0["kind"] == "python_tests"
    assert toy0["complete_prompt"] is True
    assert toy0["cases"][2] == {"args": [[-5, -7, -1]], "expected": [-5, -5, -1]}
    assert specs["mbpp/101"].verifier == {"kind": "python_tests", "cases": [
        {"args": ["Hello"], "expected": 2}, {"args": [""], "expected": 0}, {"args": ["AEIOU xyz"], "expected": 5}]}
    # a loop, tuples, math.isclose: assert mode; `assert True` dropped; helper statements kept with their assert
    toy1 = specs["he/toy_1"].verifier
    assert toy1["kind"] == "python_asserts"
    assert len(toy1["asserts"]) == 3
    assert toy1["asserts"][2].startswith("for word in")
    assert not any("tests nothing" in a for a in toy1["asserts"])
    toy2 = specs["he/toy_2"].verifier
    assert toy2["setup"] == "import math\n"
    assert toy2["asserts"][2].startswith("expected = [(-1, 4), (1, 2)]\n")
    assert specs["mbpp/102"].verifier["kind"] == "python_asserts"
    mbpp103 = specs["mbpp/103"]
    assert mbpp103.entry_point == "circle_area"
    assert len(mbpp103.verifier["asserts"]) == 4  # + challenge test
    assert "assert math.isclose(circle_area(1)" in mbpp103.prompt
    assert specs["he/toy_0"].reference.startswith(specs["he/toy_0"].prompt)


@pytest.mark.parametrize("record,reason", [
    ({"prompt": "x"}, "task_id: required field is missing"),
    ({"task_id": 1, "prompt": "def f():\n", "canonical_solution": "  pass\n", "entry_point": "f"},
     "test: required field is missing"),
    ({"task_id": 1, "prompt": "def f():\n", "canonical_solution": "  pass\n", "entry_point": "f",
      "test": "def other(c):\n    assert c() == 1\n"}, "no `def check(candidate)`"),
    ({"task_id": 1, "prompt": "def f():\n", "canonical_solution": "  pass\n", "entry_point": "f",
      "test": "def check(candidate):\n    assert True\n"}, "no assert calls the function under test"),
    ({"task_id": 1, "prompt": "def f():\n", "canonical_solution": "  pass\n", "entry_point": "f",
      "test": "def check(candidate:\n"}, "test: does not parse"),
    ({"task_id": 2, "text": "t", "code": "def g():\n    return 1\n", "test_list": ["assert h() == 1"]},
     "calls no function that `code` defines"),
    ({"task_id": 2, "text": "t", "code": "def g():\n    return 1\n", "test_list": []}, "non-empty list"),
    ({"task_id": 2, "code": "def g():\n    return 1\n", "test_list": ["assert g() == 1"]}, "text: required"),
])
def test_bad_records_are_refused_with_the_field(record, reason):
    with pytest.raises(ImportProblem) as error:
        record_to_spec(record, prefix="x", split="train")
    assert reason in str(error.value)


def test_bad_lines_are_skipped_with_line_numbers_and_the_rest_imported(tmp_path):
    good = MBPP.read_text().splitlines()[0]
    source = tmp_path / "mixed.jsonl"
    source.write_text("\n".join([good, "{not json", "", json.dumps({"task_id": 7}), good]) + "\n")
    result = import_jsonl(source, tmp_path / "out", prefix="mix", split="eval")
    assert [p.name for p in result.written] == ["101.yaml"]
    assert [n for n, _ in result.skipped] == [2, 4, 5]
    assert result.skipped[0][1].startswith("not JSON")
    assert "already exists" in result.skipped[2][1]
    assert load_suite(tmp_path / "out").envs[0].split == "eval"


def test_cli_command(tmp_path, capsys):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert import_jsonl_command(parser.parse_args([str(HUMANEVAL), str(tmp_path / "s"), "--prefix", "he"])) == 0
    out = capsys.readouterr().out
    assert "imported 3 envs" in out
    assert "1 python_tests" in out
    assert "2 python_asserts" in out
    assert import_jsonl_command(parser.parse_args([str(HUMANEVAL), str(tmp_path / "s")])) == 1  # all exist now
    assert "SKIPPED" in capsys.readouterr().out
    assert import_jsonl_command(argparse.Namespace(file=str(tmp_path / "nope.jsonl"), out=str(tmp_path))) == 1


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")
def test_imported_references_pass_and_cheats_fail_in_bwrap(imported):
    cfg = SandboxConfig(batch_concurrency=2)
    envs = load_suite(imported / "he").envs + load_suite(imported / "mbpp").envs
    jobs = [(spec, spec.reference) for spec in envs]
    toy0 = next(s for s in envs if s.id == "he/toy_0")
    body = ("    best = []\n    for n in numbers:\n        best.append(max(n, best[-1]) if best else n)\n"
            "    return best\n")
    jobs.append((toy0, body))  # a completion that only continues the prompt
    for spec in envs[:3]:
        probes = get_verifier(spec.verifier_kind).probes(spec)
        jobs += [(spec, probes[name]) for name in ("always-equal object", "os._exit(0) at import",
                                                   "hard-coded prompt outputs")]
    box = make_sandbox(cfg)
    try:
        verdicts = verify_many(jobs, box, cfg)
    finally:
        box.close()
    for (spec, _), verdict in zip(jobs[:len(envs) + 1], verdicts):
        assert verdict.passed, (spec.id, verdict.detail)
    for (spec, _), verdict in zip(jobs[len(envs) + 1:], verdicts[len(envs) + 1:]):
        assert not verdict.passed, (spec.id, verdict.detail)

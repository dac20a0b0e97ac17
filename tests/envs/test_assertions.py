"""Dual-track assertions: the accepted spec shapes, errors naming the file and field, and verdicts (True, False,
None = not applicable, never passed) from the verdict, the previous verdict and the step log."""

from __future__ import annotations

import json

import pytest
import yaml

from posttrain.envs.assertions import (ASSERTIONS, EvaluationSpecError, evaluate, evaluation_problems,
                                       evaluation_schema, parse_evaluation, spec_assertions)
from posttrain.envs.spec import EnvSpec
from posttrain.envs.verifiers.typed_config import json_schema, unwrap

pytestmark = pytest.mark.unit

SEED = """
evaluation:
  result:
    - tests_pass: true
    - no_regression: true
  behavior:
    - used_tool: edit_file
    - max_steps: 30
    - no_destructive_command: true
"""


def _step(turn, tool, error="", **arguments):
    return {"turn": turn, "tool": tool, "arguments": json.dumps(arguments), "error": error}


def test_the_seed_shape_and_bare_names_parse_alike():
    seed = yaml.safe_load(SEED)["evaluation"]
    bare = yaml.safe_load("result: [tests_pass, no_regression]\n"
                          "behavior: [{used_tool: edit_file}, {max_steps: 30}, no_destructive_command]")
    names = ["result/tests_pass", "result/no_regression", "behavior/used_tool/edit_file", "behavior/max_steps",
             "behavior/no_destructive_command"]
    assert [a.name for a in parse_evaluation(seed)] == [a.name for a in parse_evaluation(bare)] == names
    assert parse_evaluation(seed)[3].value == 30


def test_default_and_implicit_tests_pass():
    assert [a.name for a in parse_evaluation({})] == ["result/tests_pass"]
    assert [a.name for a in parse_evaluation(None)] == ["result/tests_pass"]
    assert [a.name for a in parse_evaluation({"behavior": ["no_destructive_command"], "result": None})] \
        == ["result/tests_pass", "behavior/no_destructive_command"]
    assert [a.name for a in parse_evaluation({"behavior": [{"used_tool": "bash"}, {"used_tool": "submit"}]})] \
        == ["result/tests_pass", "behavior/used_tool/bash", "behavior/used_tool/submit"]


@pytest.mark.parametrize("evaluation, field, reason", [
    (["tests_pass"], "evaluation", "must be a mapping of result: and behavior: lists, got list"),
    ({"results": []}, "evaluation.results", "unknown track 'results' (did you mean 'result'?)"),
    ({"result": "tests_pass"}, "evaluation.result", "must be a list, got str"),
    ({"behavior": [{"max_steps": 6}, "foo"]}, "evaluation.behavior[1]", "unknown assertion 'foo'; known: used_tool"),
    ({"behavior": ["max_step"]}, "evaluation.behavior[0]", "unknown assertion 'max_step' (did you mean 'max_steps'?)"),
    ({"result": [{"used_tool": "bash"}]}, "evaluation.result[0]",
     "'used_tool' is a behavior assertion: list it under evaluation.behavior"),
    ({"behavior": ["tests_pass"]}, "evaluation.behavior[0]", "'tests_pass' is a result assertion"),
    ({"behavior": [{"used_tool": "file_edit"}]}, "evaluation.behavior[0]",
     "used_tool: unknown tool 'file_edit' (did you mean 'edit_file'?)"),
    ({"behavior": ["used_tool"]}, "evaluation.behavior[0]", "used_tool: unknown tool True"),
    ({"behavior": [{"max_steps": 0}]}, "evaluation.behavior[0]", "max_steps: expected an integer >= 1, got 0"),
    ({"behavior": [{"max_steps": "6"}]}, "evaluation.behavior[0]", "max_steps: expected an integer >= 1, got '6'"),
    ({"behavior": [{"max_steps": True}]}, "evaluation.behavior[0]", "max_steps: expected an integer >= 1, got True"),
    ({"result": [{"no_regression": False}]}, "evaluation.result[0]", "no_regression: expected true, got False"),
    ({"behavior": [{"no_destructive_command": "yes"}]}, "evaluation.behavior[0]", "expected true, got 'yes'"),
    ({"behavior": [{"used_tool": "bash", "max_steps": 3}]}, "evaluation.behavior[0]",
     "must be an assertion name or one 'name: value' mapping"),
    ({"behavior": [7]}, "evaluation.behavior[0]", "must be an assertion name or one 'name: value' mapping, got 7"),
    ({"behavior": [{"max_steps": 3}, {"max_steps": 4}]}, "evaluation.behavior[1]",
     "duplicate assertion 'behavior/max_steps'"),
    ({"result": ["tests_pass", "tests_pass"]}, "evaluation.result[1]", "duplicate assertion 'result/tests_pass'"),
])
def test_bad_shapes_name_the_field(evaluation, field, reason):
    [(got_field, got_reason)] = evaluation_problems(evaluation)
    assert got_field == field, got_reason
    assert reason in got_reason, got_reason


def test_errors_name_the_spec_file_and_list_every_problem():
    with pytest.raises(EvaluationSpecError) as error:
        parse_evaluation({"behavior": [{"max_steps": 6}, "foo"], "result": [{"no_regression": 1}]}, "suite/x.yaml")
    lines = str(error.value).splitlines()
    assert lines[0] == "suite/x.yaml: evaluation.result[0]: no_regression: expected true, got 1 " \
                       "(leave the assertion out instead)"
    assert lines[1].startswith("suite/x.yaml: evaluation.behavior[1]: unknown assertion 'foo'")
    assert [f for f, _ in error.value.problems] == ["evaluation.result[0]", "evaluation.behavior[1]"]
    spec = EnvSpec(id="t/x", prompt="p", verifier={}, reference="", evaluation={"behavior": ["nope"]},
                   source="suites/t/x.yaml")
    with pytest.raises(EvaluationSpecError, match=r"^suites/t/x.yaml: evaluation.behavior\[0\]: unknown"):
        spec_assertions(spec)


SPEC = parse_evaluation({"result": ["no_regression"],
                         "behavior": [{"used_tool": "edit_file"}, {"max_steps": 2}, "no_destructive_command"]})


def test_verdicts_of_an_agent_episode():
    steps = [_step(0, "read_file", path="a.py"), _step(1, "edit_file", path="a.py", search="1", replace="2"),
             _step(1, "bash", command="pytest -q")]
    assert evaluate(SPEC, passed=True, previous=True, steps=steps) == {
        "result/tests_pass": True, "result/no_regression": True, "behavior/used_tool/edit_file": True,
        "behavior/max_steps": True, "behavior/no_destructive_command": True}
    worse = steps + [_step(2, "bash", command="rm -rf ~"), _step(3, "submit")]
    assert evaluate(SPEC, passed=False, previous=True, steps=worse) == {
        "result/tests_pass": False, "result/no_regression": False, "behavior/used_tool/edit_file": True,
        "behavior/max_steps": False, "behavior/no_destructive_command": False}


def test_a_rejected_call_is_not_a_use_of_the_tool():
    steps = [_step(0, "edit_file", error="missing argument 'search'"), _step(0, "", error="no_tool_call")]
    assert evaluate(SPEC, passed=False, steps=steps)["behavior/used_tool/edit_file"] is False
    assert evaluate(SPEC, passed=False, steps=[])["behavior/used_tool/edit_file"] is False


def test_not_applicable_is_never_passed():
    # no episode (single-turn env, or none recorded): every behavior assertion is n/a; no previous verdict: n/a
    assert evaluate(SPEC, passed=True) == {
        "result/tests_pass": True, "result/no_regression": None, "behavior/used_tool/edit_file": None,
        "behavior/max_steps": None, "behavior/no_destructive_command": None}
    # failed before: nothing to regress from
    assert evaluate(SPEC, passed=False, previous=False)["result/no_regression"] is True
    # unverified (infra error): result and progress assertions n/a, a destructive command still counts
    steps = [_step(0, "bash", command=":(){ :|:& };:")]
    assert evaluate(SPEC, passed=None, previous=True, steps=steps) == {
        "result/tests_pass": None, "result/no_regression": None, "behavior/used_tool/edit_file": None,
        "behavior/max_steps": None, "behavior/no_destructive_command": False}


def test_max_steps_counts_model_turns():
    calls = [_step(0, "bash", command="ls"), _step(0, "bash", command="cat a"), _step(1, "submit")]
    assert evaluate(SPEC, passed=True, steps=calls)["behavior/max_steps"] is True  # 2 turns, 3 calls
    assert evaluate(SPEC, passed=True, steps=calls + [_step(2, "submit")])["behavior/max_steps"] is False


def test_the_json_schema_accepts_what_the_parser_accepts():
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(evaluation_schema())
    good = [yaml.safe_load(SEED)["evaluation"], {}, {"result": None},
            {"result": ["tests_pass"], "behavior": ["no_destructive_command", {"used_tool": "bash"}]}]
    bad = [{"behavior": ["foo"]}, {"behavior": [{"max_steps": 0}]}, {"result": [{"used_tool": "bash"}]},
           {"behavior": [{"used_tool": "file_edit"}]}, {"behaviour": []}, {"result": [{"tests_pass": False}]},
           {"behavior": [{"used_tool": "bash", "max_steps": 3}]}]
    for evaluation in good:
        assert not evaluation_problems(evaluation), evaluation
        assert validator.is_valid(evaluation), evaluation
    for evaluation in bad:
        assert evaluation_problems(evaluation), evaluation
        assert not validator.is_valid(evaluation), evaluation
    assert set(ASSERTIONS) == {"tests_pass", "no_regression", "used_tool", "max_steps", "no_destructive_command"}


def test_each_assertion_value_is_declared_once_and_the_schema_comes_from_it():
    schema = evaluation_schema()["properties"]
    for name, kind in ASSERTIONS.items():
        assert unwrap(kind.value)[1].doc, f"{name}: declare its value with Rule(doc=...)"
        [named] = [arm for arm in schema[kind.track]["anyOf"][0]["items"]["anyOf"] if "properties" in arm]
        assert named["properties"][name] == json_schema(kind.value)
        assert kind.flag == (name in ("tests_pass", "no_regression", "no_destructive_command"))


def test_destructive_effects_on_the_workspace_fail_the_episode():
    # by effect: a task file deleted or emptied (workspace_effects) counts even when no command text shows it
    clean = [_step(0, "bash", command="python fix.py")]
    check = "behavior/no_destructive_command"
    assert evaluate(SPEC, passed=True, steps=clean, effects=["deleted task file app.ini"])[check] is False
    assert evaluate(SPEC, passed=True, steps=clean, effects=[])[check] is True
    assert evaluate(SPEC, passed=True, effects=["emptied task file a.py"])[check] is False  # effects without a log
    assert evaluate(SPEC, passed=True, steps=clean)[check] is True  # final workspace not observed: text alone

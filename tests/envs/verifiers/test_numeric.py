"""The host-only ``numeric`` verifier: tolerances, formula cross-validation, the safe evaluator, probes, mutants."""

from __future__ import annotations

import json

import pytest

from posttrain.config import SandboxConfig
from posttrain.envs.spec import EnvSpec
from posttrain.envs.suite import load_suite
from posttrain.envs.verifiers import get_verifier, verify_many
from posttrain.envs.verifiers.base import HostOnlyError
from posttrain.envs.verifiers.numeric import (FormulaError, evaluate, extract_solution, feedback, mutants,
                                              parse_formula, probes, score_on_host, validate)

pytestmark = pytest.mark.unit

REPORT = "Acme Corp, founded 1999, 120 staff.\n" + "filler text. " * 50 + "\nRevenue was 2,000.0; profit 500.0.\n"
CONFIG = {"kind": "numeric", "fields": {"revenue": {"value": 2000.0, "abs_tol": 0.05}, "profit": 500.0,
                                        "margin": {"value": 0.25, "abs_tol": 0.0005}},
          "rel_tol": 0.001, "formulas": ["margin = profit / revenue"], "formula_abs_tol": 0.001}
ANSWER = {"revenue": 2000.0, "profit": 500.0, "margin": 0.25}


def spec(**config) -> EnvSpec:
    return EnvSpec(id="t/acme", prompt=REPORT + "Give revenue, profit and margin as JSON.",
                   reference=json.dumps(ANSWER),
                   verifier={**CONFIG, **config}, domain="finance")


def test_a_right_answer_passes_and_every_check_counts():
    v = score_on_host(spec(), json.dumps(ANSWER))
    assert (v.passed, v.reward, v.tests_passed, v.tests_total, v.compiled) == (True, 1.0, 4, 4, True)
    assert v.detail == "4/4 checks passed"
    assert not v.excluded
    assert v.sandbox_ms == 0.0


@pytest.mark.parametrize("answer,passed,reason", [
    ({"revenue": "2,000.0", "profit": 500, "margin": 0.2502}, 4, ""),  # numeric strings, ints, within tolerance
    ({"revenue": 2000.0, "profit": 500.0, "margin": 0.26}, 2, "margin: got 0.26, expected 0.25"),
    ({"revenue": 2000.0, "profit": 510.0, "margin": 0.25}, 2, "formula margin = profit / revenue: 0.25 != 0.255"),
    ({"revenue": 2000.0, "profit": 500.0}, 2, "margin: missing"),
    ({"revenue": 2000.0, "profit": True, "margin": 0.25}, 2, "profit: not a number (true)"),
    ({"revenue": 0, "profit": 500.0, "margin": 0.25}, 2, "formula margin = profit / revenue: division by zero"),
    ({"revenue": "25%", "profit": 500.0, "margin": 0.25}, 2, "revenue: not a number"),
    ({"revenue": 7, "profit": 7, "margin": 1}, 0,
     "formula margin = profit / revenue: holds, but not credited while margin, profit, revenue are wrong"),
    ({"revenue": 2000.0, "profit": 20.0, "margin": 0.01}, 1, "holds, but not credited while margin, profit are"),
])
def test_field_and_formula_failures_have_reasons(answer, passed, reason):
    v = score_on_host(spec(), json.dumps(answer))
    assert v.tests_passed == passed, v.detail
    assert v.passed == (passed == 4), v.detail
    assert reason in v.detail


@pytest.mark.parametrize("text", ["", "no numbers here", "[1, 2]", '{"revenue": 1', "null"])
def test_unparseable_answers_fail_all_checks(text):
    v = score_on_host(spec(), text)
    assert (v.passed, v.compiled, v.tests_passed, v.tests_total) == (False, False, 0, 4)
    assert "not a JSON object" in v.detail


def test_extract_solution_takes_the_last_json_object_or_fenced_block():
    assert json.loads(extract_solution('prose {"a": 1} more {"revenue": 2, "x": {"y": 3}} end')) == {
        "revenue": 2, "x": {"y": 3}}
    assert json.loads(extract_solution('```json\n{"a": 5}\n```\nthen {"a": 6} in prose')) == {"a": 5}
    assert extract_solution("  nothing  ") == "nothing"


def test_evaluator_allows_arithmetic_only():
    assert evaluate("(a - b) / b", {"a": 3, "b": 2}) == 0.5
    assert evaluate("max(a, 2) ** 2 + abs(-b)", {"a": 1, "b": 3}) == 7.0
    for bad in ("__import__('os')", "a.real", "[a][0]", "a if a else b", "open('x')", "a < b", "lambda: 1",
                "(1).__class__", "a @ b", "'x' * 3"):
        with pytest.raises(FormulaError):
            evaluate(bad, {"a": 1, "b": 2})
    for bad_value in ("a / (b - 2)", "10 ** 400", "a ** 100", "c + 1"):
        with pytest.raises(FormulaError):
            evaluate(bad_value, {"a": 1, "b": 2})


@pytest.mark.parametrize("config,field,reason", [
    ({"fields": {}}, "verifier.fields", "mapping of 1..50"),
    ({"fields": {"a": "x"}}, "verifier.fields.a", "finite number"),
    ({"fields": {"a": {"value": 1, "tol": 2}}}, "verifier.fields.a", "'value' and optional"),
    ({"rel_tol": -1}, "verifier.rel_tol", "non-negative"),
    ({"formulas": ["margin = profit / revenu"]}, "verifier.formulas[0]", "unknown name 'revenu'"),
    ({"formulas": ["margin == profit"]}, "verifier.formulas[0]", "name = expression"),
    ({"formulas": ["margin = __import__('os').getpid()"]}, "verifier.formulas[0]", "not allowed"),
    ({"formulas": ["margin = revenue / profit"]}, "verifier.formulas[0]", "contradicts the expected values"),
    ({"extra": 1}, "verifier.extra", "unknown key"),
])
def test_validate_names_the_field(config, field, reason):
    problems = validate(spec(**config))
    assert any(where == field and reason in why for where, why in problems), problems


def test_probes_fail_and_mutants_are_killed():
    s = spec()
    assert validate(s) == []
    assert score_on_host(s, s.reference).passed
    found = probes(s)
    assert {"empty answer", "constant answer", "self-consistent garbage", "all zeros", "numbers from the first lines",
            "all NaN"} <= set(found)
    assert json.loads(found["self-consistent garbage"]) == {"revenue": 7, "profit": 7, "margin": 1}
    assert json.loads(found["constant answer"]) == {"revenue": 7, "profit": 7, "margin": 7}
    assert json.loads(probes(spec(fields={**CONFIG["fields"], "profit": 7}))["constant answer"])["profit"] == 8
    assert json.loads(found["numbers from the first lines"]) == {"revenue": 1999, "profit": 120, "margin": 2000.0}
    assert not any(score_on_host(s, text).passed for text in found.values())
    ms = mutants(s)
    assert len(ms) == 6
    assert not any(score_on_host(s, m).passed for m in ms)
    loose = spec(fields={"revenue": 2000.0, "profit": 500.0, "margin": 0.25}, rel_tol=0.5, formulas=[])
    assert sum(score_on_host(loose, m).passed for m in mutants(loose)) == 3  # +5 % survives a 50 % tolerance


def test_verify_many_scores_on_the_host_without_a_sandbox():
    class NoSandbox:
        name = "none"

        def run(self, execution):  # pragma: no cover - must never be called
            raise AssertionError("a host-only verifier started a sandbox")

    s = spec()
    verdicts = verify_many([(s, s.reference), (s, "{}")], NoSandbox(), SandboxConfig())
    assert [v.passed for v in verdicts] == [True, False]
    with pytest.raises(HostOnlyError, match="scores on the host"):
        get_verifier("numeric").build_execution(s, "{}", SandboxConfig(), "n")


def garbage(config: dict) -> str:
    """Every field 7, then each formula solved for its left-hand side: consistent with itself, not with the report."""
    values = dict.fromkeys(config["fields"], 7.0)
    for text in config.get("formulas", []) * 2:
        lhs, tree = parse_formula(text, set(values))
        values[lhs] = evaluate(tree, values)
    return json.dumps(values)


def test_self_consistent_garbage_earns_nothing_on_the_finance_suite():
    """Issue 22, finding 4: formulas recomputed from wrong values were checks of their own (0.26 before, 0 now)."""
    envs = load_suite("posttrain/envs/suites/finance").envs
    assert len(envs) == 12
    rewards = [score_on_host(s, garbage(s.verifier)).reward for s in envs]
    assert sum(rewards) / len(rewards) <= 0.02, rewards
    assert all(score_on_host(s, extract_solution(f"Answer: {s.reference}")).reward == 1.0 for s in envs)


@pytest.mark.parametrize("answer,lines", [
    ({**ANSWER, "profit": 400.0}, ["revenue: ok", "profit: does not match", "margin: ok",
                                    "formula margin = profit / revenue: does not reconcile", "2 of 4 checks pass"]),
    ({"revenue": "n/a", "margin": 0.3}, ["revenue: not a number", "profit: missing", "margin: does not match",
                                         "formula margin = profit / revenue: cannot be computed: profit is missing",
                                         "0 of 4 checks pass"]),
    (ANSWER, ["revenue: ok", "profit: ok", "margin: ok", "formula margin = profit / revenue: reconciles",
              "4 of 4 checks pass"]),
])
def test_feedback_says_which_checks_fail_on_the_verdicts_own_checks_and_never_a_value(answer, lines):
    passed, report = feedback(spec(), json.dumps(answer))
    assert report.splitlines() == lines
    assert passed == score_on_host(spec(), json.dumps(answer)).passed
    assert feedback(spec(), "not json") == (False, "the answer is not a JSON object of field values")

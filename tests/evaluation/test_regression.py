"""Per-env flips and the regression gate, on hand-built greedy verdicts (infra errors are never failures)."""

from __future__ import annotations

import pandas as pd
import pytest

from posttrain.evaluation.regression import flip_metrics, flips, regression_gate

pytestmark = pytest.mark.unit

INFRA = "sandbox did not start"


def table(verdicts: dict[str, bool | str], sampled: bool = False) -> pd.DataFrame:
    """Greedy rows (``INFRA`` for an infra error); ``sampled`` adds a failing sampled row per env (ignored)."""
    rows = [{"env_id": env, "decoding": "greedy", "passed": verdict is True,
             "infra_error": INFRA if verdict == INFRA else ""} for env, verdict in verdicts.items()]
    if sampled:
        rows += [{"env_id": env, "decoding": "sampled", "passed": False, "infra_error": ""} for env in verdicts]
    return pd.DataFrame(rows)


def test_flips_name_every_transition_and_unverified_sides():
    champion = table({"a": True, "b": True, "c": False, "d": False, "e": True, "f": True})
    candidate = table({"a": True, "b": False, "c": True, "d": False, "e": INFRA, "g": True}, sampled=True)
    got = flips(candidate, champion).set_index("env_id")["flip"].to_dict()
    assert got == {"a": "still_passing", "b": "broken", "c": "fixed", "d": "still_failing", "e": "unverified",
                   "f": "unverified", "g": "unverified"}


def test_gate_passes_without_a_champion():
    decision = regression_gate(table({"a": True, "b": False}), None)
    assert decision.passed
    assert decision.candidate_pass_at_1 == 0.5
    assert decision.reason == "no champion yet"


def test_gate_refuses_a_regression_even_when_pass_at_1_rises():
    champion = table({"a": True, "b": False, "c": False})
    candidate = table({"a": False, "b": True, "c": True})  # 2/3 > 1/3, but a regressed
    decision = regression_gate(candidate, champion)
    assert not decision.passed
    assert decision.regressions == ["a"]
    assert (decision.candidate_pass_at_1, decision.champion_pass_at_1) == (2 / 3, 1 / 3)


def test_gate_refuses_a_lower_pass_at_1_and_an_unverified_regression_env():
    champion = table({"a": True, "b": True, "c": False})
    lower = regression_gate(table({"a": True, "b": True, "c": False}).iloc[:2], champion)  # c missing: both verified
    assert lower.passed  # a, b both still pass: equal pass@1 over the envs both verified
    worse = regression_gate(table({"a": True, "b": False, "c": False}), champion, regression_envs=["a"])
    assert not worse.passed
    assert "pass@1 0.3333 < champion's 0.6667" in worse.reason
    infra = regression_gate(table({"a": INFRA, "b": True, "c": True}), champion)
    assert not infra.passed
    assert infra.regressions == ["a"]  # not proven to still pass


def test_gate_passes_an_equal_or_better_candidate_on_the_regression_set():
    champion = table({"a": True, "b": False})
    decision = regression_gate(table({"a": True, "b": True}, sampled=True), champion)
    assert decision.passed
    assert decision.regressions == []
    assert decision.candidate_pass_at_1 == 1.0


def test_a_configured_tolerance_admits_that_many_regressions_and_no_more():
    champion = table({"a": True, "b": True, "c": False, "d": False})
    candidate = table({"a": False, "b": True, "c": True, "d": True})  # breaks a, fixes c and d
    assert not regression_gate(candidate, champion).passed
    tolerant = regression_gate(candidate, champion, max_regressions=1)
    assert tolerant.passed
    assert tolerant.regressions == ["a"]
    assert "1 regression(s) tolerated: a" in tolerant.reason
    two_broken = table({"a": False, "b": False, "c": True, "d": True})
    assert not regression_gate(two_broken, champion, max_regressions=1).passed
    assert regression_gate(two_broken, champion, regression_envs=["c", "d"]).passed  # a, b outside the set


def test_flip_metrics_count_every_kind():
    got = flip_metrics(flips(table({"a": True, "b": False, "c": INFRA}), table({"a": False, "b": False, "c": True})))
    assert got == {"eval/flips/fixed": 1.0, "eval/flips/broken": 0.0, "eval/flips/still_passing": 0.0,
                   "eval/flips/still_failing": 1.0, "eval/flips/unverified": 1.0}

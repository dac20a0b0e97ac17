"""Stratified metrics by domain, difficulty and step bucket, with pass@k computed by hand; infra errors excluded;
assertion pass rates over applicable verdicts only, with the not-applicable counts."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from posttrain.evaluation.strata import COLUMNS, strata, strata_metrics

pytestmark = pytest.mark.unit

INFRA = "sandbox did not start"


def results() -> pd.DataFrame:
    """x (python, d1, 1 step): greedy pass, samples 3/4; y (python, d2, 3 steps): greedy fail, samples 1/3 plus an
    infra error; z (finance, d2, 1 step): greedy infra error, samples 0/2."""
    spec = {"x": ("python", 1, 1, True, [True, True, False, True]),
            "y": ("python", 2, 3, False, [False, True, False, INFRA]),
            "z": ("finance", 2, 1, INFRA, [False, False])}
    rows = []
    for env, (domain, difficulty, steps, greedy, samples) in spec.items():
        for decoding, verdict in [("greedy", greedy)] + [("sampled", s) for s in samples]:
            passed = verdict is True
            rows.append({"env_id": env, "domain": domain, "difficulty": difficulty, "decoding": decoding,
                         "steps": steps, "passed": passed, "infra_error": INFRA if verdict == INFRA else "",
                         "assertions": json.dumps({"result/tests_pass": passed})})
    return pd.DataFrame(rows)


def test_overall_and_per_stratum_pass_at_k_by_hand():
    table = strata(results(), ks=[1, 2, 4])
    assert list(table.columns) == COLUMNS
    m = strata_metrics(table)
    assert m["eval/pass_at_1"] == 0.5  # x passes, y fails, z unverified
    assert m["eval/pass_at_1_sampled"] == pytest.approx((3 / 4 + 1 / 3 + 0) / 3)
    # pass@2: x 1 - C(1,2)/C(4,2) = 1; y 1 - C(2,2)/C(3,2) = 2/3; z 1 - C(2,2)/C(2,2) = 0
    assert m["eval/pass_at_2_sampled"] == pytest.approx((1 + 2 / 3 + 0) / 3)
    assert m["eval/pass_at_4_sampled"] == 1.0  # only x has 4 usable samples
    assert m["eval/pass_at_1/domain_python"] == 0.5
    assert "eval/pass_at_1/domain_finance" not in m
    assert m["eval/pass_at_2_sampled/domain_finance"] == 0.0
    assert m["eval/pass_at_2_sampled/difficulty_2"] == pytest.approx(1 / 3)
    assert m["eval/pass_at_1/steps_2-3"] == 0.0
    assert m["eval/pass_at_1/steps_1"] == 1.0
    assert m["eval/assertion/result/tests_pass"] == 0.5
    envs = table.set_index(["stratum", "group", "metric"])["envs"]
    assert envs["all", "all", "pass_at_2_sampled"] == 3
    assert envs["all", "all", "pass_at_4_sampled"] == 1
    assert envs["steps", "1", "pass_at_1_sampled"] == 2
    assert envs["steps", "1", "pass_at_1"] == 1  # z: infra


def test_assertion_rates_count_applicable_verdicts_and_report_the_rest():
    """Greedy rows of five envs: a and b declare used_tool (a: used, b: no episode -> null), c and e declare only the
    default, d (infra error) is unverified: excluded, neither judged nor n/a."""
    verdicts = {"a": {"result/tests_pass": True, "behavior/used_tool/bash": True, "behavior/max_steps": False},
                "b": {"result/tests_pass": False, "behavior/used_tool/bash": None, "behavior/max_steps": None},
                "c": {"result/tests_pass": True},
                "d": {"result/tests_pass": None, "behavior/used_tool/bash": None, "behavior/max_steps": True},
                "e": {"result/tests_pass": True}}
    steps = {"a": 5, "b": 2, "c": 1, "d": 9, "e": 20}
    results = pd.DataFrame([{"env_id": e, "domain": "terminal" if e in "ab" else "python", "difficulty": 1,
                             "decoding": "greedy", "steps": steps[e], "passed": bool(v["result/tests_pass"]),
                             "infra_error": INFRA if e == "d" else "", "assertions": json.dumps(v)}
                            for e, v in verdicts.items()])
    table = strata(results, ks=[])
    rows = table.set_index(["stratum", "group", "metric"])
    assert rows.loc[("all", "all", "assertion/behavior/used_tool/bash"), ["envs", "not_applicable", "value"]].tolist() \
        == [1, 1, 1.0]
    assert rows.loc[("all", "all", "assertion/result/tests_pass"), ["envs", "not_applicable", "value"]].tolist() \
        == [4, 0, 3 / 4]
    assert rows.loc[("all", "all", "assertion/behavior/max_steps"), ["envs", "not_applicable", "value"]].tolist() \
        == [1, 1, 0.0]  # d's true is an infra row's: not counted
    python = rows.loc[("domain", "python", "assertion/result/tests_pass")]
    assert (python["envs"], python["not_applicable"]) == (2, 0)
    b_only = rows.loc[("steps", "2-3", "assertion/behavior/used_tool/bash")]  # declared, judged nowhere: NaN
    assert b_only["envs"] == 0
    assert b_only["not_applicable"] == 1
    assert pd.isna(b_only["value"])
    m = strata_metrics(table)
    assert "eval/assertion/behavior/used_tool/bash/steps_2-3" not in m  # NaN is not logged
    assert m["eval/assertion/behavior/used_tool/bash/steps_4-7"] == 1.0
    assert m["eval/not_applicable/assertion/behavior/used_tool/bash"] == 1.0
    assert m["eval/not_applicable/assertion/result/tests_pass"] == 0.0
    assert [g for g in dict.fromkeys(table[table["stratum"] == "steps"]["group"])] == ["1", "2-3", "4-7", "16+"]

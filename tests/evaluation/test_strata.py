"""Stratified metrics by domain, difficulty and step bucket, with pass@k computed by hand; infra errors excluded."""

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
    assert m["eval/pass_at_1/domain_python"] == 0.5 and "eval/pass_at_1/domain_finance" not in m
    assert m["eval/pass_at_2_sampled/domain_finance"] == 0.0
    assert m["eval/pass_at_2_sampled/difficulty_2"] == pytest.approx(1 / 3)
    assert m["eval/pass_at_1/steps_2-4"] == 0.0 and m["eval/pass_at_1/steps_1"] == 1.0
    assert m["eval/assertion/result/tests_pass"] == 0.5
    envs = table.set_index(["stratum", "group", "metric"])["envs"]
    assert envs["all", "all", "pass_at_2_sampled"] == 3 and envs["all", "all", "pass_at_4_sampled"] == 1
    assert envs["steps", "1", "pass_at_1_sampled"] == 2 and envs["steps", "1", "pass_at_1"] == 1  # z: infra

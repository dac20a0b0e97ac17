"""EvalResults and its summary against hand-computed values: greedy pass@1 and sampled pass@1, overall and per
difficulty, infra errors excluded from both and counted."""

from __future__ import annotations

import pandas as pd
import pytest

from posttrain.envs.spec import EnvSpec
from posttrain.evaluation.results import eval_results, summarize
from posttrain.schemas import EvalResults

pytestmark = pytest.mark.unit

INFRA = "sandbox did not start"
ENVS = {env_id: EnvSpec(id=env_id, prompt="p", verifier={"kind": "python_tests"}, reference="", difficulty=d)
        for env_id, d in (("x", 1), ("y", 1), ("z", 2))}


def _scored(rows: list[tuple[str, str, float | str]]) -> pd.DataFrame:
    """(env, decoding, reward or INFRA) -> what eval_results reads of a scored eval decode of policy v2."""
    counts: dict[tuple[str, str], int] = {}
    out = []
    for env_id, decoding, reward in rows:
        idx = counts[env_id, decoding] = counts.get((env_id, decoding), -1) + 1
        out.append({"env_id": env_id, "decoding": decoding, "sample_idx": idx, "policy_version": 2, "steps": 1,
                    "reward": 0.0 if reward == INFRA else reward, "infra_error": INFRA if reward == INFRA else ""})
    return pd.DataFrame(out)


def test_greedy_and_sampled_pass_at_1_per_difficulty():
    scored = _scored([
        ("x", "greedy", 1.0), ("y", "greedy", 0.5), ("z", "greedy", INFRA),
        ("x", "sampled", 1.0), ("x", "sampled", 1.0), ("x", "sampled", 0.0), ("x", "sampled", 1.0),  # 3/4
        ("y", "sampled", 0.5), ("y", "sampled", 0.0), ("y", "sampled", 1.0), ("y", "sampled", INFRA),  # 1/3
        ("z", "sampled", 1.0), ("z", "sampled", 0.0), ("z", "sampled", 0.0), ("z", "sampled", 0.0),  # 1/4
    ])
    table = eval_results(scored, ENVS)
    EvalResults.validate(table)
    assert table["sample_idx"].tolist() == [0, 0, 0, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3]
    assert table["passed"].sum() == 1 + 3 + 1 + 1  # only full rewards pass; an infra error never does
    summary = summarize(table)
    assert summary["eval/pass_at_1"] == 0.5  # x passes, y does not, z's infra error is excluded
    assert summary["eval/pass_at_1/difficulty_1"] == 0.5 and "eval/pass_at_1/difficulty_2" not in summary
    assert summary["eval/reward_mean"] == 0.75 and summary["eval/envs"] == 3.0
    assert summary["eval/infra_errors"] == 2.0  # z's greedy completion and one of y's samples
    assert summary["eval/pass_at_1_sampled"] == pytest.approx((3 / 4 + 1 / 3 + 1 / 4) / 3)
    assert summary["eval/pass_at_1_sampled/difficulty_1"] == pytest.approx((3 / 4 + 1 / 3) / 2)
    assert summary["eval/pass_at_1_sampled/difficulty_2"] == 0.25


def test_greedy_only_decode_logs_no_sampled_metric():
    summary = summarize(eval_results(_scored([("x", "greedy", 1.0), ("z", "greedy", 0.0)]), ENVS))
    assert summary == {"eval/pass_at_1": 0.5, "eval/reward_mean": 0.5, "eval/envs": 2.0, "eval/infra_errors": 0.0,
                       "eval/pass_at_1/difficulty_1": 1.0, "eval/pass_at_1/difficulty_2": 0.0}

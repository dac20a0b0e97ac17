"""Greedy pass@1 of the tiny policy on a few eval envs: decoded on the live vLLM engine, verified in bwrap."""

from __future__ import annotations

import pytest

from posttrain.config import DEMO_SUITE, EvalConfig, RolloutConfig, SandboxConfig
from posttrain.envs.suite import load_suite
from posttrain.evaluation.greedy import eval_envs, evaluate_policy
from posttrain.evaluation.results import summarize
from posttrain.schemas import EvalResults

pytestmark = pytest.mark.integration

pytest.importorskip("vllm", reason="vLLM is not installed (make install with EXTRA=cpu or gpu)")


def test_evaluate_policy_scores_greedy_completions_of_the_eval_split(tiny_policy):
    envs = {env.id: env for env in load_suite(DEMO_SUITE).envs}
    cfg = EvalConfig(limit=4, max_new_tokens=40)
    table = evaluate_policy(str(tiny_policy), envs, cfg, RolloutConfig(), SandboxConfig(), version=2)

    EvalResults.validate(table)
    assert list(table["env_id"]) == [e.id for e in eval_envs(envs, cfg)]
    assert all(envs[env_id].split == "eval" for env_id in table["env_id"])
    assert set(table["policy_version"]) == {2} and (table["infra_error"] == "").all()
    assert 0.0 <= summarize(table)["eval/pass_at_1"] <= 1.0

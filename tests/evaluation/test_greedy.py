"""Greedy and sampled pass@1 of the tiny policy on a few eval envs: decoded on the live vLLM engine, verified in
bwrap."""

from __future__ import annotations

import pytest

from posttrain.config import DEMO_SUITE, EvalConfig, RolloutConfig, SandboxConfig
from posttrain.envs.suite import load_suite
from posttrain.evaluation.greedy import decode_eval, eval_envs, evaluate_policy
from posttrain.evaluation.results import eval_metrics
from posttrain.schemas import EvalResults, EvalTrajectories

pytestmark = pytest.mark.integration

pytest.importorskip("vllm", reason="vLLM is not installed (make install with EXTRA=cpu or gpu)")


def test_evaluate_policy_scores_greedy_and_sampled_completions_of_the_eval_split(tiny_policy):
    envs = {env.id: env for env in load_suite(DEMO_SUITE).envs}
    cfg = EvalConfig(limit=4, max_new_tokens=40, samples=3)
    table = evaluate_policy(str(tiny_policy), envs, cfg, RolloutConfig(replicas=1), SandboxConfig(), version=2)

    EvalResults.validate(table)
    ids = [e.id for e in eval_envs(envs, cfg)]
    greedy, sampled = table[table["decoding"] == "greedy"], table[table["decoding"] == "sampled"]
    assert list(greedy["env_id"]) == ids
    assert list(sampled["env_id"]) == [i for i in ids for _ in range(3)]
    assert list(sampled["sample_idx"]) == [0, 1, 2] * len(ids)
    assert all(envs[env_id].split == "eval" for env_id in table["env_id"])
    assert set(table["policy_version"]) == {2}
    assert (table["infra_error"] == "").all()
    summary = eval_metrics(table)
    assert 0.0 <= summary["eval/pass_at_1"] <= 1.0
    assert 0.0 <= summary["eval/pass_at_1_sampled"] <= 1.0


def test_sampled_eval_is_seeded_alike_for_every_version(tiny_policy):
    from posttrain.rollout import live

    envs = {env.id: env for env in load_suite(DEMO_SUITE).envs}
    cfg, rollout = EvalConfig(limit=2, max_new_tokens=24, samples=4), RolloutConfig(replicas=1, temperature=1.0)
    first = decode_eval(live.acquire(str(tiny_policy), rollout, version=0), envs, cfg, rollout)
    again = decode_eval(live.acquire(str(tiny_policy), rollout, version=1), envs, cfg, rollout)

    EvalTrajectories.validate(first)
    sampled = first[first["decoding"] == "sampled"]
    assert len(sampled) == 8
    assert (first["decoding"] == "greedy").sum() == 2
    assert list(sampled["completion"]) == list(again[again["decoding"] == "sampled"]["completion"])
    assert sampled.groupby("env_id")["completion"].nunique().max() > 1  # at temperature 1: samples, not copies

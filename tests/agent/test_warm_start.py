"""Warm start data and build: oracle episodes become (exact context, call) pairs; the built agent policy ships the
agent chat template in its tokenizer, so ``ChatFormat`` uses it without being told."""

from __future__ import annotations

import pytest

from posttrain.agent.template import AGENT_TEMPLATE, ChatFormat
from posttrain.agent.warm_start import build_agent_policy, built_from, oracle_pairs
from posttrain.config import AgentConfig, DemoPolicyConfig
from posttrain.envs.generators.agent_repo import oracle, specs
from posttrain.envs.tools import tool_specs
from posttrain.sandbox import make_sandbox

pytestmark = pytest.mark.integration


def test_oracle_turns_become_pairs_and_the_policy_ships_the_template(fmt, tmp_path):
    envs = specs()[:2]
    box = make_sandbox("bwrap-warm")
    try:
        pairs = oracle_pairs(envs, [oracle(e) for e in envs], fmt, box, AgentConfig())
    finally:
        box.close()
    assert len(pairs) == 2 * 5
    assert all(call.startswith("<tool_call>") for _, call in pairs)
    first, second = pairs[0][0], pairs[1][0]
    assert not first.startswith(fmt.tokenizer.bos_token)
    assert second.startswith(first + pairs[0][1])
    assert "AssertionError" in second  # the failing test run's observation is in the next turn's context

    cfg = DemoPolicyConfig(sft_steps=2, sft_batch_size=4, max_position_embeddings=1024)
    sources = {"agent_suite": "digest-a", "single_turn_suite": "digest-b"}
    policy = build_agent_policy(tmp_path / "agent", cfg, pairs[:2], pairs, sources)
    # the cache check needs no oracle episode: the same config and sources find it, any other does not
    assert built_from(policy, cfg, sources)
    assert not built_from(policy, cfg, {**sources, "agent_suite": "digest-c"})
    assert not built_from(policy, DemoPolicyConfig(sft_steps=3, sft_batch_size=4, max_position_embeddings=1024),
                          sources)
    from transformers import AutoTokenizer

    built = ChatFormat(AutoTokenizer.from_pretrained(policy), tool_specs(["bash", "submit"]))
    assert built.template == AGENT_TEMPLATE
    assert built.tokenizer.chat_template == AGENT_TEMPLATE

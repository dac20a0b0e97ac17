"""Warm start data and build: oracle episodes become (exact context, call) pairs; the built agent policy ships the
agent chat template in its tokenizer, so ``ChatFormat`` uses it without being told. The long recipe's episodes
(regression hunts, finance correction) put what each call needs in its context (the diff before the fix, the report
before the answer) and are compressed under a small context budget; each named demo agent policy has a recipe and a
folder of its own; the multi-domain recipe trains on the train pairs of its single-turn suites, never an eval one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from posttrain.agent.template import AGENT_TEMPLATE, ChatFormat
from posttrain.agent.warm_start import RECIPES, build_agent_policy, built_from, oracle_pairs
from posttrain.config import DEMO_AGENT_POLICIES, AgentConfig, DemoPolicyConfig, LoopConfig, default_agent_policy_dir
from posttrain.envs.generators import finance_agent, regression_hunt
from posttrain.envs.generators.agent_repo import oracle, specs
from posttrain.envs.suite import load_suite
from posttrain.envs.tools import tool_specs
from posttrain.sandbox import make_sandbox



@pytest.mark.integration
def test_oracle_turns_become_pairs_and_the_policy_ships_the_template(fmt, tmp_path):
    envs = specs()[:2]
    box = make_sandbox("bwrap-warm")
    try:
        pairs = oracle_pairs(envs, [oracle(e) for e in envs], fmt, box, AgentConfig())
        with pytest.raises(ValueError, match=f"{envs[1].id}': 'max_steps'"):  # which env, and how it ended
            oracle_pairs(envs, [oracle(e) for e in envs], fmt, box, AgentConfig(max_steps=2))
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


@pytest.mark.integration
def test_the_long_recipes_episodes_hold_what_each_call_needs_and_are_compressed_under_a_budget(tokenizer):
    hunt = next(e for e in regression_hunt.warm_up_specs() if e.id.endswith("_h24_far"))
    finance = finance_agent.specs()[0]
    box = make_sandbox("bwrap-warm")
    try:
        pairs = {env.id: oracle_pairs([env], [env.oracle], ChatFormat(tokenizer, tool_specs(env.agent.get(
            "tools", ["bash", "edit_file", "submit"])), AGENT_TEMPLATE), box, AgentConfig(context_budget=256))
            for env in (hunt, finance)}
    finally:
        box.close()
    fix = next(call["arguments"] for call in hunt.oracle if call["name"] == "edit_file")
    context, call = pairs[hunt.id][4]
    assert '"edit_file"' in call and f"-    {fix['replace']}\n+    {fix['search']}" in context  # the diff, -U0
    assert "full text: .agent/state.md]" in context  # git log's output, over the budget, became its summary line
    context, call = pairs[finance.id][1]
    assert '"write_file"' in call and "Annual Report" in context  # the report read before the answer is written


@pytest.mark.unit
def test_each_named_demo_agent_policy_has_a_recipe_and_its_own_folder(monkeypatch):
    assert set(RECIPES) == set(DEMO_AGENT_POLICIES)
    folders = {name: default_agent_policy_dir(name) for name in DEMO_AGENT_POLICIES}
    assert len(set(folders.values())) == len(folders)
    monkeypatch.setenv("POSTTRAIN_AGENT_LONG_POLICY", "/elsewhere/long")
    assert default_agent_policy_dir("demo-agent-long") == "/elsewhere/long"
    assert default_agent_policy_dir() == folders["demo-agent"]
    long = RECIPES["demo-agent-long"]
    assert long.cfg.max_position_embeddings >= 2048 and long.suite.endswith("regression_hunt")
    assert long.agent.context_budget == LoopConfig.agent_long_demo().agent.context_budget  # trained as it will run
    assert {e.id.split("/")[0] for e in long.warm_up_envs()} == {"regression_hunt"}
    multi = RECIPES["demo-multi"]
    assert multi.single_turn == () and multi.agent_repeats > 1  # each domain's pairs come from its generator
    assert Path(multi.suite).name == "terminal_tasks"
    assert LoopConfig.multi_domain_demo().rollout.chat_template == "none"  # single-turn pairs are raw prompts
    assert {env.id.split("/")[0] for env in multi.warm_up_envs()} == {"terminal_tasks"}
    assert multi.cfg.copy_steps > 0 and multi.cfg.hidden_size // multi.cfg.num_heads in (32, 64)  # vLLM CPU sizes


SUITES = Path("posttrain/envs/suites")


def worked_sum_holds(line: str) -> bool:
    """``name = a + b = c`` (or ``-``) whose figures add up: ``cash_change = 40.6 - 20.4 = 20.2``."""
    match = re.fullmatch(r"[\w ]+ = ([\d.]+) ([+-]) ([\d.]+) = ([\d.]+)", line)
    if not match:
        return False
    a, sign, b, total = match.groups()
    return abs(float(a) + (1 if sign == "+" else -1) * float(b) - float(total)) < 1e-6


@pytest.mark.unit
def test_the_multi_domain_recipe_trains_on_every_domains_train_envs_never_an_eval_one():
    """Code as a quarter of the suite's train pairs (room for RL); finance and scenes as every train env's prompt with
    a worked reference (its lines quoted, each sum worked, then the answer the verifier passes), and more of them;
    copy drills;
    terminal episodes elsewhere."""
    from posttrain.envs.verifiers import get_verifier

    recipe = RECIPES["demo-multi"]
    made = dict(recipe.made_pairs())
    for suite in ("demo_python", "finance_facts", "scene_layouts"):
        envs = load_suite(SUITES / suite).envs
        train = [env for env in envs if env.split == "train"]
        assert len(train) >= 150 and sum(env.split == "eval" for env in envs) >= 40
        assert not {env.prompt for env in envs if env.split == "eval"} & set(made)
        if suite == "demo_python":
            code = [env for env in train if env.prompt in made]
            assert 50 <= len(code) <= len(train) // 3 and all(made[env.prompt] == env.reference for env in code)
            continue
        assert {env.prompt for env in train} <= set(made)
        verifier = get_verifier(envs[0].verifier["kind"])
        for env in train[::10]:
            worked = made[env.prompt]
            assert worked != env.reference and verifier.score_on_host(env, verifier.extract_solution(worked)).passed
            for line in worked.splitlines()[:-1]:  # quotes of the prompt, or a sum worked digit by digit
                assert line.strip("- ") in env.prompt or worked_sum_holds(line), (env.id, line)
    drills = [prompt for prompt in made if prompt.startswith("Copy these lines:")]
    assert len(drills) >= 6000 and all(made[prompt] in prompt for prompt in drills)
    assert len(made) > 20 * len(code)

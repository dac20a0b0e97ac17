"""Exact token accounting with the real vLLM engine on the demo policy: for multi-turn episodes, every context
window's segments concatenate to exactly the prompt token ids the engine reported receiving at the window's last turn
plus the tokens it sampled, and the loss mask covers only (and all) the model tokens, with the engine's logprobs.

The demo policy's 256 positions cannot hold a multi-turn episode (its 384-token BPE spends ~2 characters a token), so
the engine serves a copy of it with ``max_position_embeddings`` raised (``tests.with_positions``: same weights).
"""

from __future__ import annotations

import math

import pytest

from posttrain.agent.runner import AgentTask, run_episodes
from posttrain.agent.table import steps_table, trajectories_table
from posttrain.config import AgentConfig, RolloutConfig
from posttrain.sandbox import make_sandbox
from tests import with_positions
from tests.agent.conftest import Recording, assert_exact_tokens

pytestmark = pytest.mark.integration
pytest.importorskip("vllm")

CONTEXT = 2048


@pytest.fixture(scope="module")
def engine(demo_policy, tmp_path_factory):
    from posttrain.rollout.engine import VLLMEngine

    view = with_positions(demo_policy, tmp_path_factory.mktemp("agent_view") / "policy", CONTEXT)
    with VLLMEngine(str(view), RolloutConfig(replicas=1, max_model_len=CONTEXT), seed=0, version=0) as live:
        yield live


def test_multi_turn_episodes_are_exactly_the_tokens_the_engine_saw(engine, fmt):
    tasks = [AgentTask(env_id=f"t/{k}", group_id=f"g{k // 2}", sample_idx=k % 2, prompt=f"Task {k}: fix calc.py.",
                       files={"calc.py": "x = 1\n"}, domain="tight" if k % 2 else "agent") for k in range(4)]
    prompt_len = len(fmt.prompt_ids(tasks[0].messages()))
    cfg = AgentConfig(max_steps=4, max_new_tokens=32, temperature=1.0, keep_recent_turns=1, seed=3,
                      context_budgets={"tight": prompt_len + 150})  # odd tasks get compressed, even ones not
    recording = Recording(engine)
    box = make_sandbox("bwrap-warm")
    sessions = [box.session(timeout_s=5) for _ in tasks]
    try:
        episodes = run_episodes(recording, fmt, tasks, sessions, cfg, max_context=CONTEXT)
    finally:
        for s in sessions:
            s.close()

    assert recording.batches[0] == 4
    assert len(recording.batches) == max(len(e.turns) for e in episodes)
    for e in episodes:
        assert len(e.turns) >= 2
        assert e.finish_reason in ("max_steps", "submit", "token_budget")
        assert_exact_tokens(e, recording)
        assert all(math.isfinite(lp) and lp <= 0 for t in e.turns for lp in t.logprobs)
    assert all(not e.compressions for e in episodes[0::2])
    compressed = [e for e in episodes[1::2] if e.compressions]
    assert compressed, "the tight budget compressed no episode"
    for e in compressed:
        assert len(e.all_windows()) == len(e.compressions) + 1
        assert all(w[0].token_ids == e.prefix_ids for w in e.all_windows())

    rows = trajectories_table(episodes, fmt.tokenizer.decode, policy_version=engine.version, temperature=0.6)
    steps = steps_table(episodes, policy_version=engine.version)
    for e in episodes:
        mine = rows[(rows.group_id == e.group_id) & (rows.sample_idx == e.sample_idx)]
        assert mine.tokens.sum() == e.model_tokens  # every model token trained exactly once over the windows
        assert int(mine.steps.iloc[0]) == len(e.turns)
    assert len(steps) == sum(len(e.steps) for e in episodes)

    # prefix-cache reuse, measured: later turns re-send the earlier context, which the engine serves from its cache
    later = [t for e in episodes for t in e.turns if t.index > 0]
    first = [e.turns[0] for e in episodes]
    cached, sent = sum(t.cached_tokens for t in later), sum(t.prompt_tokens for t in later)
    reuse = cached / sent
    print(f"prefix cache: turns >= 1: {cached}/{sent} prompt tokens from the cache ({reuse:.1%}); turn 0: "
          f"{sum(t.cached_tokens for t in first)}/{sum(t.prompt_tokens for t in first)}")
    assert reuse > 0.5
    assert (steps.tokens_cached <= steps.tokens_in).all()


def test_generate_ids_takes_token_prompts_stops_at_strings_and_caps_each_prompt(engine, tokenizer):
    text = "# Write a function add_1(x) that returns x plus 1.\n"
    prompt = tokenizer(text).input_ids
    by_text = engine.generate([text], n=2, temperature=1.0, max_tokens=8, seed=5)  # the existing text path
    by_ids = engine.generate_ids([prompt], n=2, temperature=1.0, max_tokens=8, seed=5)
    assert [s.token_ids for s in by_text[0]] == [s.token_ids for s in by_ids[0]]
    assert by_text[0][0].prompt_token_ids == prompt
    groups = engine.generate_ids([prompt, prompt], n=2, temperature=1.0, max_tokens=[3, 40], seed=5, stop=["\n"])
    again = engine.generate_ids([prompt, prompt], n=2, temperature=1.0, max_tokens=[3, 40], seed=5, stop=["\n"])
    assert [[s.token_ids for s in g] for g in groups] == [[s.token_ids for s in g] for g in again]  # seeded
    assert all(s.prompt_token_ids == prompt for g in groups for s in g)
    assert all(len(s.token_ids) <= 3 for s in groups[0])
    stopped = [s for s in groups[1] if s.finish_reason == "stop"]
    assert stopped, "the demo policy wrote no newline in 40 tokens"
    for s in stopped:
        decoded = tokenizer.decode(s.token_ids)
        assert s.text.endswith("\n")
        assert decoded.startswith(s.text)
        assert "\n" not in decoded[:len(s.text) - 1]

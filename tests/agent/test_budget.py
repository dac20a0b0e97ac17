"""The context budget rules, each on its own: the stable prefix, recent turns verbatim, old observations as
one-line summaries once over budget (per-domain budgets), the state file's text, and the log of what was compressed."""

from __future__ import annotations

import logging

import pytest

from posttrain.agent.budget import budget_for, compress, observation_line, turns_to_compress
from posttrain.agent.episode import Episode, StepRecord, Turn, concat
from posttrain.config import AgentConfig

pytestmark = pytest.mark.unit

BIG = "line of output " * 40  # ~600 bytes per observation


def episode_with_turns(fmt, n: int, observation: str = BIG) -> Episode:
    """An episode of ``n`` finished turns, each a bash call with a long observation (or ``observation``), built as the
    runner does."""
    e = Episode("t/budget", "g", 0, fmt.prompt_ids([{"role": "user", "content": "Do the task."}]))
    for k in range(n):
        model_text = f'<tool_call>{{"name": "bash", "arguments": {{"command": "cat log{k}"}}}}</tool_call><|im_end|>'
        ids = fmt.encode(model_text)
        turn = Turn(k, len(e.context_ids()), ids, [-0.1] * len(ids), model_text, "stop")
        e.add_model_turn(turn)
        turn.steps.append(StepRecord(k, "bash", f'{{"command": "cat log{k}"}}', True, 0, 5.0, len(observation)))
        turn.observations.append(f"turn {k}: {observation}" if observation == BIG else observation)
        turn.closing_ids, turn.observation_ids = fmt.closing_ids(ids), fmt.observation_ids(turn.observations)
        e.add_template(turn)
    return e


def test_budget_per_domain_overrides_the_default():
    cfg = AgentConfig(context_budget=1000, context_budgets={"repo": 600})
    assert (budget_for("repo", cfg), budget_for("terminal", cfg)) == (600, 1000)


def test_nothing_is_compressed_under_budget(fmt):
    e = episode_with_turns(fmt, 3)
    before = [list(s.token_ids) for s in e.segments]
    assert compress(e, fmt, "agent", AgentConfig(context_budget=len(e.context_ids()))) is None
    assert [s.token_ids for s in e.segments] == before
    assert not e.windows
    assert not e.compressions


def test_over_budget_old_observations_become_summaries_and_recent_turns_stay_verbatim(fmt):
    e = episode_with_turns(fmt, 4)
    tokens_before = len(e.context_ids())
    cfg = AgentConfig(context_budget=tokens_before - 1, keep_recent_turns=2, summary_chars=20)
    record = compress(e, fmt, "agent", cfg)
    assert record.turns == [0, 1]
    assert record.turn == 3
    assert record.tokens_before == tokens_before > record.tokens_after == len(e.context_ids())
    for k in (0, 1):
        [summary] = e.turns[k].summaries
        assert summary == observation_line(e.turns[k].steps[0], e.turns[k].observations[0], 20, cfg.state_file)
        assert "\n" not in summary
        assert e.turns[k].observation_ids == fmt.observation_ids([summary])
        assert e.turns[k].steps[0].compressed_at_turn == 3
    for k in (2, 3):
        assert not e.turns[k].summaries
        assert e.turns[k].steps[0].compressed_at_turn == -1
        assert e.turns[k].observation_ids == fmt.observation_ids(e.turns[k].observations)
    assert fmt.tokenizer.decode(e.context_ids()).count(BIG) == 2


def test_the_stable_prefix_opens_every_window_and_closed_windows_are_kept(fmt):
    e = episode_with_turns(fmt, 4)
    old = list(e.segments)
    compress(e, fmt, "agent", AgentConfig(context_budget=10, keep_recent_turns=1))
    assert e.windows == [old[:-1]]
    assert old[-1].kind == "template"  # closed at its last model tokens
    assert e.segments[0].kind == "prompt"
    assert e.segments[0].token_ids == e.prefix_ids == old[0].token_ids
    assert [s.kind for s in e.segments] == ["prompt", "history"]
    # model tokens are re-sent verbatim (masked now: they were trained in the window where they were sampled)
    history, at = e.segments[1].token_ids, 0
    for turn in e.turns:
        assert history[at:at + len(turn.model_ids)] == turn.model_ids
        at += len(turn.model_ids) + len(turn.closing_ids) + len(turn.observation_ids)
    assert at == len(history)
    assert concat(e.segments) == e.prefix_ids + history


def test_state_file_text_keeps_the_full_observations(fmt):
    e = episode_with_turns(fmt, 3)
    compress(e, fmt, "agent", AgentConfig(context_budget=10, keep_recent_turns=1))
    assert e.state_text.count(BIG) == 2
    assert "## turn 0: bash" in e.state_text
    assert "## turn 1: bash" in e.state_text


def test_compressed_turns_are_not_compressed_again(fmt):
    e = episode_with_turns(fmt, 3)
    cfg = AgentConfig(context_budget=10, keep_recent_turns=1)
    assert compress(e, fmt, "agent", cfg).turns == [0, 1]
    assert compress(e, fmt, "agent", cfg) is None  # still over budget, but nothing left to compress
    assert turns_to_compress(context=11, budget=10, turns=3, compressed={0, 1}, keep_recent=1) == []


def test_every_compression_is_logged(fmt, caplog):
    e = episode_with_turns(fmt, 3)
    with caplog.at_level(logging.INFO, logger="posttrain.agent.budget"):
        compress(e, fmt, "agent", AgentConfig(context_budget=10, keep_recent_turns=1))
    assert "compressed turns [0, 1] at turn 2" in caplog.text
    assert len(e.compressions) == 1


def test_the_window_a_compression_would_open_is_measured_before_it_is_opened(fmt):
    e = episode_with_turns(fmt, 4)
    summaries = {k: fmt.observation_ids(["[bash exit 0, 600 B: turn ...]"]) for k in (0, 1)}
    predicted = e.reopened_length(summaries)
    for k, ids in summaries.items():
        e.turns[k].observation_ids = ids
    e.open_window()
    assert len(e.context_ids()) == predicted


def test_a_compression_that_would_outgrow_the_engines_context_is_not_made(fmt):
    """Summaries of short observations are longer than the observations: near the engine's limit the new window
    would leave no room for the next turn (a turn sent with max_tokens < 1 failed a whole rollout batch)."""
    e = episode_with_turns(fmt, 4, observation="ok")
    before = list(e.segments)
    cfg = AgentConfig(context_budget=10, keep_recent_turns=1)
    limit = len(e.context_ids()) + 1  # one token of room as it is
    assert compress(e, fmt, "agent", cfg, max_context=limit) is None
    assert e.segments == before and not e.windows and not e.compressions
    assert all(not t.summaries for t in e.turns) and not e.state_text
    record = compress(e, fmt, "agent", cfg, max_context=10_000)  # room enough: compressed, and longer than before
    assert record.turns == [0, 1, 2] and record.tokens_after > record.tokens_before


def test_after_a_turn_near_the_engines_limit_the_next_turn_still_has_room(fmt):
    from posttrain.agent.runner import AgentTask, after_turn, turn_room

    e = episode_with_turns(fmt, 3, observation="ok")
    e.config = AgentConfig(context_budget=10, keep_recent_turns=1, max_steps=20, token_budget=10_000)
    ids = fmt.encode('<tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call><|im_end|>')
    turn = Turn(3, len(e.context_ids()), ids, [-0.1] * len(ids), "", "stop")
    e.add_model_turn(turn)
    turn.steps.append(StepRecord(3, "bash", '{"command": "ls"}', True, 0, 5.0, 2))
    turn.observations.append("ok")
    limit = len(e.context_ids()) + len(fmt.closing_ids(ids)) + len(fmt.observation_ids(["ok"])) + 1
    assert after_turn(e, fmt, AgentTask("t/x", "p"), limit) is False  # not compressed: it would not fit
    assert e.active and turn_room(e, limit) == 1

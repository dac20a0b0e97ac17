"""The context budget of an agent episode: stable prefix first, recent turns verbatim, older observations as
one-line summaries once over budget, their full text kept in a state file in the workspace; every compression logged.

The rules, each a pure function here (the runner applies them after every turn):

1. the stable prefix (system prompt, tool definitions, task) is never touched: every window starts with the same
   tokens, so the engine's prefix cache serves it (``Episode.open_window``);
2. ``budget_for``: the env's domain budget (``AgentConfig.context_budgets``) or ``AgentConfig.context_budget``;
3. ``turns_to_compress``: once the context is over budget, every turn older than the last ``keep_recent_turns``
   whose observations are still verbatim;
4. ``observation_line``: one line per step (tool, exit code, size, the start of the first line);
5. ``state_entry``: the full observations, appended to ``AgentConfig.state_file`` so the agent can read them back.

Example:
    >>> from posttrain.agent.episode import StepRecord
    >>> step = StepRecord(turn=0, tool="bash", arguments='{"command": "pytest"}', ok=False, exit_code=1,
    ...                   duration_ms=12.0, observation_bytes=2048)
    >>> observation_line(step, "FAILED test_calc.py::test_add - assert 3 == 4\\n...", 30, ".agent/state.md")
    '[bash exit 1, 2048 B: FAILED test_calc.py::test_add ... full text: .agent/state.md]'
    >>> turns_to_compress(context=900, budget=800, turns=5, compressed={0}, keep_recent=2)
    [1, 2]
    >>> turns_to_compress(context=700, budget=800, turns=5, compressed=set(), keep_recent=2)
    []
"""

from __future__ import annotations

import logging
from collections.abc import Set

from posttrain.agent.episode import Compression, Episode, StepRecord
from posttrain.agent.template import ChatFormat
from posttrain.config import AgentConfig

log = logging.getLogger(__name__)


def budget_for(domain: str, cfg: AgentConfig) -> int:
    return cfg.context_budgets.get(domain, cfg.context_budget)


def turns_to_compress(context: int, budget: int, turns: int, compressed: Set[int], keep_recent: int) -> list[int]:
    """Indices of the turns whose observations become summaries now (none while ``context <= budget``)."""
    if context <= budget:
        return []
    return [k for k in range(max(0, turns - keep_recent)) if k not in compressed]


def observation_line(step: StepRecord, observation: str, chars: int, state_file: str) -> str:
    """One line standing in for ``observation``."""
    first = (observation.strip().splitlines() or [""])[0]
    head = first[:chars] + ("..." if len(first) > chars else "")
    code = "-" if step.exit_code is None else step.exit_code
    return f"[{step.tool or 'call'} exit {code}, {step.observation_bytes} B: {head} full text: {state_file}]"


def state_entry(turn: int, step: StepRecord, observation: str) -> str:
    """The state file's record of one compressed observation."""
    return f"## turn {turn}: {step.tool} {step.arguments}\n{observation}\n"


def compress(episode: Episode, fmt: ChatFormat, domain: str, cfg: AgentConfig,
             max_context: int | None = None) -> Compression | None:
    """Apply the rules to ``episode`` after a turn: summarize old observations, open a new window, log it.

    Returns the compression (also appended to ``episode.compressions``), or None when the context fits, or when the
    new window would leave no room to generate within ``max_context`` (the engine's context): the window re-sends the
    prefix and every turn, and a summary line is longer than a short observation, so near the engine's limit a
    compression can grow the context past it. The episode then goes on uncompressed and ends at its limit as any
    other. The caller writes ``episode.state_text`` to ``cfg.state_file`` in the workspace.
    """
    before = len(episode.context_ids())
    done = {k for k, t in enumerate(episode.turns) if t.summaries}
    chosen = turns_to_compress(before, budget_for(domain, cfg), len(episode.turns), done, cfg.keep_recent_turns)
    chosen = [k for k in chosen if episode.turns[k].observations]
    if not chosen:
        return None
    summaries = {k: [observation_line(s, o, cfg.summary_chars, cfg.state_file)
                     for s, o in zip(episode.turns[k].steps, episode.turns[k].observations)] for k in chosen}
    ids = {k: fmt.observation_ids(lines) for k, lines in summaries.items()}
    if max_context is not None and episode.reopened_length(ids) >= max_context:
        log.info("episode %s/%d: compressing turns %s would leave no room in %d tokens; not compressed",
                 episode.group_id, episode.sample_idx, chosen, max_context)
        return None
    now = len(episode.turns) - 1
    for k in chosen:
        turn = episode.turns[k]
        turn.summaries, turn.observation_ids = summaries[k], ids[k]
        episode.state_text += "".join(state_entry(k, s, o) for s, o in zip(turn.steps, turn.observations))
        for step in turn.steps:
            step.compressed_at_turn = now
    episode.open_window()
    record = Compression(turn=now, turns=chosen, tokens_before=before, tokens_after=len(episode.context_ids()))
    episode.compressions.append(record)
    log.info("episode %s/%d: compressed turns %s at turn %d: %d -> %d tokens", episode.group_id,
             episode.sample_idx, chosen, now, before, record.tokens_after)
    return record

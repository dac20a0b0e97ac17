"""Agent episodes as tables: ``AgentTrajectories`` (one row per context window, with its loss mask) and ``Steps``
(one row per tool call, with its turn's message and its observation, each clipped to ``STEP_TEXT_CHARS``) and
``EpisodeSnapshots`` (one row per workspace snapshot), linked by (group_id, sample_idx) and validated by their pandera
models.

Example:
    >>> from posttrain.agent.episode import Episode, StepRecord, Turn
    >>> e = Episode("t/ls", "g0", 0, [0, 5])
    >>> e.add_model_turn(Turn(0, 2, [7, 8], [-0.5, -0.25], "...", "stop"))
    >>> e.turns[0].steps.append(StepRecord(0, "submit", "{}", True, None, 0.1, 9))
    >>> e.finish("submit")
    >>> e.turns[0].observations.append("submitted")
    >>> steps_table([e], policy_version=0)[["tool", "tokens_in", "tokens_out", "exit_code", "cpu_s"]].values.tolist()
    [['submit', 2, 2, -1, -1.0]]
    >>> steps_table([e], policy_version=0)[["message", "observation"]].values.tolist()
    [['...', 'submitted']]
    >>> e.config = AgentConfig(tools=["bash", "submit"], max_steps=3)  # what the runner sets: episode_config
    >>> steps_table([e], policy_version=0)[["allowed_tools", "max_steps", "deadline_s"]].values.tolist()
    [['["bash", "submit"]', 3, 120.0]]
    >>> row = trajectories_table([e], decode=str, policy_version=0, temperature=0.6).iloc[0]
    >>> row.completion_token_ids, row.loss_mask, int(row.steps), int(row.tool_calls), row.finish_reason
    ('[7, 8]', '[1, 1]', 1, 1, 'submit')
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

import pandas as pd

from posttrain.agent.episode import Episode, StepRecord, split_prompt
from posttrain.config import AgentConfig
from posttrain.schemas import AgentTrajectories, EpisodeSnapshots, Steps, encode_floats, encode_ints, measured

STEP_TEXT_CHARS = 2000  # characters of a turn's message and of a call's observation kept in a Steps row


def steps_table(episodes: Sequence[Episode], policy_version: int) -> pd.DataFrame:
    """One row per step of ``episodes``, each with what its episode ran under (``budgets``)."""
    rows = [{"env_id": e.env_id, "group_id": e.group_id, "sample_idx": e.sample_idx, "policy_version": policy_version,
             "step": k, "turn": s.turn, "tool": s.tool, "arguments": s.arguments, "ok": s.ok,
             "exit_code": -1 if s.exit_code is None else s.exit_code, "error": s.error, "infra_error": s.infra_error,
             "duration_ms": s.duration_ms, "tokens_in": e.turns[s.turn].prompt_tokens,
             "tokens_cached": e.turns[s.turn].cached_tokens,
             "tokens_out": len(e.turns[s.turn].model_ids), "observation_bytes": s.observation_bytes,
             "message": clip(e.turns[s.turn].text), "observation": clip(observation),
             "compressed_at_turn": s.compressed_at_turn, "cpu_s": measured(s.cpu_s),
             "memory_peak_mb": measured(s.memory_peak_mb), **budgets(e.config)}
            for e in episodes for k, (s, observation) in enumerate(_calls(e))]
    return Steps.validate(pd.DataFrame(rows, columns=list(Steps.to_schema().columns)))


def _calls(episode: Episode) -> list[tuple[StepRecord, str]]:
    """Each step of ``episode`` with the observation it gave back (a turn records one per step, in order)."""
    return [pair for turn in episode.turns for pair in zip(turn.steps, turn.observations)]


def clip(text: str, chars: int = STEP_TEXT_CHARS) -> str:
    """``text`` cut to ``chars`` characters, saying how many it left out.

    >>> clip("x" * 10, 4)
    'xxxx\\n[... 6 more characters]'
    """
    return text if len(text) <= chars else f"{text[:chars]}\n[... {len(text) - chars} more characters]"


def snapshots_table(episodes: Sequence[Episode]) -> pd.DataFrame:
    """One ``EpisodeSnapshots`` row per workspace snapshot of ``episodes``, by episode then turn."""
    rows = [{"env_id": e.env_id, "group_id": e.group_id, "sample_idx": e.sample_idx, "turn": turn, "archive": data}
            for e in episodes for turn, data in sorted(e.snapshots.items())]
    return EpisodeSnapshots.validate(pd.DataFrame(rows, columns=list(EpisodeSnapshots.to_schema().columns)))


def budgets(cfg: AgentConfig) -> dict:
    """The ``Steps`` columns of what an episode ran under: its tools (a JSON list) and budgets."""
    return {"allowed_tools": json.dumps(list(cfg.tools)), "max_steps": cfg.max_steps,
            "max_new_tokens": cfg.max_new_tokens, "token_budget": cfg.token_budget,
            "context_budget": cfg.context_budget, "deadline_s": cfg.deadline_s}


def trajectories_table(episodes: Sequence[Episode], decode: Callable[[list[int]], str],
                       policy_version: int, temperature: float) -> pd.DataFrame:
    """One row per window; ``steps`` = model turns, ``tool_calls`` = calls that named a tool (episode totals);
    ``temperature``: the one the episodes' turns were sampled at (their logprobs are of that distribution)."""
    rows = []
    for e in episodes:
        calls = sum(1 for s in e.steps if s.tool and not s.error)
        for w, segments in enumerate(e.all_windows()):
            prompt, completion, mask, logprobs = split_prompt(segments)
            rows.append({"env_id": e.env_id, "group_id": e.group_id, "sample_idx": e.sample_idx,
                         "policy_version": policy_version, "prompt": decode(prompt), "completion": decode(completion),
                         "prompt_token_ids": encode_ints(prompt), "completion_token_ids": encode_ints(completion),
                         "behavior_logprobs": encode_floats(logprobs), "temperature": temperature, "steps": max(1, len(e.turns)),
                         "tool_calls": calls, "finish_reason": e.finish_reason, "tokens": sum(mask),
                         "window": w, "loss_mask": encode_ints(mask)})
    return AgentTrajectories.validate(pd.DataFrame(rows, columns=list(AgentTrajectories.to_schema().columns)))

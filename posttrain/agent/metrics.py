"""What a batch of agent episodes did, in numbers: ``AgentStats`` (from its ``AgentScored`` and ``Steps`` tables)
and the MLflow metrics the loop logs per iteration (``agent_metrics``).

Counting rules: an *episode* is one (group_id, sample_idx); a *model turn* is one (episode, turn) of the Steps table
(every turn records at least one step, a turn without a call too); a *tool call* is a step that named a tool and
was accepted (``error`` empty), whatever its exit code; a *failed* step is one with ``ok`` false (a failing
command, a rejected call, a turn without a call). ``solve_rate``: episodes whose final workspace passed every test
(``schemas.all_tests_passed``; the reward, its layers and shaping aside), of those without an infra error. What an
episode used in its sandbox (``episode_resources``): its tool calls' CPU seconds summed, the largest of their memory
peaks, their wall seconds summed (the ``Steps`` table's ``cpu_s``, ``memory_peak_mb``, ``duration_ms``; the
session's own work, such as writing the task's files and the verifier's run, is not a tool call).

Example (one solved episode of two turns, one episode cut at max_steps after a turn without a call):
    >>> import pandas as pd
    >>> scored = pd.DataFrame({"group_id": ["g", "g"], "sample_idx": [0, 1], "finish_reason": ["submit", "max_steps"],
    ...                        "verifier_reward": [1.0, 0.0], "reward": [1.0, 0.0], "infra_error": ["", ""],
    ...                        "tokens": [30, 40], "signals": ['{"guards": 1.0, "tests": 1.0}', '{"tests": 0.0}'],
    ...                        "tests_passed": [3, 0], "tests_total": 3})
    >>> steps = pd.DataFrame({"group_id": "g", "sample_idx": [0, 0, 0, 1], "turn": [0, 0, 1, 0],
    ...                       "tool": ["bash", "read_file", "submit", ""], "ok": [False, True, True, False],
    ...                       "error": ["", "", "", "no_tool_call"], "duration_ms": [500.0, 100.0, 0.0, 0.0],
    ...                       "tokens_in": [100, 100, 180, 100], "tokens_cached": [0, 0, 128, 64],
    ...                       "observation_bytes": [20, 30, 9, 60], "compressed_at_turn": [-1, -1, -1, -1],
    ...                       "cpu_s": [0.5, 0.25, -1.0, -1.0], "memory_peak_mb": [40.0, 3.0, -1.0, -1.0]})
    >>> stats = agent_stats(scored, steps, seconds=2.0)
    >>> stats.episodes, stats.model_turns, stats.tool_calls, stats.failed_calls, stats.finish_submit
    (2, 3, 3, 2, 1)
    >>> stats.solve_rate, stats.tool_calls_per_s, round(stats.prefix_cache_hit, 3), stats.tool_s
    (0.5, 1.5, 0.505, 0.6)
    >>> m = agent_metrics(stats, steps)
    >>> m["agent/steps_mean"], m["agent/tool_calls_mean"], m["agent/finish/submit"], m["agent/failed_call_fraction"]
    (1.5, 1.5, 0.5, 0.5)
    >>> m["agent/calls/bash"], m["agent/no_call_fraction"], m["agent/layer/tests"], m["agent/layer/guards"]
    (0.5, 0.25, 0.5, 1.0)
    >>> m["agent/cpu_s_mean"], m["agent/memory_peak_mb_max"], m["agent/tool_s_mean"]  # episode 1 ran no program
    (0.75, 40.0, 0.3)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from posttrain.agent.episode import FINISH_REASONS
from posttrain.reward import layer_means
from posttrain.schemas import UNACCOUNTED, all_tests_passed

EPISODE = ["group_id", "sample_idx"]


@dataclass
class AgentStats:
    """One batch of agent episodes (the rollout of an iteration, or a greedy eval), and the stage's timings."""

    episodes: int = 0
    model_turns: int = 0
    tool_calls: int = 0  # accepted calls (a tool named, arguments valid), whatever they returned
    failed_calls: int = 0  # steps with ok false: failing commands, rejected calls, turns without a call
    steps_mean: float = 0.0  # model turns per episode
    # how the episodes ended, one count per posttrain.agent.episode.FINISH_REASONS
    finish_submit: int = 0
    finish_max_steps: int = 0
    finish_token_budget: int = 0
    finish_deadline: int = 0
    finish_infra: int = 0
    infra_errors: int = 0  # episodes flagged infra_error (session or verifier): excluded from the update
    solved: int = 0  # episodes whose final workspace passed every test (schemas.all_tests_passed)
    solve_rate: float = 0.0  # solved / episodes without an infra error
    reward_mean: float = 0.0  # shaped reward, episodes without an infra error
    tokens: int = 0  # model tokens (trained)
    prompt_tokens: int = 0  # prompt tokens the engine received, over every turn
    cached_tokens: int = 0  # of those, served by the engine's prefix cache
    prefix_cache_hit: float = 0.0  # cached_tokens / prompt_tokens
    tool_s: float = 0.0  # summed duration of the tool calls (they overlap across episodes)
    generate_s: float = 0.0  # seconds inside the engine's generate calls
    seconds: float = 0.0  # the batch: sessions, episodes, verifier on the final workspaces
    tool_calls_per_s: float = 0.0  # tool_calls / seconds
    engine_start_s: float = 0.0  # the stage waited for a vLLM engine start (0 when the live engine was reused)
    engine_swap_s: float = 0.0  # the stage waited for the live engine's in-place weight swap
    wall_s: float = 0.0  # the whole stage (set by the task)
    memory_peak_mb: float = 0.0  # the stage's processes, engine and tool sandboxes included (posttrain.memory; task)
    layer: dict[str, float] = field(default_factory=dict)  # per verdict signal, its mean over the usable episodes
    # episodes that called check (an env-bound tool: posttrain.agent.check), of those without an infra error: how
    # many passed their first check (the first answer was right), how many passed at the end (after corrections)
    checked: int = 0
    first_check_passed: int = 0
    checked_final_passed: int = 0


def agent_stats(scored: pd.DataFrame, steps: pd.DataFrame, seconds: float = 0.0,
                generate_s: float = 0.0) -> AgentStats:
    """The stats of the episodes of ``scored`` (``AgentScored``, one row per window) and their ``steps``."""
    episodes = scored.drop_duplicates(EPISODE)
    usable = episodes[episodes["infra_error"] == ""]
    turns = steps.drop_duplicates([*EPISODE, "turn"])
    finish = episodes["finish_reason"].value_counts()
    tool_calls = int(((steps["tool"] != "") & (steps["error"] == "")).sum())
    prompt, cached = int(turns["tokens_in"].sum()), int(turns["tokens_cached"].sum())
    stats = AgentStats(
        episodes=len(episodes), model_turns=len(turns), tool_calls=tool_calls,
        failed_calls=int((~steps["ok"].astype(bool)).sum()),
        steps_mean=len(turns) / len(episodes) if len(episodes) else 0.0,
        **{f"finish_{reason}": int(finish.get(reason, 0)) for reason in FINISH_REASONS},
        infra_errors=int((episodes["infra_error"] != "").sum()),
        solved=int(all_tests_passed(usable).sum()),
        solve_rate=float(all_tests_passed(usable).mean()) if len(usable) else 0.0,
        reward_mean=float(usable["reward"].mean()) if len(usable) else 0.0,
        tokens=int(scored["tokens"].sum()), prompt_tokens=prompt, cached_tokens=cached,
        prefix_cache_hit=cached / prompt if prompt else 0.0,
        tool_s=round(float(steps["duration_ms"].sum()) / 1000, 6), generate_s=generate_s, seconds=seconds,
        tool_calls_per_s=tool_calls / seconds if seconds > 0 else 0.0, layer=layer_means(episodes),
        **check_outcomes(usable, steps))
    return stats


def check_outcomes(episodes: pd.DataFrame, steps: pd.DataFrame) -> dict[str, int]:
    """Of ``episodes`` (one row each) that called ``check``: how many (``checked``), how many of their first checks
    passed (``ok``: every field and formula right at the first try), how many passed at the end (the verdict on the
    final answer, ``schemas.all_tests_passed``).

    >>> episodes = pd.DataFrame({"group_id": "g", "sample_idx": [0, 1, 2], "tests_passed": [3, 3, 1],
    ...                          "tests_total": 3})
    >>> steps = pd.DataFrame({"group_id": "g", "sample_idx": [0, 0, 1, 2], "tool": ["check", "check", "check", "bash"],
    ...                       "error": "", "ok": [False, True, True, True]})
    >>> check_outcomes(episodes, steps)
    {'checked': 2, 'first_check_passed': 1, 'checked_final_passed': 2}
    """
    checks = steps[(steps["tool"] == "check") & (steps["error"] == "")]
    first = checks.drop_duplicates(EPISODE).set_index(EPISODE)["ok"].astype(bool)  # steps are in episode order
    final = pd.Series(all_tests_passed(episodes).to_numpy(), index=pd.MultiIndex.from_frame(episodes[EPISODE]))
    first = first[first.index.isin(final.index)]
    return {"checked": len(first), "first_check_passed": int(first.sum()),
            "checked_final_passed": int(final[first.index].sum())}


def agent_metrics(stats: AgentStats, steps: pd.DataFrame, prefix: str = "agent") -> dict[str, float]:
    """MLflow metrics of one batch of episodes (``prefix``: ``agent`` for the rollout, e.g. ``agent_eval`` for the
    greedy eval). Per episode: ``steps_mean`` (model turns), ``tool_calls_mean``, ``finish/<reason>`` (fraction of
    the episodes), ``solve_rate``, ``reward_mean``, ``layer/<signal>`` (each verdict signal's mean over the episodes
    without an infra error: what the rewards were made of); per step: ``failed_call_fraction``, ``no_call_fraction``
    (turns without a call), ``compressed_fraction`` (observations summarized by the context budget) and
    ``compressed_episode_fraction`` (episodes the budget compressed at least once, over all), ``calls/<tool>``
    (accepted calls of each tool, per episode); for the episodes that called ``check`` (mismatch feedback, e.g. the
    ``finance_agent`` suite; absent when none did): ``first_check_passed`` (their first answer was right) and
    ``checked_final_passed`` (their final answer is), the first try against the outcome after corrections;
    throughput and time: ``tool_calls_per_s``, ``prefix_cache_hit``,
    ``tokens``, ``seconds``, ``generate_s``, ``engine_start_s``, ``engine_swap_s``, ``wall_s``, ``memory_peak_mb`` (the
    stage's processes, engine included, when measured: ``posttrain.memory``); in the sandbox
    (``episode_resources``): ``tool_s_mean`` (wall seconds of the tool calls per episode), ``cpu_s_mean`` and
    ``cpu_s_max`` (CPU seconds per episode), ``memory_peak_mb_mean`` and ``memory_peak_mb_max`` (an episode's
    largest peak), over the episodes with a measure (absent when none has one: a backend that does not account).
    A batch without episodes gives ``episodes`` 0 alone."""
    p = prefix
    if stats.episodes == 0:
        return {f"{p}/episodes": 0.0}
    n = stats.episodes
    metrics = {
        f"{p}/episodes": float(n), f"{p}/steps_mean": stats.steps_mean, f"{p}/tool_calls_mean": stats.tool_calls / n,
        f"{p}/solve_rate": stats.solve_rate, f"{p}/reward_mean": stats.reward_mean,
        f"{p}/infra_errors": float(stats.infra_errors), f"{p}/tokens": float(stats.tokens),
        f"{p}/tool_calls_per_s": stats.tool_calls_per_s, f"{p}/prefix_cache_hit": stats.prefix_cache_hit,
        **{f"{p}/finish/{reason}": getattr(stats, f"finish_{reason}") / n for reason in FINISH_REASONS},
        **{f"{p}/{name}": float(getattr(stats, name))
           for name in ("seconds", "generate_s", "engine_start_s", "engine_swap_s", "wall_s")},
    }
    metrics.update({f"{p}/layer/{name}": value for name, value in stats.layer.items()})
    if stats.checked:
        metrics[f"{p}/first_check_passed"] = stats.first_check_passed / stats.checked
        metrics[f"{p}/checked_final_passed"] = stats.checked_final_passed / stats.checked
    if stats.memory_peak_mb:  # the task measures its processes once, for the rollout's metrics
        metrics[f"{p}/memory_peak_mb"] = stats.memory_peak_mb
    if len(steps):
        metrics[f"{p}/failed_call_fraction"] = float((~steps["ok"].astype(bool)).mean())
        metrics[f"{p}/no_call_fraction"] = float((steps["error"] == "no_tool_call").mean())
        metrics[f"{p}/compressed_fraction"] = float((steps["compressed_at_turn"] >= 0).mean())
        metrics[f"{p}/compressed_episode_fraction"] = compressed_episodes(steps) / n
        metrics[f"{p}/observation_bytes_mean"] = float(steps["observation_bytes"].mean())
        accepted = steps[(steps["tool"] != "") & (steps["error"] == "")]
        for tool, count in accepted["tool"].value_counts().sort_index().items():
            metrics[f"{p}/calls/{tool}"] = count / n
        metrics[f"{p}/tool_s_mean"] = stats.tool_s / n
        per_episode = episode_resources(steps)
        for name in ("cpu_s", "memory_peak_mb"):
            measured = per_episode.loc[per_episode[name] != UNACCOUNTED, name]
            if len(measured):
                metrics[f"{p}/{name}_mean"] = float(measured.mean())
                metrics[f"{p}/{name}_max"] = float(measured.max())
    return metrics


def compressed_episodes(steps: pd.DataFrame) -> int:
    """How many episodes of ``steps`` (``Steps``) the context budget compressed at least once."""
    return steps[steps["compressed_at_turn"] >= 0].groupby(["group_id", "sample_idx"]).ngroups


def episode_resources(steps: pd.DataFrame) -> pd.DataFrame:
    """Per episode of ``steps`` (``Steps``), what its tool calls used in the sandbox: ``cpu_s`` (CPU seconds,
    summed), ``memory_peak_mb`` (the largest peak), ``tool_s`` (wall seconds, summed); ``UNACCOUNTED`` where none of
    its calls has a measure.

    >>> steps = pd.DataFrame({"group_id": "g", "sample_idx": [0, 0, 1], "duration_ms": [300.0, 100.0, 0.0],
    ...                       "cpu_s": [0.5, 0.25, -1.0], "memory_peak_mb": [40.0, 3.0, -1.0]})
    >>> episode_resources(steps).values.tolist()
    [['g', 0, 0.75, 40.0, 0.4], ['g', 1, -1.0, -1.0, 0.0]]
    """
    measured = steps[["cpu_s", "memory_peak_mb"]].where(steps[["cpu_s", "memory_peak_mb"]] != UNACCOUNTED)
    episodes = steps[EPISODE].assign(cpu_s=measured["cpu_s"], memory_peak_mb=measured["memory_peak_mb"],
                                     tool_s=steps["duration_ms"] / 1000).groupby(EPISODE)
    return pd.DataFrame({"cpu_s": episodes["cpu_s"].sum(min_count=1),
                         "memory_peak_mb": episodes["memory_peak_mb"].max(),
                         "tool_s": episodes["tool_s"].sum()}).fillna(UNACCOUNTED).reset_index()

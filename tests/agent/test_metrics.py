"""The agent tier's numbers on hand-made tables: AgentStats from AgentScored + Steps rows, and the MLflow metrics
the loop logs per iteration (names, values, and a batch without episodes)."""

from __future__ import annotations

import json
from dataclasses import fields

import pandas as pd
import pandera.errors
import pytest

from posttrain.agent.episode import FINISH_REASONS
from posttrain.agent.metrics import AgentStats, agent_metrics, agent_stats, episode_resources
from posttrain.agent.table import budgets
from posttrain.config import AgentConfig
from posttrain.schemas import UNACCOUNTED, Steps, empty

pytestmark = pytest.mark.unit


def step(group: str, sample: int, turn: int, tool: str, ok: bool = True, error: str = "", tokens_in: int = 100,
         cached: int = 0, duration_ms: float = 10.0, compressed: int = -1, cpu_s: float = 0.05,
         memory_peak_mb: float = 4.0) -> dict:
    ran = tool not in ("", "submit") and not error  # a program ran for the call, and was measured
    return {"env_id": group.split("/", 1)[1], "group_id": group, "sample_idx": sample, "policy_version": 2,
            "step": 0, "turn": turn, "tool": tool, "arguments": json.dumps({}), "ok": ok, "exit_code": 0 if ok else 1,
            "error": error, "infra_error": "", "duration_ms": duration_ms, "tokens_in": tokens_in,
            "tokens_cached": cached, "tokens_out": 20, "observation_bytes": 40, "message": "", "observation": "",
            "compressed_at_turn": compressed,
            "cpu_s": cpu_s if ran else UNACCOUNTED, "memory_peak_mb": memory_peak_mb if ran else UNACCOUNTED,
            **budgets(AgentConfig())}


def episode(group: str, sample: int, finish: str, verifier: float, reward: float, tokens: int, windows: int = 1,
            infra: str = "") -> list[dict]:
    return [{"env_id": group.split("/", 1)[1], "group_id": group, "sample_idx": sample, "window": w,
             "finish_reason": finish, "verifier_reward": verifier, "reward": reward, "infra_error": infra,
             "tests_passed": int(verifier == 1.0), "tests_total": 1,
             "tokens": tokens // windows, "signals": json.dumps({"tests": verifier})} for w in range(windows)]


@pytest.fixture
def tables():
    """Four episodes of env a (group it3/t/a): solved after 3 turns (two windows: a compression), cut at max_steps
    after two turns without a call, cut by the token budget after one failing command, and one whose session
    failed (infra: no turns); one of env b, solved in one turn."""
    steps = [step("it3/t/a", 0, 0, "bash", ok=False, duration_ms=400.0, cpu_s=0.35, memory_peak_mb=120.0),
             step("it3/t/a", 0, 1, "read_file", tokens_in=300, cached=256, compressed=2),
             step("it3/t/a", 0, 1, "edit_file", tokens_in=300, cached=256),
             step("it3/t/a", 0, 2, "submit", tokens_in=500, cached=256),
             step("it3/t/a", 1, 0, "", ok=False, error="no_tool_call"),
             step("it3/t/a", 1, 1, "", ok=False, error="no_tool_call", tokens_in=200, cached=128),
             step("it3/t/a", 2, 0, "bash", ok=False),
             step("it3/t/b", 0, 0, "submit")]
    for k, row in enumerate(steps):  # index of the call within its episode
        row["step"] = sum(1 for r in steps[:k] if (r["group_id"], r["sample_idx"]) ==
                          (row["group_id"], row["sample_idx"]))
    scored = [*episode("it3/t/a", 0, "submit", 1.0, 0.9, 120, windows=2), *episode("it3/t/a", 1, "max_steps", 0, 0, 64),
              *episode("it3/t/a", 2, "token_budget", 0, 0, 96), *episode("it3/t/a", 3, "infra", 0, 0, 0,
                                                                          infra="workspace not prepared: gone"),
              *episode("it3/t/b", 0, "submit", 1.0, 1.0, 30)]
    return pd.DataFrame(scored), Steps.validate(pd.DataFrame(steps))


def test_stats_count_episodes_turns_calls_and_finish_reasons(tables):
    scored, steps = tables
    stats = agent_stats(scored, steps, seconds=4.0, generate_s=1.5)
    assert (stats.episodes, stats.model_turns, stats.steps_mean) == (5, 7, 7 / 5)
    assert (stats.tool_calls, stats.failed_calls) == (6, 4)  # 6 accepted; failed: bash x2, no call x2
    assert (stats.finish_submit, stats.finish_max_steps, stats.finish_token_budget, stats.finish_deadline,
            stats.finish_infra) == (2, 1, 1, 0, 1)
    assert (stats.infra_errors, stats.solved, stats.solve_rate) == (1, 2, 0.5)  # 2 of the 4 usable episodes
    assert stats.reward_mean == pytest.approx((0.9 + 0 + 0 + 1.0) / 4)
    assert stats.tokens == 120 + 64 + 96 + 30
    # prompt tokens once per turn, not per call: 100 + 300 + 500 + 100 + 200 + 100 + 100
    assert (stats.prompt_tokens, stats.cached_tokens) == (1400, 256 + 256 + 128)
    assert stats.prefix_cache_hit == pytest.approx(640 / 1400)
    assert stats.tool_calls_per_s == 6 / 4.0
    assert stats.generate_s == 1.5
    assert stats.tool_s == pytest.approx((400 + 7 * 10) / 1000)


def test_metrics_have_the_loop_names_and_per_episode_values(tables):
    scored, steps = tables
    stats = agent_stats(scored, steps, seconds=4.0)
    stats.engine_swap_s, stats.wall_s = 0.02, 9.0
    m = agent_metrics(stats, steps)
    assert m["agent/episodes"] == 5
    assert m["agent/steps_mean"] == pytest.approx(1.4)
    assert m["agent/tool_calls_mean"] == 6 / 5
    assert m["agent/solve_rate"] == 0.5
    assert {r: m[f"agent/finish/{r}"] for r in FINISH_REASONS} == {
        "submit": 0.4, "max_steps": 0.2, "token_budget": 0.2, "deadline": 0.0, "infra": 0.2}
    assert m["agent/failed_call_fraction"] == 4 / 8
    assert m["agent/no_call_fraction"] == 2 / 8
    assert m["agent/compressed_fraction"] == 1 / 8
    assert m["agent/compressed_episode_fraction"] == 1 / 5  # one episode of five had an observation summarized
    assert m["agent/tool_calls_per_s"] == 1.5
    assert {k: v for k, v in m.items() if k.startswith("agent/calls/")} == {
        "agent/calls/bash": 2 / 5, "agent/calls/edit_file": 1 / 5, "agent/calls/read_file": 1 / 5,
        "agent/calls/submit": 2 / 5}
    assert (m["agent/engine_swap_s"], m["agent/wall_s"], m["agent/engine_start_s"]) == (0.02, 9.0, 0.0)
    assert m["agent/layer/tests"] == 0.5  # per episode, not per window; the infra episode left out (else 0.4)
    assert all(isinstance(v, float) for v in m.values())
    assert set(agent_metrics(stats, steps, prefix="agent_eval")) == {k.replace("agent/", "agent_eval/", 1) for k in m}


def test_resources_per_episode_sum_cpu_take_the_largest_peak_and_skip_what_ran_no_program(tables):
    scored, steps = tables
    per_episode = episode_resources(steps).set_index(["group_id", "sample_idx"])
    assert per_episode.loc[("it3/t/a", 0)].tolist() == pytest.approx([0.35 + 0.05 + 0.05, 120.0, 0.43])
    assert per_episode.loc[("it3/t/a", 1)].tolist() == [UNACCOUNTED, UNACCOUNTED, 0.02]  # no call: no program
    assert per_episode.loc[("it3/t/a", 2)].tolist() == pytest.approx([0.05, 4.0, 0.01])
    m = agent_metrics(agent_stats(scored, steps, seconds=4.0), steps)
    measured = [0.45, 0.05]  # episodes a/0 and a/2; a/1 ran nothing, a/3 never started, b/0 only submitted
    assert m["agent/cpu_s_mean"] == pytest.approx(sum(measured) / 2)
    assert m["agent/cpu_s_max"] == pytest.approx(0.45)
    assert (m["agent/memory_peak_mb_mean"], m["agent/memory_peak_mb_max"]) == (62.0, 120.0)
    assert m["agent/tool_s_mean"] == pytest.approx((400 + 7 * 10) / 1000 / 5)


def test_resource_metrics_are_absent_where_nothing_was_measured(tables):
    scored, steps = tables
    unaccounted = steps.assign(cpu_s=UNACCOUNTED, memory_peak_mb=UNACCOUNTED)
    m = agent_metrics(agent_stats(scored, unaccounted, seconds=4.0), unaccounted)
    assert not [k for k in m if "cpu_s" in k or "memory_peak" in k]
    assert m["agent/tool_s_mean"] > 0


@pytest.mark.parametrize("bad", [-0.5, float("nan")])
def test_the_steps_table_takes_a_measure_or_the_unaccounted_sentinel_only(tables, bad):
    _, steps = tables
    with pytest.raises(pandera.errors.SchemaError):
        Steps.validate(steps.assign(cpu_s=bad))


def test_a_batch_without_episodes_reports_zero_episodes_only():
    assert agent_metrics(AgentStats(), empty(Steps)) == {"agent/episodes": 0.0}


def test_every_finish_reason_has_its_count_field():
    names = {f.name for f in fields(AgentStats)}
    assert {f"finish_{reason}" for reason in FINISH_REASONS} <= names

"""The agent tier in the RL loop, through ``pyflyte run`` (``conftest.stale_tiers_run``, shared with
``test_staleness.py``): a suite of single-turn demo envs and ``agent_repo`` envs runs both tiers per policy version
(``sample`` and ``agent_sample`` nodes), the update trains on both (agent windows with their loss masks), and MLflow
gets the agent metrics, the step tables and one eval table for both tiers.
"""

from __future__ import annotations

import json

import pytest

from posttrain.tracking.run_report import REPORT_PATH

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_the_loop_runs_the_agent_tier_beside_the_single_turn_one(stale_tiers_run):
    by_iteration = stale_tiers_run.iterations()
    baseline, last = by_iteration[0], by_iteration[max(by_iteration)]  # the versions evaluated: v0 and the last
    m = last.data.metrics
    assert m["agent/episodes"] == 4
    assert m["agent_eval/episodes"] == 2
    assert baseline.data.metrics["agent_eval/episodes"] == 2
    assert 1 <= m["agent/steps_mean"] <= 2
    assert m["rollout/samples"] == 4  # both tiers: 2 envs x 2 samples each
    for k in sorted(by_iteration)[1:]:  # the agent tier's task is a named stage of each window, not overhead
        t = by_iteration[k].data.metrics
        assert t["time/agent_s"] > 0
        stages = sum(t[f"time/{stage}_s"] for stage in ("sample", "reward", "update", "agent", "eval_score", "untimed"))
        assert abs(stages - t["time/iteration_s"]) < 0.05, t  # all of it, once: no stage from another window
    for name in ("agent_steps", "agent_eval_steps", "scored", "eval_results"):
        assert f"tables/{name}.parquet" in {f.path for f in stale_tiers_run.client.list_artifacts(
            last.info.run_id, "tables")}

    trained, results = (stale_tiers_run.table(last, name) for name in ("scored", "eval_results"))
    agent_rows = trained[trained["loss_mask"].notna()]
    assert agent_rows["env_id"].str.startswith("agent_repo/").all()
    assert agent_rows["group_id"].nunique() == 2
    assert len(trained) - len(agent_rows) == 4
    assert agent_rows["advantage"].notna().all() or (agent_rows["infra_error"] != "").any()
    assert (results["decoding"] == "greedy").sum() == 4  # 2 single-turn + 2 agent eval envs
    assert results.groupby("env_id")["steps"].max().max() >= 1
    # the suite's declared assertions (agent_repo's EVALUATION), no_regression judged against v0's results
    agent_eval = results[results["env_id"].str.startswith("agent_repo/") & (results["infra_error"] == "")]
    assert len(agent_eval) == 2
    assert all(isinstance(json.loads(a)["result/no_regression"], bool) for a in agent_eval["assertions"])
    for name in ("result/no_regression", "behavior/used_tool/bash", "behavior/max_steps",
                 "behavior/no_destructive_command"):
        assert f"eval/assertion/{name}" in m
    assert "eval/assertion/result/no_regression" not in baseline.data.metrics  # v0 had no version before it
    parent = next(r for r in stale_tiers_run.client.search_runs([last.info.experiment_id])
                  if "posttrain.iteration" not in r.data.tags)
    page = open(stale_tiers_run.client.download_artifacts(parent.info.run_id, REPORT_PATH,
                                                          str(stale_tiers_run.folder))).read()
    assert "assertion pass rates" in page
    assert '<td class="label">behavior/max_steps</td>' in page

"""The agent tier in the RL loop, through ``pyflyte run``: a suite of single-turn demo envs and ``agent_repo`` envs
runs both tiers per policy version (``sample`` and ``agent_sample`` nodes), the update trains on both (agent windows
with their loss masks), and MLflow gets the agent metrics, the step tables and one eval table for both tiers.

The tiny policy's 256 positions cannot hold an episode, so the loop starts from a copy of it with
``max_position_embeddings`` raised (same weights), as ``tests/agent/test_exact_tokens.py`` does.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from posttrain.config import DEMO_SUITE
from tests import run_rl_loop

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

AGENT_SUITE = Path(DEMO_SUITE).parent / "agent_repo"


@pytest.fixture
def mixed_suite(tmp_path) -> Path:
    """12 single-turn demo envs and every agent_repo env in one folder."""
    suite = tmp_path / "mixed"
    shutil.copytree(AGENT_SUITE, suite)
    for spec in sorted(Path(DEMO_SUITE).glob("*.yaml"))[:12]:
        shutil.copy(spec, suite / spec.name)
    return suite


@pytest.fixture
def long_policy(tiny_policy, tmp_path) -> Path:
    view = tmp_path / "policy"
    shutil.copytree(tiny_policy, view)
    config = json.loads((view / "config.json").read_text())
    (view / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 1024}))
    return view


def test_the_loop_runs_the_agent_tier_beside_the_single_turn_one(tmp_path, mixed_suite, long_policy):
    cfg = {"iterations": 1, "suite": str(mixed_suite), "policy": str(long_policy),
           "rollout": {"replicas": 1, "samples_per_env": 2, "envs_per_iteration": 2, "max_new_tokens": 24,
                       "max_model_len": 1024},
           "train": {"micro_batch_size": 8}, "eval": {"limit": 2, "max_new_tokens": 24, "samples": 0},
           "admission": {"checks": ["consistency"]},
           "agent": {"envs_per_iteration": 2, "samples_per_env": 2, "eval_limit": 2, "max_steps": 2,
                     "max_new_tokens": 24, "temperature": 1.0}}
    client = run_rl_loop(tmp_path, "rl_loop", "--cfg", json.dumps(cfg))
    runs = client.search_runs([client.get_experiment_by_name("posttrain").experiment_id])
    baseline = next(r for r in runs if r.data.tags.get("posttrain.iteration") == "0")
    iteration_1 = next(r for r in runs if r.data.tags.get("posttrain.iteration") == "1")
    m = iteration_1.data.metrics
    assert m["agent/episodes"] == 4 and m["agent_eval/episodes"] == 2
    assert baseline.data.metrics["agent_eval/episodes"] == 2
    assert 1 <= m["agent/steps_mean"] <= 2 and m["rollout/samples"] == 4  # both tiers: 2 envs x 2 samples each
    for name in ("agent_steps", "agent_eval_steps", "scored", "eval_results"):
        assert f"tables/{name}.parquet" in {f.path for f in client.list_artifacts(iteration_1.info.run_id, "tables")}

    def table(name: str) -> pd.DataFrame:
        return pd.read_parquet(client.download_artifacts(iteration_1.info.run_id, f"tables/{name}.parquet",
                                                         str(tmp_path / name)))

    trained, results = table("scored"), table("eval_results")
    agent_rows = trained[trained["loss_mask"].notna()]
    assert agent_rows["env_id"].str.startswith("agent_repo/").all()
    assert agent_rows["group_id"].nunique() == 2 and len(trained) - len(agent_rows) == 4
    assert agent_rows["advantage"].notna().all() or (agent_rows["infra_error"] != "").any()
    assert (results["decoding"] == "greedy").sum() == 4  # 2 single-turn + 2 agent eval envs
    assert results.groupby("env_id")["steps"].max().max() >= 1

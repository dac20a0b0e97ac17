"""``pyflyte run workflows/evaluate.py evaluate`` on a registered alias (``models:/posttrain-policy@champion``), with a
temporary MLflow store: the policy is downloaded from the registry, decoded with real vLLM and verified in bwrap; the
run holds the stratified pass@k table, the flips vs the champion's earlier results on the same suite, and is tagged
so the regression gate finds it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from posttrain.config import DEMO_SUITE
from posttrain.envs.suite import suite_digest
from tests import ROOT, launch_env, mlflow_store

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
ENVS = ["add_2", "add_3", "add_4", "add_5", "mul_2", "mul_3"]


def _suite(tmp_path: Path) -> Path:
    """Six demo specs, all put in the eval split."""
    suite = tmp_path / "suite"
    suite.mkdir()
    for name in ENVS:
        text = (Path(DEMO_SUITE) / f"{name}.yaml").read_text()
        (suite / f"{name}.yaml").write_text(text.replace("split: train", "split: eval"))
    return suite


def _register_champion(tiny_policy, suite: Path) -> None:
    """v1 of posttrain-policy = the tiny policy, champion, with made-up results on the suite (every env passes)."""
    from posttrain import tracking
    from posttrain.envs.suite import load_suite
    from posttrain.tracking import registry

    envs = load_suite(suite).envs
    results = pd.DataFrame([{"env_id": e.id, "domain": e.domain, "difficulty": e.difficulty, "decoding": "greedy",
                             "sample_idx": 0, "policy_version": 0, "steps": 1, "passed": True, "reward": 1.0,
                             "infra_error": "", "assertions": "{}"} for e in envs])
    parent = tracking.start_run("posttrain", run_name="rl_loop-earlier", tags={"flyte.execution_id": "earlier"})
    registry.record_lineage(parent, suite_digest(str(suite)))
    child = tracking.log_iteration(parent, 0, {}, tables={"eval_results": results}, policy_dir=str(tiny_policy),
                                   policy_version=0)
    assert registry.promote(child, results).passed


def test_evaluate_a_registered_alias_reports_strata_and_flips(tmp_path, tiny_policy, monkeypatch):
    from mlflow.tracking import MlflowClient

    uri = mlflow_store(tmp_path)
    artifacts = (tmp_path / "artifacts").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("POSTTRAIN_ARTIFACT_ROOT", artifacts)
    suite = _suite(tmp_path)
    _register_champion(tiny_policy, suite)
    cfg = {"policy": "models:/posttrain-policy@champion", "suite": str(suite),
           "eval": {"samples": 4, "pass_k": [1, 2, 4], "max_new_tokens": 24}, "rollout": {"replicas": 1}}
    env = launch_env(MLFLOW_TRACKING_URI=uri, POSTTRAIN_ARTIFACT_ROOT=artifacts, DS_ACCELERATOR="cpu")
    pyflyte = Path(sys.executable).parent / "pyflyte"
    proc = subprocess.run([str(pyflyte), "run", "workflows/evaluate.py", "evaluate", "--cfg", json.dumps(cfg)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-8000:]  # and it exited: no engine left alive

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("posttrain-eval")
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED"
    assert run.data.tags["posttrain.registered_version"] == "1"
    assert run.data.tags["posttrain.baseline_version"] == "1"
    metrics = run.data.metrics
    for key in ("eval/pass_at_1", "eval/pass_at_1_sampled", "eval/pass_at_4_sampled", "eval/pass_at_1/domain_python",
                "eval/pass_at_2_sampled/difficulty_1", "eval/assertion/result/tests_pass", "eval/flips/broken"):
        assert key in metrics, f"{key} missing from {sorted(metrics)}"
    assert metrics["eval/pass_at_1_sampled"] <= metrics["eval/pass_at_2_sampled"] <= metrics["eval/pass_at_4_sampled"]
    local = tmp_path / "download"
    local.mkdir()
    flips = pd.read_parquet(client.download_artifacts(run.info.run_id, "tables/eval_flips.parquet", str(local)))
    assert sorted(flips["env_id"]) == sorted(f"demo/{name}" for name in ENVS)
    assert set(flips["flip"]) <= {"broken", "still_passing", "unverified"}  # the champion "passed" everything
    assert metrics["eval/flips/broken"] == float((flips["flip"] == "broken").sum())
    results = pd.read_parquet(client.download_artifacts(run.info.run_id, "tables/eval_results.parquet", str(local)))
    assert len(results) == len(ENVS) * 5
    assert set(results["decoding"]) == {"greedy", "sampled"}
    shutil.rmtree(local)


def test_evaluate_runs_the_agent_envs_of_a_suite_as_episodes(tmp_path, tiny_policy):
    """A suite with agent envs: their eval envs run as greedy episodes (``cfg.agent``) beside the single-turn ones,
    each with a row of its own in the results (before, the standalone evaluation decoded only the single-turn envs,
    and every agent env was missing from its results, ``unverified`` in its flips)."""
    from mlflow.tracking import MlflowClient

    from tests import with_positions

    suite = _suite(tmp_path)
    agent_suite = Path(DEMO_SUITE).parent / "agent_repo"
    agent_ids = []
    for spec in sorted(agent_suite.glob("*.yaml")):
        if "split: eval" in spec.read_text() and len(agent_ids) < 2:
            shutil.copy(spec, suite / spec.name)
            agent_ids.append(f"agent_repo/{spec.stem}")
    policy = with_positions(tiny_policy, tmp_path / "policy", 1024)  # an episode needs more than its 256 positions
    uri, artifacts = mlflow_store(tmp_path), (tmp_path / "artifacts").as_uri()
    cfg = {"policy": str(policy), "suite": str(suite), "eval": {"samples": 0, "max_new_tokens": 24},
           "rollout": {"replicas": 1, "max_model_len": 1024},
           "agent": {"max_steps": 2, "max_new_tokens": 24, "chat_template": "agent"}}
    env = launch_env(MLFLOW_TRACKING_URI=uri, POSTTRAIN_ARTIFACT_ROOT=artifacts, DS_ACCELERATOR="cpu")
    proc = subprocess.run([str(Path(sys.executable).parent / "pyflyte"), "run", "workflows/evaluate.py", "evaluate",
                           "--cfg", json.dumps(cfg)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-8000:]

    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("posttrain-eval").experiment_id])
    assert "eval/pass_at_1/domain_agent_repo" in run.data.metrics
    local = tmp_path / "download"
    local.mkdir()
    results = pd.read_parquet(client.download_artifacts(run.info.run_id, "tables/eval_results.parquet", str(local)))
    episodes = results[results["env_id"].isin(agent_ids)]
    assert sorted(episodes["env_id"]) == sorted(agent_ids)
    assert set(episodes["decoding"]) == {"greedy"}
    assert (episodes["infra_error"] == "").all()
    assert (episodes["steps"] >= 1).all()
    assert len(results) == len(ENVS) + len(agent_ids)

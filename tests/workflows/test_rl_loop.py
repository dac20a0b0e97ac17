"""The `make smoke` configuration through `pyflyte run`, with a temporary MLflow store: every stage runs for real
(admission in bwrap, vLLM rollout, sandboxed rewards, DeepSpeed update, greedy eval) and MLflow gets the lineage."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests import ROOT, launch_env

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_smoke_workflow_leaves_parent_and_nested_iteration_runs(tmp_path):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    env = launch_env(MLFLOW_TRACKING_URI=uri, POSTTRAIN_ARTIFACT_ROOT=(tmp_path / "artifacts").as_uri(),
                     DS_ACCELERATOR="cpu")
    pyflyte = Path(sys.executable).parent / "pyflyte"
    proc = subprocess.run([str(pyflyte), "run", "--overwrite-cache", "workflows/rl_loop.py", "rl_smoke"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-8000:]  # and it exited: no engine left alive

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("posttrain")
    runs = client.search_runs([experiment.experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    parent = parents[0]
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parent.info.run_id}
    iteration_1 = [c for c in children if c.data.tags.get("posttrain.iteration") == "1"]
    assert len(iteration_1) == 1
    metrics = iteration_1[0].data.metrics
    for key in ("eval/pass_at_1", "reward/mean", "train/loss", "rollout/tokens_per_s", "sandbox/p50_ms",
                "rollout/engine_start_s", "rollout/wall_s", "reward/verifications_per_s", "time/iteration_s",
                "time/sample_s", "time/reward_s", "time/update_s", "time/untimed_s", "time/overhead_fraction"):
        assert key in metrics, f"{key} missing from {sorted(metrics)}"
    assert metrics["time/iteration_s"] >= metrics["time/reward_s"] + metrics["time/update_s"]
    assert 0.0 <= metrics["eval/pass_at_1"] <= 1.0 and metrics["rollout/tokens_per_s"] > 0
    history = client.get_metric_history(parent.info.run_id, "eval/pass_at_1")
    assert sorted(m.step for m in history) == [0, 1]  # baseline (v0) and iteration 1
    artifacts = {f.path for f in client.list_artifacts(parent.info.run_id, "tables")}
    assert "tables/admission_report.parquet" in artifacts
    versions = client.search_model_versions("name='posttrain-policy'")
    assert {v.tags.get("policy_version") for v in versions} == {"0", "1"}

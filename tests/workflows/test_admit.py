"""``pyflyte run workflows/admit.py admit`` on the broken fixture suite with a temporary MLflow store: one finished
run with the report (parquet + HTML), the per-check statistics and the admission metrics. And admission with a
checkpoint policy sampled through real vLLM (the discrimination check's weak policy): minutes on CPU, so here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from posttrain.admission import admit
from posttrain.config import DEMO_SUITE, AdmissionConfig, SandboxConfig
from posttrain.sandbox import make_sandbox
from tests import ROOT, launch_env, mlflow_store

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_admit_workflow_logs_the_report_to_mlflow(tmp_path):
    from mlflow.tracking import MlflowClient

    uri = mlflow_store(tmp_path)
    env = launch_env(MLFLOW_TRACKING_URI=uri, POSTTRAIN_ARTIFACT_ROOT=(tmp_path / "artifacts").as_uri())
    pyflyte = Path(sys.executable).parent / "pyflyte"
    proc = subprocess.run([str(pyflyte), "run", "--overwrite-cache", "workflows/admit.py", "admit",
                           "--suite", "tests/fixtures/broken_suite"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-8000:]

    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("posttrain-admission").experiment_id])
    assert len(runs) == 1
    assert runs[0].info.status == "FINISHED"
    run = runs[0]
    assert run.data.params["suite"] == "tests/fixtures/broken_suite"
    assert run.data.params["repeats"] == "3"
    metrics = run.data.metrics
    assert metrics["admission/admitted"] >= 3
    assert metrics["admission/rejected"] >= 15
    assert metrics["admission/consistency/fail"] >= 10
    assert "admission/coverage/seconds" in metrics
    tables = {f.path for f in client.list_artifacts(run.info.run_id, "tables")}
    assert {"tables/admission_report.parquet", "tables/admission_report.html",
            "tables/admission_check_stats.parquet"} <= tables
    files = {f.path for f in client.list_artifacts(run.info.run_id, "admission")}
    assert {"admission/report.html", "admission/report.parquet", "admission/check_stats.json"} <= files
    report = pd.read_parquet(client.download_artifacts(run.info.run_id, "tables/admission_report.parquet",
                                                       str(tmp_path)))
    assert {"env_id", "check", "passed", "status", "code", "value", "detail"} <= set(report.columns)
    assert "reproducibility.flaky" in set(report["code"])
    assert "good/add_5" in set(report["env_id"])
    html = Path(client.download_artifacts(run.info.run_id, "admission/report.html", str(tmp_path))).read_text()
    assert "Per-check statistics" in html
    assert "coverage.mutants_survived" in html


def test_a_checkpoint_policy_samples_through_vllm_for_discrimination(tmp_path):
    pytest.importorskip("vllm", reason="vLLM is not installed (make install with EXTRA=cpu or gpu)")
    from posttrain.config import DemoPolicyConfig
    from posttrain.training.demo_policy import main_demo_policy

    suite = tmp_path / "suite"
    suite.mkdir()
    for name in ("add_2", "gt_3_mul_2", "mod_5"):
        (suite / f"{name}.yaml").write_text((Path(DEMO_SUITE) / f"{name}.yaml").read_text())
    policy = main_demo_policy(tmp_path / "policy", DemoPolicyConfig(sft_steps=20))
    cfg = AdmissionConfig(checks=["solvability", "discrimination"], weak_policy=str(policy), k=2, max_new_tokens=32)
    box = make_sandbox("bwrap")
    try:
        rows = admit(suite, box, SandboxConfig(), cfg).details
    finally:
        box.close()
    discrimination = rows[rows["check"] == "discrimination"]
    assert len(discrimination) == 3, discrimination["detail"].tolist()
    assert "infra" not in set(discrimination["code"]), discrimination["detail"].tolist()
    assert discrimination["detail"].str.contains(f"weak '{policy}'").all()
    assert discrimination["value"].between(0, 1).all()  # strong (reference) 1.0 minus the checkpoint's pass rate

"""The evaluation report on a real MLflow store (sqlite, temporary): logged as ``reports/evaluation.html``; an RL
run's report gathers its evaluated iterations, its reward curve and the flips of the last version."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from posttrain import tracking
from posttrain.tracking.run_report import REPORT_PATH, log_loop_report, log_report, loop_evaluations, metric_curve
from tests.evaluation.test_report import V0, V1
from tests import mlflow_store

pytestmark = pytest.mark.integration


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_store(tmp_path))
    monkeypatch.setenv("POSTTRAIN_ARTIFACT_ROOT", (tmp_path / "artifacts").as_uri())
    return tmp_path


def report_of(run_id: str, tmp_path) -> str:
    local = tmp_path / "download"
    local.mkdir(exist_ok=True)
    return open(tracking.client().download_artifacts(run_id, REPORT_PATH, str(local))).read()


def test_log_report_stores_the_page_and_returns_the_fragment(store):
    run_id = tracking.start_run("posttrain-eval", run_name="evaluate-x")
    body = log_report(run_id, {"champion (registered v1)": V0, "policy": V1}, title="Evaluation of policy")
    page = report_of(run_id, store)
    assert page.startswith("<!DOCTYPE html>")
    assert body in page
    assert not body.startswith("<!DOCTYPE")
    assert "<th>champion (registered v1)</th><th>policy</th>" in page
    assert page.count("<svg") == 2


def test_an_rl_runs_report_has_every_evaluated_version_its_reward_curve_and_last_flips(store):
    parent = tracking.start_run("posttrain", run_name="rl_loop-x")
    tracking.log_iteration(parent, 0, {"eval/pass_at_1": 1 / 3}, tables={"eval_results": V0})
    tracking.log_iteration(parent, 1, {"reward/mean": 0.25}, tables={"scored": pd.DataFrame({"x": [1]})})
    tracking.log_iteration(parent, 2, {"reward/mean": 0.5}, tables={"eval_results": V1.assign(policy_version=2)})
    assert list(loop_evaluations(parent)) == ["v0", "v2"]  # iteration 1 was not evaluated
    assert metric_curve(parent, "reward/mean").to_dict() == {1: 0.25, 2: 0.5}

    body = log_loop_report(parent)
    page = report_of(parent, store)
    assert body in page
    assert page.startswith("<!DOCTYPE html>")
    assert "<th>v0</th><th>v2</th>" in page
    assert "<h2>reward curve</h2>" in page
    assert page.count("<svg") == 3
    assert "flips v0 → v2" in page
    assert re.findall(r'<td class="label">([^<]*)</td><td>(\w+)</td>', page) == [("b", "fixed")]


def test_an_rl_run_without_evaluations_still_gets_a_report(store):
    parent = tracking.start_run("posttrain", run_name="rl_loop-y")
    log_loop_report(parent)
    log_loop_report(parent)  # a resumed run finishing again replaces the page
    page = report_of(parent, store)
    assert "no greedy evaluation" in page
    assert "flips" not in page
    assert [f.path for f in tracking.client().list_artifacts(parent, "reports")] == [REPORT_PATH]

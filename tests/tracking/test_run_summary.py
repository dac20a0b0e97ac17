"""The end-of-run summary table from a parent run's metric curves on a real MLflow store (sqlite, temporary)."""

from __future__ import annotations

import io

import pandas as pd
import pytest

from posttrain import tracking
from posttrain.tracking.run_summary import format_summary, print_summary, summary_table
from tests import mlflow_store

pytestmark = pytest.mark.integration


@pytest.fixture
def parent(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_store(tmp_path))
    monkeypatch.setenv("POSTTRAIN_ARTIFACT_ROOT", (tmp_path / "artifacts").as_uri())
    return tracking.start_run("posttrain", run_name="rl_loop-x")


def test_one_row_per_iteration_with_what_it_logged(parent):
    tracking.log_metrics(parent, {"eval/pass_at_1": 0.25, "eval/pass_at_1_sampled": 0.125}, step=0)
    tracking.log_metrics(parent, {"reward/mean": 0.5, "time/iteration_s": 2.94}, step=1)
    tracking.log_metrics(parent, {"eval/pass_at_1": 0.5, "eval/pass_at_1_sampled": 0.25, "reward/mean": 0.75,
                                  "time/iteration_s": 9.5}, step=2)
    table = summary_table(parent)
    assert list(table.columns) == ["greedy pass@1", "sampled pass@1", "reward", "time (s)"]
    assert table.index.tolist() == [0, 1, 2]
    assert table.at[2, "reward"] == 0.75
    assert pd.isna(table.at[0, "reward"])
    out = io.StringIO()
    print_summary(parent, stream=out)
    lines = out.getvalue().splitlines()
    assert lines[:2] == ["", f"rl_loop-x (MLflow run {parent})"]
    assert lines[2:] == [
        "iteration  greedy pass@1  sampled pass@1  reward  time (s)",
        "        0          0.250           0.125       -         -",
        "        1              -               -   0.500       2.9",
        "        2          0.500           0.250   0.750       9.5"]


def test_a_run_that_logged_nothing_prints_the_header_only(parent):
    assert summary_table(parent).empty
    assert format_summary(summary_table(parent)) == "iteration"

"""The admission's MLflow metric dicts, shaped by pure functions (no MLflow, no Flyte); an RL iteration's are
``test_metrics.py``'s."""

from __future__ import annotations

import pytest

from posttrain.admission.report import CheckRow, check_stats, details_frame, to_frame
from posttrain.tracking import admission_counts, admission_metrics

pytestmark = pytest.mark.unit

ROWS = [
    CheckRow("e/ok", "solvability", True, "solvability.ok", "8/8"),
    CheckRow("e/ok", "coverage", True, "coverage.ok", "score 1.00", 1.0),
    CheckRow("e/weak", "solvability", True, "solvability.ok", "8/8"),
    CheckRow("e/weak", "coverage", False, "coverage.mutants_survived", "score 0.25", 0.25),
    CheckRow("e/box", "solvability", False, "infra", "sandbox did not start"),
    CheckRow("e/box", "coverage", False, "coverage.skipped", "the reference run hit an infra error"),
]


def test_admission_counts_from_the_report_or_its_details():
    expected = {"admission/envs": 3, "admission/admitted": 1, "admission/rejected": 2}
    assert admission_counts(to_frame(ROWS)) == expected
    assert admission_counts(details_frame(ROWS)) == expected


def test_admission_metrics_per_check_counts_rates_and_seconds():
    details = details_frame(ROWS)
    metrics = admission_metrics(details, check_stats(details, {"coverage": 2.5}), wall_s=7.0)
    assert metrics["admission/admitted"] == 1
    assert metrics["admission/wall_s"] == 7.0
    assert (metrics["admission/coverage/pass"], metrics["admission/coverage/fail"],
            metrics["admission/coverage/skipped"], metrics["admission/coverage/seconds"]) == (1.0, 1.0, 1.0, 2.5)
    assert metrics["admission/solvability/infra"] == 1.0
    assert metrics["admission/coverage/value_mean"] == 0.625
    assert "admission/solvability/seconds" not in metrics  # NaN: not timed, not logged
    assert "admission/coverage/not_applicable" not in metrics
    assert "admission/coverage/envs" not in metrics

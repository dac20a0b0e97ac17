"""The admission report's pure parts: reason codes in details, statuses, per-check statistics, HTML and files."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from posttrain.admission.render import report_html, stats_json, write_report
from posttrain.admission.report import (CheckRow, admitted_ids, check_stats, details_frame, env_codes, env_verdicts,
                                        reason_code, rejection_reasons, report_text, status_of, to_frame, with_status)
from posttrain.schemas import AdmissionReport

pytestmark = pytest.mark.unit

ROWS = [
    CheckRow("e/good", "consistency", True, "consistency.ok", "fine"),
    CheckRow("e/good", "coverage", True, "coverage.ok", "mutation score 1.00", 1.0),
    CheckRow("e/good", "learnability", True, "learnability.solved", "always passes (reported only)", 1.0),
    CheckRow("e/weak", "consistency", True, "consistency.ok", "fine"),
    CheckRow("e/weak", "coverage", False, "coverage.mutants_survived", "mutation score 0.25", 0.25),
    CheckRow("e/flaky", "reproducibility", False, "reproducibility.flaky", "3 runs gave 2 verdicts", 2.0),
    CheckRow("e/flaky", "coverage", False, "coverage.skipped", "the reference did not pass reproducibly"),
    CheckRow("e/nomut", "coverage", True, "coverage.not_applicable", "no mutants"),
    CheckRow("e/box", "coverage", False, "infra", "bwrap: setting up uid map: Permission denied"),
    CheckRow("bad.yaml", "consistency", False, "consistency.malformed_yaml", "bad.yaml: <document>: oops"),
]


def test_detail_carries_the_reason_code_and_status_follows_from_it():
    frame = to_frame(ROWS)
    assert list(frame.columns) == ["env_id", "check", "passed", "detail"]
    AdmissionReport.validate(frame)
    assert frame["detail"][4] == "coverage.mutants_survived: mutation score 0.25"
    assert [reason_code(d) for d in frame["detail"]] == [r.code for r in ROWS]
    assert [status_of(r.passed, r.code) for r in ROWS] == [
        "pass", "pass", "reported", "pass", "fail", "fail", "skipped", "not_applicable", "infra", "fail"]
    assert reason_code("anti_hacking.probe_passed:sys.exit(0) at import: 1/13 probes pass") == \
        "anti_hacking.probe_passed:sys.exit(0) at import"
    # the contract table alone is enough to recover codes and statuses
    assert with_status(frame)[["status", "code"]].equals(details_frame(ROWS)[["status", "code"]])


def test_admitted_envs_are_those_with_only_passing_rows():
    assert admitted_ids(to_frame(ROWS)) == {"e/good", "e/nomut"}


def test_per_check_statistics_count_statuses_and_rate_only_judged_rows():
    stats = check_stats(details_frame(ROWS), seconds={"coverage": 12.5})
    coverage = stats.set_index("check").loc["coverage"]
    assert (coverage["envs"], coverage["pass"], coverage["fail"], coverage["skipped"], coverage["not_applicable"],
            coverage["infra"]) == (5, 1, 1, 1, 1, 1)
    assert coverage["pass_rate"] == 0.5
    assert coverage["seconds"] == 12.5
    assert coverage["value_mean"] == pytest.approx(0.625)
    consistency = stats.set_index("check").loc["consistency"]
    assert consistency["pass_rate"] == pytest.approx(2 / 3)
    assert math.isnan(consistency["seconds"])
    learn = stats.set_index("check").loc["learnability"]
    assert (learn["reported"], learn["pass"]) == (1, 0)
    assert math.isnan(learn["pass_rate"])
    assert list(stats["check"]) == ["consistency", "coverage", "learnability", "reproducibility"]


def test_rejections_by_reason_count_failures_and_infra_but_not_skips():
    reasons = rejection_reasons(details_frame(ROWS))
    assert set(reasons["code"]) == {"coverage.mutants_survived", "reproducibility.flaky", "infra",
                                    "consistency.malformed_yaml"}
    assert reasons["envs"].tolist() == [1, 1, 1, 1]
    codes = env_codes(to_frame(ROWS))
    assert codes["e/flaky"] == {"reproducibility.flaky"}
    assert codes["e/good"] == set()
    verdicts = env_verdicts(details_frame(ROWS)).set_index("env_id")
    assert verdicts.loc["e/weak", "reasons"] == "coverage.mutants_survived"
    assert verdicts.loc["e/good", "admitted"]


def test_summary_lists_statuses_per_check_and_every_rejected_row():
    text = report_text(to_frame(ROWS))
    assert text.splitlines()[0] == "admitted 2/6 envs"
    assert "  coverage: 1 pass, 1 fail, 1 infra, 1 skipped, 1 not_applicable" in text
    assert "  e/box [coverage] infra: bwrap: setting up uid map: Permission denied" in text
    assert "coverage.skipped" not in text


def test_html_and_files_hold_the_same_report(tmp_path):
    details = details_frame(ROWS + [CheckRow("e/<script>", "consistency", False, "consistency.missing_field",
                                             "<script>alert(1)</script>")])
    stats = check_stats(details, {"consistency": 0.1})
    html = report_html(details, stats, title="fixture", wall_s=3.0)
    assert "<script>alert" not in html
    assert "&lt;script&gt;" in html
    assert "2/7</b> envs admitted in 3.0 s" in html
    paths = write_report(tmp_path / "out", details, stats, title="fixture")
    back = pd.read_parquet(paths["report"])
    assert back.equals(details)
    assert pd.read_parquet(paths["stats"])["check"].tolist() == stats["check"].tolist()
    on_disk = json.loads(paths["stats_json"].read_text())
    assert on_disk == stats_json(stats)
    assert on_disk["consistency"]["seconds"] == 0.1
    assert on_disk["learnability"]["pass_rate"] is None
    assert paths["html"].read_text().startswith("<!DOCTYPE html>")

"""The broken fixture suite through real admission (bubblewrap sandboxes, every check): each bad env is rejected
with the reason code its spec declares (``tags: ["expect:<code>"]``), every good env is admitted, and nothing is
blamed on the infrastructure."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from posttrain.admission import admit, env_codes, report_text
from posttrain.config import AdmissionConfig, SandboxConfig
from posttrain.sandbox import make_sandbox
from tests import FIXTURES

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("bwrap") is None,
                                 reason="bubblewrap (bwrap) is not installed: these tests run real sandboxes")]

SUITE = FIXTURES / "broken_suite"
FILES = sorted(SUITE.glob("*.yaml"))
BAD = [f for f in FILES if f.name.startswith("bad_")]
GOOD = [f for f in FILES if f.name.startswith("good_")]
PROBE_PASSED = "anti_hacking.probe_passed:"


def key_and_expectation(path: Path) -> tuple[str, str]:
    """The report key of a fixture (its id, or the file when it cannot be parsed) and its expected reason code."""
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError:
        return str(path), "consistency.malformed_yaml"
    expected = [t.removeprefix("expect:") for t in data.get("tags", []) if t.startswith("expect:")]
    return data["id"], (expected[0] if expected else "")


@pytest.fixture(scope="module")
def result():
    sandbox_cfg = SandboxConfig(backend="bwrap")
    box = make_sandbox(sandbox_cfg)
    try:
        yield admit(SUITE, box, sandbox_cfg, AdmissionConfig())
    finally:
        box.close()


def test_the_fixture_suite_is_big_enough():
    assert len(BAD) >= 15
    assert len(GOOD) >= 3
    assert all(key_and_expectation(f)[1] for f in BAD), "every bad fixture declares its expected reason code"


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.stem)
def test_bad_env_is_rejected_for_the_right_reason(result, path):
    key, expected = key_and_expectation(path)
    codes = env_codes(result.report)
    assert key in codes, f"{key} missing from the report"
    assert key not in {spec.id for spec in result.admitted}
    if expected.startswith(PROBE_PASSED):  # the row's code names the first cheat; the detail lists all of them
        row = result.details[(result.details["env_id"] == key) & (result.details["check"] == "anti_hacking")]
        assert len(row) == 1, report_text(result.report)
        assert row["code"].iloc[0].startswith(PROBE_PASSED), report_text(result.report)
        assert f" {expected.removeprefix(PROBE_PASSED)} (" in row["detail"].iloc[0]
    else:
        assert expected in codes[key], f"{key}: expected {expected}, got {sorted(codes[key])}"
    assert "infra" not in codes[key]


@pytest.mark.parametrize("path", GOOD, ids=lambda p: p.stem)
def test_good_env_is_admitted(result, path):
    key, _ = key_and_expectation(path)
    rows = result.details[result.details["env_id"] == key]
    assert set(rows["check"]) == set(AdmissionConfig().checks)
    assert rows["passed"].all(), rows[~rows["passed"]]["detail"].tolist()
    assert key in {spec.id for spec in result.admitted}


def test_rows_after_a_failed_reference_are_skipped_not_failed(result):
    rows = result.details.set_index(["env_id", "check"])
    assert rows.loc[("broken/wrong_reference", "coverage"), "status"] == "skipped"
    assert rows.loc[("broken/flaky_random", "discrimination"), "code"] == "discrimination.skipped"
    assert rows.loc[("broken/hackable_none", "coverage"), "status"] == "not_applicable"  # no mutants of print(x)
    weak = rows.loc[("broken/weak_tests", "coverage")]
    assert weak["value"] < 0.6
    assert "survivors: `return max(x, 1)`" in weak["detail"]
    stats = result.stats.set_index("check")
    assert stats.loc["coverage", "skipped"] == stats.loc["discrimination", "skipped"] >= 4
    assert (stats["infra"] == 0).all()
    assert (stats["seconds"] >= 0).all()

"""Review in a real browser: ``mlflow server`` on 127.0.0.1 (its own sqlite store and artifact root), the smoke
workflow (``pyflyte run workflows/rl_loop.py rl_smoke``) logging to it over HTTP, then Debian's headless Chromium
(system package ``chromium``; never a downloaded browser) opens the experiment, the parent run, its evaluation
report and an iteration run. MLflow's UI is a JS app: ``--dump-dom`` after ``--virtual-time-budget`` returns the
DOM it rendered, on which the run names, the ``eval/pass_at_1`` metric and the report artifact (rendered in the
UI's HTML iframe) are asserted; the report's content as the server serves it to that iframe is asserted too.

Screenshots of each page go to ``$POSTTRAIN_TEST_ARTIFACTS/mlflow-browser/`` (else pytest's tmp dir); the path is
printed (``pytest -s`` shows it). Pages are opened with ``?workflowType=machine_learning``: MLflow 3's UI picks its
GenAI or model-training view from that parameter (or the browser's last choice), not from the experiment.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest

from posttrain.tracking.run_report import REPORT_PATH
from tests import stop_process_group

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
CHROMIUM = shutil.which("chromium")
BUDGETS_MS = (10_000, 30_000)  # virtual time for the UI to fetch and render; the longer one is a retry


def chromium(url: str, profile: Path, budget_ms: int, *args: str) -> str:
    """Run headless Chromium on ``url`` with ``args`` (``--dump-dom``, ``--screenshot=...``); its stdout."""
    proc = subprocess.Popen([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                             f"--user-data-dir={profile}", "--window-size=1600,1100",
                             f"--virtual-time-budget={budget_ms}", *args, url],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=120)
    finally:
        stop_process_group(proc)
    return out


def open_page(url: str, expected: list[str], profile: Path, screenshot: Path) -> str:
    """The DOM of ``url`` once it shows every ``expected`` text (a longer budget is the one retry), and a
    screenshot of it; the DOM is returned either way, for the caller's assertions to name what is missing."""
    for budget in BUDGETS_MS:
        dom = chromium(url, profile, budget, "--dump-dom")
        if all(text in dom for text in expected):
            break
    chromium(url, profile, budget, f"--screenshot={screenshot}")
    return dom


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install chromium)")
def test_the_smoke_run_is_reviewable_in_the_mlflow_ui(tmp_path, smoke_run):
    mlflow_server, client = smoke_run.url, smoke_run.client
    experiment = client.get_experiment_by_name("posttrain")
    runs = client.search_runs([experiment.experiment_id])
    (parent,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    (iteration,) = [r for r in runs if r.data.tags.get("posttrain.iteration") == "1"]
    assert REPORT_PATH in {f.path for f in client.list_artifacts(parent.info.run_id, "reports")}, \
        "the parent run has no evaluation report (tasks/track.py finish_tracking: run_report.log_loop_report)"

    shots = Path(os.environ.get("POSTTRAIN_TEST_ARTIFACTS") or tmp_path) / "mlflow-browser"
    shots.mkdir(parents=True, exist_ok=True)
    print(f"\nMLflow UI screenshots: {shots}")
    profile = tmp_path / "chromium-profile"
    base = f"{mlflow_server}/#/experiments/{experiment.experiment_id}"
    view = "?workflowType=machine_learning"
    parent_name, iteration_name = parent.info.run_name, iteration.info.run_name
    metric = ">eval/pass_at_1<"  # an element's whole text: the metric itself, not eval/pass_at_1_sampled
    pages = {  # screenshot name: (page, texts its DOM must hold)
        "experiment": (f"{base}/runs{view}", [f">{parent_name}<"]),
        "parent_run": (f"{base}/runs/{parent.info.run_id}{view}", [f">{parent_name}<", metric]),
        "parent_report": (f"{base}/runs/{parent.info.run_id}/artifacts/{REPORT_PATH}{view}",  # rendered in an iframe
                          [f">{parent_name}<", ">reports<", "evaluation.html", 'class="mlflow-html-iframe"']),
        "iteration_run": (f"{base}/runs/{iteration.info.run_id}{view}", [f">{iteration_name}<", metric]),
    }
    for name, (url, expected) in pages.items():
        dom = open_page(url, expected, profile, shots / f"{name}.png")
        missing = [text for text in expected if text not in dom]
        assert not missing, f"{name} ({url}) does not show {missing}; screenshot: {shots / name}.png"
        assert (shots / f"{name}.png").stat().st_size > 10_000, f"{name}: blank screenshot"
    assert iteration_name == "iteration-1"
    assert parent_name.startswith("rl_loop-")
    # what the iframe shows (its blob document is not in the dumped DOM): the page the server serves the UI
    with urllib.request.urlopen(f"{mlflow_server}/get-artifact?path={REPORT_PATH}&run_uuid={parent.info.run_id}",
                                timeout=30) as response:
        report = response.read().decode()
    for text in ("greedy pass@1 per stratum", "sampled pass@1 per stratum", "<th>v0</th><th>v1</th>", "reward curve",
                 "flips v0 → v1"):
        assert text in report, f"{text!r} not in the report"

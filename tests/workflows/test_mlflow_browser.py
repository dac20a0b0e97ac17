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
import signal
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from posttrain.evaluation.run_report import REPORT_PATH
from tests import ROOT, launch_env

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
CHROMIUM = shutil.which("chromium")
BUDGETS_MS = (10_000, 30_000)  # virtual time for the UI to fetch and render; the longer one is a retry


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stop(proc: subprocess.Popen) -> None:
    """End a process started in its own session, and its children (its process group): TERM, then KILL."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture
def mlflow_server(tmp_path):
    """The URL of an ``mlflow server`` on a free 127.0.0.1 port over a store in ``tmp_path``; stopped after."""
    port = free_port()
    mlflow = Path(sys.executable).parent / "mlflow"
    log = open(tmp_path / "mlflow-server.log", "w")
    proc = subprocess.Popen([str(mlflow), "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
                             "--backend-store-uri", f"sqlite:///{tmp_path}/server.db",
                             "--artifacts-destination", str(tmp_path / "server-artifacts")],
                            cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "mlflow-server.log").read_text()
            time.sleep(1)
        yield url
    finally:
        stop(proc)
        log.close()


def chromium(url: str, profile: Path, budget_ms: int, *args: str) -> str:
    """Run headless Chromium on ``url`` with ``args`` (``--dump-dom``, ``--screenshot=...``); its stdout."""
    proc = subprocess.Popen([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                             f"--user-data-dir={profile}", "--window-size=1600,1100",
                             f"--virtual-time-budget={budget_ms}", *args, url],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=120)
    finally:
        stop(proc)
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
def test_the_smoke_run_is_reviewable_in_the_mlflow_ui(tmp_path, mlflow_server):
    from mlflow.tracking import MlflowClient

    env = launch_env(MLFLOW_TRACKING_URI=mlflow_server, POSTTRAIN_ARTIFACT_ROOT=(tmp_path / "artifacts").as_uri(),
                     DS_ACCELERATOR="cpu")
    pyflyte = Path(sys.executable).parent / "pyflyte"
    proc = subprocess.run([str(pyflyte), "run", "--overwrite-cache", "workflows/rl_loop.py", "rl_smoke"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-8000:]

    client = MlflowClient(tracking_uri=mlflow_server)
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
    assert iteration_name == "iteration-1" and parent_name.startswith("rl_loop-")
    # what the iframe shows (its blob document is not in the dumped DOM): the page the server serves the UI
    with urllib.request.urlopen(f"{mlflow_server}/get-artifact?path={REPORT_PATH}&run_uuid={parent.info.run_id}",
                                timeout=30) as response:
        report = response.read().decode()
    for text in ("greedy pass@1 per stratum", "sampled pass@1 per stratum", "<th>v0</th><th>v1</th>", "reward curve",
                 "flips v0 → v1"):
        assert text in report, f"{text!r} not in the report"

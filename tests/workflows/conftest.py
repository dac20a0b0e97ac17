"""Fixtures of the workflow tests: one smoke run (``pyflyte run workflows/rl_loop.py rl_smoke``) logging over HTTP
to a real ``mlflow server`` on 127.0.0.1, shared by the tests that read it (its lineage in ``test_rl_loop.py``, its
review in a browser in ``test_mlflow_browser.py``, and the whole demo suite's admission by every check in
``test_rl_loop.py``): one run instead of one per test. It is ``make smoke``'s config but for admission, which runs
every check (``make smoke`` runs three) so that no other test admits the 400-odd demo envs again."""

from __future__ import annotations

import socket
import json
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest

from posttrain.config import ADMISSION_CHECKS, LoopConfig
from tests import ROOT, launch_env, mlflow_store, stop_process_group

SMOKE_CFG = asdict(LoopConfig.smoke())
SMOKE_CFG["admission"]["checks"] = list(ADMISSION_CHECKS)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory):
    """The URL of an ``mlflow server`` on a free 127.0.0.1 port over its own store; stopped after the session."""
    home = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    mlflow = Path(sys.executable).parent / "mlflow"
    log = open(home / "mlflow-server.log", "w")
    proc = subprocess.Popen([str(mlflow), "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
                             "--backend-store-uri", mlflow_store(home),
                             "--artifacts-destination", str(home / "server-artifacts")],
                            cwd=home, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
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
            assert proc.poll() is None and time.monotonic() < deadline, (home / "mlflow-server.log").read_text()
            time.sleep(1)
        yield url
    finally:
        stop_process_group(proc)
        log.close()


@dataclass
class SmokeRun:
    url: str  # the MLflow server the run logged to
    client: object  # an MlflowClient of it


@pytest.fixture(scope="session")
def smoke_run(mlflow_server, tmp_path_factory):
    """``make smoke``'s workflow (admission by every check: ``SMOKE_CFG``), run once (fresh cache) against
    ``mlflow_server``; asserts it succeeded."""
    from mlflow.tracking import MlflowClient

    artifacts = tmp_path_factory.mktemp("smoke-artifacts")
    env = launch_env(MLFLOW_TRACKING_URI=mlflow_server, POSTTRAIN_ARTIFACT_ROOT=artifacts.as_uri(),
                     DS_ACCELERATOR="cpu")
    pyflyte = Path(sys.executable).parent / "pyflyte"
    proc = subprocess.run([str(pyflyte), "run", "--overwrite-cache", "workflows/rl_loop.py", "rl_smoke",
                           "--cfg", json.dumps(SMOKE_CFG)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-8000:]
    return SmokeRun(mlflow_server, MlflowClient(tracking_uri=mlflow_server))

"""Fixtures of the workflow tests, each one ``pyflyte run`` shared by the tests that read it (a run costs ~45 s here
before its first iteration: the CLI's imports and a vLLM engine start):

- ``smoke_run``: ``pyflyte run workflows/rl_loop.py rl_smoke`` logging over HTTP to a real ``mlflow server`` on
  127.0.0.1, read by its lineage and the whole demo suite's admission by every check in ``test_rl_loop.py`` and its
  review in a browser in ``test_mlflow_browser.py``. It is ``make smoke``'s config but for admission, which runs
  every check (``make smoke`` runs three) so that no other test admits the 400-odd demo envs again, and one engine
  replica (``make smoke`` starts one per core; ``tests/rollout`` covers several).
- ``stale_tiers_run``: both tiers (single-turn demo envs and ``agent_repo`` episodes) for three iterations with
  ``max_staleness = 1`` and ``rollout.settled_cooldown = 2``, read by ``test_agent_tier.py`` and
  ``test_staleness.py``.
"""

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

from posttrain.config import ADMISSION_CHECKS, DEMO_SUITE, LoopConfig
from tests import ROOT, launch_env, mlflow_store, run_rl_loop, stop_process_group, with_positions

SMOKE_CFG = asdict(LoopConfig.smoke())
SMOKE_CFG["admission"]["checks"] = list(ADMISSION_CHECKS)
SMOKE_CFG["rollout"]["replicas"] = 1

# 12 single-turn demo envs beside the agent_repo suite; v0 rolls out iterations 1 and 2, v1 iteration 3; an env
# whose group settled sits out the next two picks
STALE_TIERS_CFG = {"iterations": 3, "max_staleness": 1,
                   "rollout": {"replicas": 1, "samples_per_env": 2, "envs_per_iteration": 2, "max_new_tokens": 24,
                               "max_model_len": 1024, "settled_cooldown": 2},
                   "train": {"micro_batch_size": 8, "tis_cap": 2.0},
                   "eval": {"limit": 2, "max_new_tokens": 24, "samples": 0},
                   "admission": {"checks": ["consistency"]},
                   "agent": {"envs_per_iteration": 2, "samples_per_env": 2, "eval_limit": 2, "max_steps": 2,
                             "max_new_tokens": 24, "temperature": 1.0, "chat_template": "agent"}}


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
            assert proc.poll() is None, (home / "mlflow-server.log").read_text()
            assert time.monotonic() < deadline, (home / "mlflow-server.log").read_text()
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


@dataclass
class StaleTiersRun:
    client: object  # an MlflowClient of the run's store
    folder: Path  # a scratch folder for downloads

    def iterations(self) -> dict[int, object]:
        """The nested MLflow run of each iteration (0: the baseline), by iteration."""
        runs = self.client.search_runs([self.client.get_experiment_by_name("posttrain").experiment_id])
        return {int(r.data.tags["posttrain.iteration"]): r for r in runs if "posttrain.iteration" in r.data.tags}

    def table(self, run, name: str):
        """``tables/<name>.parquet`` of an iteration run, as a DataFrame."""
        import pandas as pd

        folder = self.folder / run.info.run_id / name
        return pd.read_parquet(self.client.download_artifacts(run.info.run_id, f"tables/{name}.parquet", str(folder)))


@pytest.fixture(scope="session")
def stale_tiers_run(tiny_policy, tmp_path_factory) -> StaleTiersRun:
    """``STALE_TIERS_CFG`` through ``pyflyte run`` on a suite of 12 demo envs and every ``agent_repo`` env, from a
    copy of the tiny policy whose ``max_position_embeddings`` is raised to 1024 (same weights): its 256 positions
    cannot hold an episode (as ``tests/agent/test_exact_tokens.py`` does)."""
    import shutil

    folder = tmp_path_factory.mktemp("stale-tiers")
    suite = folder / "mixed"
    shutil.copytree(Path(DEMO_SUITE).parent / "agent_repo", suite)
    for spec in sorted(Path(DEMO_SUITE).glob("*.yaml"))[:12]:
        shutil.copy(spec, suite / spec.name)
    policy = with_positions(tiny_policy, folder / "policy", 1024)
    cfg = {**STALE_TIERS_CFG, "suite": str(suite), "policy": str(policy)}
    return StaleTiersRun(run_rl_loop(folder, "rl_loop", "--cfg", json.dumps(cfg)), folder / "downloads")

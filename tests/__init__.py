"""posttrain's tests mirror the library: ``tests/<package>/test_<module>.py``; kinds are markers (see conftest)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the repository
FIXTURES = ROOT / "tests" / "fixtures"

# torch.distributed's rendezvous of *this* process (set when a test builds a DeepSpeed trainer in-process); a
# workflow launched from a test is a launch of its own and must not try to join it.
RENDEZVOUS_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def launch_env(**extra: str) -> dict[str, str]:
    """The environment for a subprocess launch (``pyflyte run``): ours without the rendezvous, plus ``extra``."""
    import os

    return {**{k: v for k, v in os.environ.items() if k not in RENDEZVOUS_VARS}, **extra}


def run_rl_loop(tmp_path: Path, *args: str):
    """``pyflyte run workflows/rl_loop.py ARGS`` against a temporary MLflow store (fresh cache: ``--overwrite-cache``);
    asserts it succeeded and exited (no engine left alive), and returns an MLflow client of the store."""
    import subprocess
    import sys

    from mlflow.tracking import MlflowClient

    uri = mlflow_store(tmp_path)
    env = launch_env(MLFLOW_TRACKING_URI=uri, POSTTRAIN_ARTIFACT_ROOT=(tmp_path / "artifacts").as_uri(),
                     DS_ACCELERATOR="cpu")
    proc = subprocess.run([str(Path(sys.executable).parent / "pyflyte"), "run", "--overwrite-cache",
                           "workflows/rl_loop.py", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=1500)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-8000:]
    return MlflowClient(tracking_uri=uri)


def stop_process_group(proc) -> None:
    """End a ``subprocess.Popen`` started in its own session, and its children (its process group): TERM, then
    KILL."""
    import os
    import signal
    import subprocess

    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


_MLFLOW_TEMPLATE: list = []  # the session's migrated, empty store (made on first use)


def mlflow_store(folder: Path) -> str:
    """The URI of an empty MLflow sqlite store ``folder/mlflow.db``, copied from one migrated once per test session:
    creating a store runs MLflow's ~50 schema migrations (~5-8 s here), which every run of a test would pay again."""
    import shutil
    import tempfile

    from mlflow.tracking import MlflowClient

    if not _MLFLOW_TEMPLATE:
        template = Path(tempfile.mkdtemp(prefix="posttrain-mlflow-template-")) / "mlflow.db"
        MlflowClient(tracking_uri=f"sqlite:///{template}").search_experiments()  # creates and migrates it
        _MLFLOW_TEMPLATE.append(template)
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_MLFLOW_TEMPLATE[0], folder / "mlflow.db")
    return f"sqlite:///{folder}/mlflow.db"


def with_positions(policy: Path, dst: Path, positions: int) -> Path:
    """A copy of the HF policy folder ``policy`` at ``dst`` whose ``max_position_embeddings`` is ``positions`` (same
    weights; RoPE extends): room for agent episodes, which the tiny and demo policies' 256 positions cannot hold."""
    import json
    import shutil

    shutil.copytree(policy, dst)
    config = json.loads((dst / "config.json").read_text())
    (dst / "config.json").write_text(json.dumps({**config, "max_position_embeddings": positions}))
    return dst

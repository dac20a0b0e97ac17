"""The tracking tasks, called as plain functions on a real MLflow store (sqlite, temporary): what they print while the
loop runs. ``start_tracking`` says where to open the run; ``log_baseline`` and ``log_iteration`` print each version's
lines as they log it, and a rerun that finds the iteration logged prints the same lines from the store, marked
resumed."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from flytekit.types.directory import FlyteDirectory

from posttrain import tracking
from posttrain.config import LoopConfig
from posttrain.envs.spec import EnvSpec
from posttrain.evaluation.results import eval_results
from posttrain.reward import reward_stats
from posttrain.rollout.collect import RolloutStats
from posttrain.schemas import EpisodeSnapshots, Scored
from posttrain.tracking import registry
from posttrain.tracking.metrics import reward_metrics, rollout_metrics, sample_times, train_metrics
from posttrain.training.trainer import TrainStats
from tasks.track import log_baseline, log_iteration, start_tracking
from tests import mlflow_store

pytestmark = pytest.mark.integration

ENVS = {i: EnvSpec(id=i, prompt="p", verifier={"kind": "python_tests"}, reference="", difficulty=1) for i in "ab"}
RESUMED = "  (resumed: logged by an earlier execution)"


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_store(tmp_path))
    monkeypatch.setenv("POSTTRAIN_ARTIFACT_ROOT", (tmp_path / "artifacts").as_uri())
    return tmp_path


def policy(store, version: int) -> FlyteDirectory:
    path = store / f"v{version}"
    path.mkdir(exist_ok=True)
    (path / "config.json").write_text(json.dumps({"version": version}))
    return FlyteDirectory(str(path))


def results(version: int, greedy: dict[str, bool]) -> pd.DataFrame:
    rows = pd.DataFrame({"env_id": list(greedy), "decoding": "greedy", "sample_idx": 0, "policy_version": version,
                         "steps": 1, "reward": [float(p) for p in greedy.values()], "infra_error": "",
                         "tests_passed": [int(p) for p in greedy.values()], "tests_total": 1})
    return eval_results(rows, ENVS)


def scored() -> pd.DataFrame:
    """The rollout of iteration 1 (from v0): group a's rewards differ, group b's do not."""
    rows = [{"env_id": g, "group_id": g, "sample_idx": i, "policy_version": 0, "prompt": "p", "completion": f"{g}{i}",
             "prompt_token_ids": "[1]", "completion_token_ids": "[2]", "behavior_logprobs": "[-1.0]", "temperature": 1.0, "steps": 1,
             "tool_calls": 0, "finish_reason": "stop", "tokens": 1, "reward": r, "compiled": True,
             "tests_passed": int(r),
             "tests_total": 1, "exit_code": 0, "timed_out": False, "infra_error": "", "sandbox_ms": 3.0,
             "sandbox_cpu_s": 0.01, "sandbox_memory_peak_mb": 3.0, "signals": "{}"}
            for g, rewards in (("a", [1.0, 0.0]), ("b", [0.0, 0.0])) for i, r in enumerate(rewards)]
    return Scored.validate(pd.DataFrame(rows))


def printed(capfd) -> list[str]:
    return [line for line in capfd.readouterr().out.splitlines() if line.startswith(("v0", "v1", "MLflow run"))]


def test_each_version_prints_its_lines_once_logged_and_a_rerun_prints_them_resumed(store, capfd):
    parent = tracking.start_run("posttrain-track-test", run_name="rl_loop-x")
    registry.record_lineage(parent, "suite-sha")
    baseline = dict(run_id=parent, policy=policy(store, 0), results=results(0, {"a": False, "b": True}), metrics=[],
                    steps={})
    log_baseline(**baseline)
    table, rollout = scored(), RolloutStats(prompts=2, samples=4, wall_s=2.0)
    stages = [sample_times(rollout), rollout_metrics(rollout), reward_metrics(reward_stats(table, wall_s=1.5)),
              train_metrics(TrainStats(0.1, 0.0, 0.0, 1.0, 4, 4, 1, 0.5, wall_s=3.0), table, trained_from=0),
              {"time/eval_score_s": 0.5}]
    iteration = dict(run_id=parent, iteration=1, policy=policy(store, 1), metrics=stages, scored=table, steps={},
                     results=results(1, {"a": True, "b": True}))
    log_iteration(**iteration)
    first = printed(capfd)
    assert first[0] == "v0 eval  greedy 0.500  (2 envs)"
    assert first[1].startswith("v1  reward 0.250  learnable 1/2  |  sample 2.0s  reward 1.5s  update 3.0s  eval 0.5s"
                               "  |  iteration ")
    assert first[2:] == ["v1 eval  greedy 1.000  (2 envs)"]
    assert len(first) == 3

    log_baseline(**baseline)
    log_iteration(**iteration)
    assert printed(capfd) == [line + RESUMED for line in first]  # from the store: the first execution's numbers


def test_start_tracking_says_where_to_open_the_run(store, capfd):
    report = pd.DataFrame({"env_id": ["a"], "check": ["consistency"], "passed": [True], "detail": ["-"]})
    cfg = LoopConfig(experiment="posttrain-track-test")
    run_id = start_tracking(cfg=cfg, report=report, suite_digest="suite-sha", policy=policy(store, 0))
    experiment = tracking.client().get_experiment_by_name("posttrain-track-test").experiment_id
    assert printed(capfd) == [
        f"MLflow run {run_id} (experiment posttrain-track-test): MLFLOW_TRACKING_URI=sqlite:///{store}/mlflow.db "
        f"make mlflow-ui, then open http://127.0.0.1:5000/#/experiments/{experiment}/runs/{run_id}"]
    assert start_tracking(cfg=cfg, report=report, suite_digest="suite-sha", policy=policy(store, 0)) == run_id
    assert printed(capfd)[0].startswith(f"MLflow run {run_id} (experiment posttrain-track-test, resumed): ")


def test_an_evaluated_versions_failed_episode_snapshots_are_logged_with_its_run(store):
    """``snapshots`` (agent_sample's ``eval_snapshots``) through the task's typed input to
    ``tables/agent_eval_snapshots.parquet``, archives byte for byte (what ``posttrain replay`` reads)."""
    parent = tracking.start_run("posttrain-track-test", run_name="rl_loop-snapshots")
    snapshots = EpisodeSnapshots.validate(pd.DataFrame({"env_id": "a", "group_id": "eval-v1/a", "sample_idx": 0,
                                                        "turn": [-1, 0], "archive": [b"tar\x00-1", b"tar\x000"]}))
    child = log_iteration(run_id=parent, iteration=1, policy=policy(store, 1), metrics=[], scored=scored(), steps={},
                          results=results(1, {"a": False, "b": True}),
                          snapshots={"agent_eval_snapshots": snapshots})
    logged = pd.read_parquet(tracking.client().download_artifacts(child, "tables/agent_eval_snapshots.parquet"))
    assert logged.archive.tolist() == [b"tar\x00-1", b"tar\x000"]
    assert logged.turn.tolist() == [-1, 0]

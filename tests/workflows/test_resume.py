"""Lossless resume: ``pyflyte run`` of a 3-iteration loop killed (SIGKILL of its process group) during iteration 3,
then run again with the same command, against an uninterrupted run of the same config.

The rerun takes iterations 0 to 2 from Flyte's local cache (flytekit's ``Cache hit`` log lines), computes exactly
what the killed run had not finished, attaches to the killed run's MLflow parent run (no duplicate runs or registry
versions), and ends with the uninterrupted run's trajectories, weights and optimizer state. Each execution gets its
own Flyte local cache (``HOME``: flytekit keeps it in ``~/.flyte/local-cache``) and MLflow store.

Storage on the way (``train.state_every`` 3): v1 and v2 write no training state, only what replays their updates
(``posttrain.training.replay``), so the rerun's update of v3 rebuilds v2's state by replaying v1's and v2's updates
from v0 -- and must still end bit for bit where the uninterrupted run ends, optimizer state included (v3 writes
its full state). A third, identical run takes everything from the cache. MLflow holds the weights of the evaluated
versions (v0, v3) and no training state; the versions are read where the updates wrote them, as their iteration
runs reference them.

While they run, both print one line per policy version logged and per evaluation (``posttrain.tracking.run_lines``);
the rerun prints what the killed run had logged again, from the store, marked resumed.

The MLflow half without Flyte: ``test_tracking_resumes_the_parent_and_never_duplicates_an_iteration``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
import torch

from posttrain.training.checkpoints import PRUNED, REPLAY, state_written
from tests import ROOT, launch_env, mlflow_store

ITERATIONS = 3
CONFIG = {"iterations": ITERATIONS,
          "rollout": {"replicas": 1, "samples_per_env": 4, "envs_per_iteration": 4, "max_new_tokens": 32},
          "train": {"micro_batch_size": 16, "state_every": 3}, "eval": {"limit": 4, "max_new_tokens": 32, "samples": 2},
          "admission": {"checks": ["consistency"]}}
MODEL = "posttrain-policy"
RESUMED = "  (resumed: logged by an earlier execution)"


@dataclass
class Store:
    """One "machine": a Flyte local cache (under ``home``) and an MLflow store, shared by the runs given it."""

    root: Path

    @property
    def uri(self) -> str:
        if not (self.root / "mlflow.db").exists():
            mlflow_store(self.root)
        return f"sqlite:///{self.root}/mlflow.db"

    def env(self) -> dict[str, str]:
        cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")  # vLLM, torch: the usual caches
        return launch_env(HOME=str(self.root / "home"), XDG_CACHE_HOME=cache,
                          POSTTRAIN_CACHE=os.environ.get("POSTTRAIN_CACHE") or str(Path(cache) / "posttrain"),
                          MLFLOW_TRACKING_URI=self.uri, POSTTRAIN_ARTIFACT_ROOT=(self.root / "artifacts").as_uri(),
                          DS_ACCELERATOR="cpu", FLYTE_SDK_LOGGING_LEVEL="20", FLYTE_SDK_RICH_TRACEBACKS="0")

    def start(self, log: str) -> subprocess.Popen:
        """``pyflyte run workflows/rl_loop.py rl_loop --cfg CONFIG`` in its own process group, logging to ``log``."""
        (self.root / "home").mkdir(parents=True, exist_ok=True)
        pyflyte = Path(sys.executable).parent / "pyflyte"
        with open(self.root / log, "w") as out:
            return subprocess.Popen([str(pyflyte), "run", "workflows/rl_loop.py", "rl_loop", "--cfg",
                                     json.dumps(CONFIG)], cwd=ROOT, env=self.env(), stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)

    def run(self, log: str) -> None:
        self.finish(self.start(log), log)

    def finish(self, proc: subprocess.Popen, log: str) -> None:
        assert proc.wait(timeout=1500) == 0, (self.root / log).read_text()[-6000:]

    def client(self):
        from mlflow.tracking import MlflowClient

        return MlflowClient(tracking_uri=self.uri)

    def runs(self) -> list:
        experiment = self.client().get_experiment_by_name("posttrain")
        return self.client().search_runs([experiment.experiment_id]) if experiment else []


def cache_events(log: Path) -> list[tuple[str, str]]:
    """``(task, "hit" | "miss" | "set")`` for every cache lookup and write flytekit logged (JSON lines, in order)."""
    events, task = [], ""
    for line in log.read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        message = str(record.get("message", "")) if isinstance(record, dict) else ""
        if message.startswith(("Checking cache for task named ", "Cache set for task named ")):
            task = message.split("task named ", 1)[1].split(",", 1)[0]
            if message.startswith("Cache set"):
                events.append((task, "set"))
        elif message.startswith("Cache hit"):
            events.append((task, "hit"))
        elif message.startswith("Cache miss"):
            events.append((task, "miss"))
    return events


def printed_lines(log: Path) -> list[str]:
    """The lines the loop printed while it ran (where to open the run, then per version its iteration and eval)."""
    return [line for line in log.read_text(errors="replace").splitlines() if re.match(r"(MLflow run |v\d+ )", line)]


def iteration_runs(runs: list) -> dict[int, list]:
    by_iteration: dict[int, list] = {}
    for run in runs:
        if "posttrain.iteration" in run.data.tags:
            by_iteration.setdefault(int(run.data.tags["posttrain.iteration"]), []).append(run)
    return by_iteration


def max_difference(a, b) -> float:
    """The largest absolute difference between the tensors of two nested checkpoints (dicts, lists, tensors)."""
    if isinstance(a, torch.Tensor):
        assert a.shape == b.shape
        assert a.dtype == b.dtype
        return float((a.float() - b.float()).abs().max()) if a.numel() else 0.0
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        return max((max_difference(a[k], b[k]) for k in a), default=0.0)
    if isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        return max((max_difference(x, y) for x, y in zip(a, b)), default=0.0)
    return 0.0


def policy_dir(store: Store, version: int) -> Path:
    """Policy version ``version`` of ``store``'s run where the update wrote it, as its iteration run references it."""
    from posttrain.tracking import POLICY_URI_TAG

    [run] = iteration_runs(store.runs())[version]
    return Path(run.data.tags[POLICY_URI_TAG])


def weights(policy: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return {f"{f.name}/{k}": t for f in sorted(policy.glob("*.safetensors")) for k, t in load_file(f).items()}


def optimizer_state(policy: Path) -> dict:
    """DeepSpeed's checkpoint files of ``policy``'s training state: the optimizer's state is in ``*optim_states.pt``
    under ZeRO 1-3, in ``mp_rank_*_model_states.pt`` (with the module, the step counts and the RNG) under ZeRO-0."""
    return {f.name: torch.load(f, map_location="cpu", weights_only=False)
            for f in sorted((policy / "train_state").rglob("*_states.pt"))}


@pytest.mark.e2e
@pytest.mark.slow
def test_killed_run_resumes_from_the_cache_and_ends_where_an_uninterrupted_run_ends(tmp_path):
    reference, resumed = Store(tmp_path / "reference"), Store(tmp_path / "resumed")
    uninterrupted = reference.start("run.log")  # beside the other two: nothing is shared but the cores

    # kill the run during iteration 3, in its update (v2 -> v3): after iteration 2 was logged (each earlier update
    # logged a cache check and a cache write)
    proc = resumed.start("killed.log")
    deadline = time.monotonic() + 1500
    while [task for task, _ in cache_events(resumed.root / "killed.log")].count("tasks.update.update") \
            < 2 * ITERATIONS - 1:
        assert proc.poll() is None, "the run ended before it could be killed: " + \
            (resumed.root / "killed.log").read_text()[-4000:]
        assert time.monotonic() < deadline, "the update of iteration 3 never started"
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    killed = resumed.runs()
    assert [r.info.status for k in (1, 2) for r in iteration_runs(killed)[k]] == ["FINISHED"] * 2
    assert 3 not in iteration_runs(killed)
    assert [r.info.status for r in killed if "mlflow.parentRunId" not in r.data.tags] == ["RUNNING"]

    resumed.run("rerun.log")
    reference.finish(uninterrupted, "run.log")

    # 1. what the killed run computed comes from the cache; nothing else does, and nothing is recomputed
    computed = [task for task, event in cache_events(resumed.root / "killed.log") if event == "set"]
    rerun = cache_events(resumed.root / "rerun.log")
    hits = [task for task, event in rerun if event == "hit"]
    assert Counter(hits) == Counter(computed), rerun
    assert {"tasks.admit.admit_suite", "tasks.rollout.sample", "tasks.reward.reward", "tasks.update.update",
            "tasks.evaluate.score_eval"} <= set(hits)
    assert Counter(hits)["tasks.rollout.sample"] == 3  # v0, v1, v2
    assert Counter(hits)["tasks.update.update"] == 2  # v1, v2
    misses = [task for task, event in rerun if event == "miss"]
    assert {"tasks.update.update", "tasks.rollout.sample"} <= set(misses), rerun  # v3 is trained in the rerun

    # 2. MLflow: one parent run (resumed and finished), one run per iteration, one registry version per policy
    runs_ref, runs_res = reference.runs(), resumed.runs()
    parents = [r for r in runs_res if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1, parents
    assert parents[0].info.status == "FINISHED", parents
    assert parents[0].info.run_id == next(r.info.run_id for r in killed if "mlflow.parentRunId" not in r.data.tags)
    by_iteration = iteration_runs(runs_res)
    assert sorted(by_iteration) == [0, 1, 2, 3], by_iteration
    assert all(len(rs) == 1 for rs in by_iteration.values()), by_iteration
    assert all(rs[0].info.status == "FINISHED" for rs in by_iteration.values())
    versions = resumed.client().search_model_versions(f"name='{MODEL}'")
    assert sorted(v.tags["policy_version"] for v in versions) == ["0", "3"], versions  # the evaluated ones
    for curve in ("eval/pass_at_1", "train/loss"):  # no step logged twice on the parent
        steps = [m.step for m in resumed.client().get_metric_history(parents[0].info.run_id, curve)]
        assert len(steps) == len(set(steps)), (curve, steps)

    # 3. no trajectory lost or duplicated: per iteration, the trained rows equal the uninterrupted run's
    ref_iterations = iteration_runs(runs_ref)
    for k in (1, 2, 3):
        ref_run, res_run = ref_iterations[k][0], by_iteration[k][0]
        assert res_run.data.metrics["rollout/samples"] == ref_run.data.metrics["rollout/samples"] == 16
        tables = [pd.read_parquet(store.client().download_artifacts(run.info.run_id, "tables/scored.parquet",
                                                                     str(tmp_path / f"{name}-{k}")))
                  for store, run, name in ((reference, ref_run, "ref"), (resumed, res_run, "res"))]
        keys = [sorted(zip(t["env_id"], t["sample_idx"], t["policy_version"])) for t in tables]
        assert keys[0] == keys[1]
        assert len(set(keys[1])) == len(keys[1]) == 16
        assert tables[0]["completion"].tolist() == tables[1]["completion"].tolist()

    # 4. the final policy and its optimizer state equal the uninterrupted run's; the state was carried across v2
    v1, v2 = policy_dir(resumed, 1), policy_dir(resumed, 2)  # the killed execution's, from the cache
    final_ref, final_res = policy_dir(reference, ITERATIONS), policy_dir(resumed, ITERATIONS)
    weight_difference = max_difference(weights(final_ref), weights(final_res))
    optimizer_difference = max_difference(optimizer_state(final_ref), optimizer_state(final_res))
    update_size = max_difference(weights(v2), weights(final_res))
    states = [json.loads((p / "train_state" / "posttrain_state.json").read_text()) for p in (v1, v2, final_ref,
                                                                                          final_res)]
    steps = [state["optimizer_steps"] for state in states]
    print(f"resume evidence: cache hits {dict(Counter(hits))}, misses {dict(Counter(misses))}, "
          f"max |weight difference| {weight_difference:.3g} (v2 -> v3 moved weights by up to {update_size:.3g}), "
          f"max |optimizer state difference| {optimizer_difference:.3g}, optimizer steps v1/v2/v3 ref/v3 resumed "
          f"{steps}")
    assert update_size > 0
    assert weight_difference <= 1e-6
    assert optimizer_state(final_res)
    assert optimizer_difference <= 1e-6
    assert 0 < steps[0] < steps[1] < steps[2] == steps[3]  # v3's optimizer continued v2's steps: the state was carried
    assert json.loads((final_res / "posttrain_policy.json").read_text())["parent"] == str(v2)

    # 5. storage: v1 and v2 hold a replay record, not a state; v3 its state; MLflow has v3's weights, no state
    assert [state_written(state) for state in states] == [False, False, True, True]
    assert not any(PRUNED in state for state in states)
    for version in (v1, v2):
        assert sorted(p.name for p in (version / "train_state").iterdir()) == ["posttrain_state.json", REPLAY]
        assert (version / "model.safetensors").is_file()
    [final_version] = [v for v in versions if v.tags["policy_version"] == str(ITERATIONS)]
    logged = Path(resumed.client().download_artifacts(final_version.run_id, "policy", str(tmp_path / "final")))
    assert not (logged / "train_state").exists()
    assert max_difference(weights(logged), weights(final_res)) == 0.0

    # 6. each run printed one line per version logged and per evaluation (v0 and the last evaluated), as it went; the
    # rerun printed the killed run's lines again from the store, marked resumed, then the new ones
    parent_ref = next(r.info.run_id for r in runs_ref if "mlflow.parentRunId" not in r.data.tags)
    experiment = reference.client().get_experiment_by_name("posttrain").experiment_id
    ref, killed_lines, rerun_lines = (printed_lines(store.root / log) for store, log in (
        (reference, "run.log"), (resumed, "killed.log"), (resumed, "rerun.log")))
    assert ref[0] == (f"MLflow run {parent_ref} (experiment posttrain): MLFLOW_TRACKING_URI={reference.uri} make "
                      f"mlflow-ui, then open http://127.0.0.1:5000/#/experiments/{experiment}/runs/{parent_ref}"), ref
    assert [line.split("  ")[0] for line in ref[1:]] == ["v0 eval", "v1", "v2", "v3", "v3 eval"], ref
    assert re.fullmatch(r"v3 eval  greedy \d\.\d{3}  sampled \d\.\d{3}  \(4 envs, .*\)", ref[5]), ref
    assert re.fullmatch(r"v1  reward \d\.\d{3}  learnable \d/4(  \d+ infra errors?)?  \|  "
                        r"sample .*s  reward .*s  update .*s  \|  iteration \d+\.\ds", ref[2]), ref
    parent_id = parents[0].info.run_id
    assert killed_lines[0].startswith(f"MLflow run {parent_id} (experiment posttrain): ")
    assert len(killed_lines) == 4
    assert rerun_lines[0].startswith(f"MLflow run {parent_id} (experiment posttrain, resumed): "), rerun_lines
    assert rerun_lines[1:4] == [line + RESUMED for line in killed_lines[1:]], (killed_lines, rerun_lines)
    assert [line.split("  ")[0] for line in rerun_lines[4:]] == ["v3", "v3 eval"], rerun_lines
    assert not any(line.endswith(RESUMED) for line in rerun_lines[4:])

    # 7. a finished run run again takes every stage from the cache
    resumed.run("again.log")
    again = cache_events(resumed.root / "again.log")
    assert again, again
    assert all(event == "hit" for _, event in again), again


@pytest.mark.integration
def test_tracking_resumes_the_parent_and_never_duplicates_an_iteration(tmp_path, monkeypatch):
    """A rerun with the same run identity finds the parent run (left RUNNING by a killed execution), completes an
    unfinished iteration run without logging a metric step twice, and registers each policy once."""
    from posttrain import tracking

    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_store(tmp_path))
    monkeypatch.setenv("POSTTRAIN_ARTIFACT_ROOT", (tmp_path / "artifacts").as_uri())
    policy = tmp_path / "policy"
    policy.mkdir()
    (policy / "config.json").write_text("{}")
    evaluated = {tracking.EVAL_RESULTS: pd.DataFrame({"env_id": ["a"], "passed": [True]})}  # registers the policy
    key = tracking.run_key({"iterations": 2}, "suite-sha", "policy-sha")

    parent, resumed = tracking.start_or_resume_run("resume-test", key, run_name="first")
    assert not resumed
    tracking.log_iteration(parent, 0, {"eval/pass_at_1": 0.5}, tables=evaluated, policy_dir=str(policy),
                           policy_version=0)
    child = tracking.log_iteration(parent, 1, {"eval/pass_at_1": 0.6}, tables=evaluated, policy_dir=str(policy),
                                   policy_version=1, finish=False)  # killed before iteration 1's run finishes

    again, resumed = tracking.start_or_resume_run("resume-test", key, run_name="second")
    assert (again, resumed) == (parent, True)
    assert tracking.client().get_run(parent).info.status == "RUNNING"
    assert tracking.finished_iteration(parent, 0) is not None
    assert tracking.finished_iteration(parent, 1) is None
    assert tracking.log_iteration(parent, 1, {"eval/pass_at_1": 0.6}, tables=evaluated, policy_dir=str(policy),
                                  policy_version=1) == child
    assert tracking.finished_iteration(parent, 1) == child
    assert [m.step for m in tracking.client().get_metric_history(parent, "eval/pass_at_1")] == [0, 1]
    versions = tracking.client().search_model_versions(f"name='{tracking.POLICY_MODEL_NAME}'")
    assert sorted(v.tags["policy_version"] for v in versions) == ["0", "1"]
    other, resumed = tracking.start_or_resume_run("resume-test", tracking.run_key({"iterations": 3}, "suite-sha",
                                                                                  "policy-sha"), run_name="other")
    assert other != parent
    assert not resumed
    fresh, resumed = tracking.start_or_resume_run("resume-test", key, run_name="recomputed", resume=False)
    assert fresh != parent
    assert not resumed  # --overwrite-cache: a new parent run, which later reruns resume
    assert tracking.start_or_resume_run("resume-test", key, run_name="third") == (fresh, True)

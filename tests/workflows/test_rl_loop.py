"""The `make smoke` configuration through `pyflyte run`, with a temporary MLflow store: every stage runs for real
(admission in bwrap, vLLM rollout, sandboxed rewards, DeepSpeed update, greedy and sampled eval) and MLflow gets the
lineage (the smoke run is shared with the browser test: ``conftest.smoke_run``, logging to a real ``mlflow server``).
And the loop with DAPO dynamic sampling on: refill rounds run and their counts are logged."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from posttrain.config import ADMISSION_CHECKS, DEMO_SUITE
from posttrain.envs.suite import load_suite
from tests import run_rl_loop

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_smoke_workflow_leaves_parent_and_nested_iteration_runs(smoke_run):
    client = smoke_run.client
    experiment = client.get_experiment_by_name("posttrain")
    runs = client.search_runs([experiment.experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 1
    assert parents[0].info.status == "FINISHED"
    parent = parents[0]
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parent.info.run_id}
    iteration_1 = [c for c in children if c.data.tags.get("posttrain.iteration") == "1"]
    assert len(iteration_1) == 1
    metrics = iteration_1[0].data.metrics
    for key in ("eval/pass_at_1", "reward/mean", "train/loss", "rollout/tokens_per_s", "sandbox/p50_ms",
                "rollout/engine_start_s", "rollout/wall_s", "reward/verifications_per_s", "time/iteration_s",
                "time/sample_s", "time/reward_s", "time/update_s", "time/eval_score_s", "time/untimed_s",
                "time/overhead_fraction"):
        assert key in metrics, f"{key} missing from {sorted(metrics)}"
    timed = sum(metrics[f"time/{stage}_s"] for stage in ("sample", "reward", "update", "eval_score", "untimed"))
    assert metrics["time/eval_score_s"] > 0
    assert abs(timed - metrics["time/iteration_s"]) < 0.05  # all of it, once
    assert 0.0 <= metrics["eval/pass_at_1"] <= 1.0
    assert metrics["rollout/tokens_per_s"] > 0
    # each stage's processes: the sample task's include the live engine (a model and its KV cache), the update's the
    # trainer (a DeepSpeed engine); the reward stage's sandboxes are small programs
    for stage in ("rollout", "train", "reward"):
        assert metrics[f"{stage}/memory_peak_mb"] > 100, stage
    assert metrics["rollout/memory_peak_mb"] > metrics["reward/memory_peak_mb"] / 2
    flipped = {kind: metrics[f"eval/flips/{kind}"] for kind in ("fixed", "broken", "still_passing", "still_failing")}
    assert sum(flipped.values()) + metrics["eval/flips/unverified"] == 12  # v1 vs v0, per eval env (eval.limit 12)
    for curve in ("eval/pass_at_1", "eval/pass_at_1_sampled"):  # greedy and sampled, step = policy version
        assert sorted(m.step for m in client.get_metric_history(parent.info.run_id, curve)) == [0, 1]
    assert "rollout/resample_rounds" not in metrics  # dynamic sampling is off by default
    artifacts = {f.path for f in client.list_artifacts(parent.info.run_id, "tables")}
    assert "tables/admission_report.parquet" in artifacts
    [suite] = client.get_run(parent.info.run_id).inputs.dataset_inputs  # the suite, with its content digest
    assert suite.dataset.name == "demo_python"
    assert len(suite.dataset.digest) == 32
    versions = client.search_model_versions("name='posttrain-policy'")
    assert {v.tags.get("policy_version") for v in versions} == {"0", "1"}


def test_the_smoke_run_admitted_every_bundled_demo_env_by_every_check(smoke_run, tmp_path):
    """The bundled demo suite stays admissible: each of its 400-odd envs passes every admission check in the
    smoke run (``conftest.SMOKE_CFG``; ``tests/admission/test_checks.py`` admits a sample of every shape and split)."""
    client = smoke_run.client
    runs = client.search_runs([client.get_experiment_by_name("posttrain").experiment_id])
    [parent] = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    report = pd.read_parquet(client.download_artifacts(parent.info.run_id, "tables/admission_report.parquet",
                                                       str(tmp_path)))
    envs = load_suite(DEMO_SUITE).envs
    assert len(envs) >= 400
    assert set(report["check"]) == set(ADMISSION_CHECKS)
    assert len(report) == len(ADMISSION_CHECKS) * len(envs)
    assert set(report["env_id"]) == {spec.id for spec in envs}
    failed = report[~report["passed"]]
    assert failed.empty, failed[["env_id", "check", "detail"]].to_string()


DYNAMIC = {"iterations": 1, "rollout": {"replicas": 1, "samples_per_env": 2, "envs_per_iteration": 4,
                                        "max_new_tokens": 32, "dynamic_sampling": True, "max_resample_rounds": 2},
           "train": {"micro_batch_size": 16}, "eval": {"limit": 4, "max_new_tokens": 32, "samples": 2},
           "admission": {"checks": ["consistency"]}}


def test_dynamic_sampling_refills_zero_variance_groups_and_logs_what_it_did(tmp_path):
    """Groups of 2 samples from the demo policy: some have equal rewards, so refill rounds sample fresh train envs;
    the update trains only on groups whose rewards differ, and every group sampled is counted."""
    client = run_rl_loop(tmp_path, "rl_loop", "--cfg", json.dumps(DYNAMIC))

    runs = client.search_runs([client.get_experiment_by_name("posttrain").experiment_id])
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    iteration_1 = next(r for r in runs if r.data.tags.get("posttrain.iteration") == "1")
    m = {key: value for key, value in iteration_1.data.metrics.items() if key.startswith("rollout/")}
    assert m["rollout/target_groups"] == 4, m
    assert 1 <= m["rollout/resample_rounds"] <= 2, m
    assert m["rollout/refilled_groups"] >= 1
    assert m["rollout/dropped_groups"] >= m["rollout/zero_variance_groups"]
    assert m["rollout/learnable_groups"] + m["rollout/dropped_groups"] == 4 + m["rollout/refilled_groups"], m
    assert m["rollout/samples"] == iteration_1.data.metrics["reward/samples"] == 2 * (4 + m["rollout/refilled_groups"])

    trained = pd.read_parquet(client.download_artifacts(iteration_1.info.run_id, "tables/scored.parquet",
                                                        str(tmp_path)))
    usable = trained[trained["infra_error"] == ""]
    assert trained["group_id"].nunique() == m["rollout/learnable_groups"]
    assert (usable.groupby("group_id")["reward"].nunique() > 1).all()  # no zero-variance group left
    assert set(trained["policy_version"]) == {0}  # refills sample the same version
    for curve in ("eval/pass_at_1", "eval/pass_at_1_sampled", "rollout/resample_rounds"):
        assert curve in iteration_1.data.metrics
    assert sorted(h.step for h in client.get_metric_history(parent.info.run_id, "eval/pass_at_1_sampled")) == [0, 1]


FAMILY_SMOKE = {"iterations": 1, "rollout": {"replicas": 1, "samples_per_env": 2, "envs_per_iteration": 2,
                                              "max_new_tokens": 16, "max_model_len": 512,
                                              "system_prompt": "Complete the Python function."},
                "train": {"micro_batch_size": 8}, "eval": {"limit": 2, "max_new_tokens": 16, "samples": 0},
                "admission": {"checks": ["consistency"]}}


# One family through pyflyte run (the Flyte wiring is the same for all); each family's prompts, stops and exact
# tokens through vLLM and the trainer: tests/rollout/test_prompts.py, its agent episodes: tests/agent.
@pytest.mark.parametrize("family", ["mistral"])
def test_rl_smoke_runs_on_a_users_checkpoint_of_a_family_through_its_chat_template(family, family_policy, tmp_path):
    """``rl_smoke`` on a tiny checkpoint of the family (``posttrain.training.families``: its own tokenizer, chat
    template and stop ids) and 8 demo envs: every stage runs, v1 is registered, and every rollout row's prompt ids are
    the env's prompt rendered through the checkpoint's own template after the system prompt (``rollout.prompts``)."""
    import shutil
    from pathlib import Path

    from posttrain.rollout.prompts import PromptFormat

    suite = tmp_path / "suite"
    suite.mkdir()
    for spec in sorted(Path(DEMO_SUITE).glob("*.yaml"))[:8]:
        shutil.copy(spec, suite / spec.name)
    policy = family_policy(family)
    cfg = {**FAMILY_SMOKE, "suite": str(suite), "policy": str(policy)}
    client = run_rl_loop(tmp_path, "rl_smoke", "--cfg", json.dumps(cfg))

    runs = client.search_runs([client.get_experiment_by_name("posttrain").experiment_id])
    iteration_1 = next(r for r in runs if r.data.tags.get("posttrain.iteration") == "1")
    assert "eval/pass_at_1" in iteration_1.data.metrics
    assert "train/loss" in iteration_1.data.metrics
    assert {v.tags.get("policy_version") for v in client.search_model_versions("name='posttrain-policy'")} == {"0", "1"}
    scored = pd.read_parquet(client.download_artifacts(iteration_1.info.run_id, "tables/scored.parquet",
                                                       str(tmp_path)))
    assert len(scored) == 4
    fmt = PromptFormat.load(str(policy), "auto", FAMILY_SMOKE["rollout"]["system_prompt"])
    assert fmt.template is not None  # the checkpoint's own template
    for row in scored.itertuples():
        assert json.loads(row.prompt_token_ids) == fmt.encode([row.prompt])[0]

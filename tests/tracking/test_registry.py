"""Promotion through a real MLflow registry (sqlite in a temp dir): the evaluated versions registered (their weights,
never their training state), the others referenced; lineage tags on every version, ``candidate`` on the latest,
``champion`` moved only when the regression gate passes; policies downloaded by alias."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from posttrain import tracking
from posttrain.config import DEMO_SUITE
from posttrain.envs.suite import suite_digest
from posttrain.tracking import registry
from posttrain.training.checkpoints import weights_digest
from tests import mlflow_store

pytestmark = pytest.mark.integration


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_store(tmp_path))
    monkeypatch.setenv("POSTTRAIN_ARTIFACT_ROOT", (tmp_path / "artifacts").as_uri())
    monkeypatch.setenv("POSTTRAIN_GIT_SHA", "0123abcd")
    return tmp_path


def results(version: int, verdicts: dict[str, bool]) -> pd.DataFrame:
    return pd.DataFrame([{"env_id": env, "domain": "python", "difficulty": 1, "decoding": "greedy", "sample_idx": 0,
                          "policy_version": version, "steps": 1, "passed": passed, "reward": float(passed),
                          "infra_error": "", "assertions": json.dumps({"result/tests_pass": passed})}
                         for env, passed in verdicts.items()])


def policy_dir(root, version: int) -> str:
    """A policy version as the update writes it: weights and config, and its training state."""
    path = root / f"policy-v{version}"
    (path / "train_state").mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"version": version}))
    (path / "model.safetensors").write_bytes(b"weights %d" % version)
    (path / "train_state" / "mp_rank_00_model_states.pt").write_bytes(b"state")
    return str(path)


def aliases() -> dict[str, str]:
    model = tracking.client().get_registered_model(tracking.POLICY_MODEL_NAME)
    return {alias: str(version) for alias, version in model.aliases.items()}


def test_evaluated_versions_are_registered_candidate_follows_them_and_champion_only_the_gate(store):
    parent = tracking.start_run("posttrain-registry-test", run_name="rl_loop-x", tags={"flyte.execution_id": "f1"})
    registry.record_lineage(parent, suite_digest(DEMO_SUITE))
    plan = [  # (iteration, eval results or None, gate passed?, candidate, champion)
        (0, {"a": True, "b": False, "c": False}, True, "1", "1"),   # no champion yet
        (1, None, None, "1", "1"),                                  # not evaluated: referenced, not registered
        (2, {"a": False, "b": True, "c": True}, False, "2", "1"),   # better pass@1 but a regressed
        (3, {"a": True, "b": True, "c": False}, True, "3", "3"),    # no regression, pass@1 2/3 >= 1/3
    ]
    decisions, children = [], []
    for iteration, verdicts, _, candidate, champion in plan:
        table = results(iteration, verdicts) if verdicts else None
        child = tracking.log_iteration(parent, iteration, {"reward/mean": 0.5},
                                       tables={"eval_results": table} if table is not None else {},
                                       policy_dir=policy_dir(store, iteration), policy_version=iteration)
        decisions.append(registry.promote(child, table))
        children.append(child)
        assert (aliases()[registry.CANDIDATE], aliases()[registry.CHAMPION]) == (candidate, champion)
    assert [d.passed if d else None for d in decisions] == [expected for _, _, expected, _, _ in plan]
    assert decisions[2].regressions == ["a"]

    c = tracking.client()
    assert sorted(v.tags["policy_version"] for v in c.search_model_versions(f"name='{tracking.POLICY_MODEL_NAME}'")) \
        == ["0", "2", "3"]
    for iteration, child in enumerate(children):  # every iteration references its directory and weights
        tags = c.get_run(child).data.tags
        assert tags[tracking.POLICY_URI_TAG] == str(store / f"policy-v{iteration}")
        assert tags[tracking.POLICY_DIGEST_TAG] == weights_digest(store / f"policy-v{iteration}")
        logged = {f.path for f in c.list_artifacts(child, "policy")}
        assert logged == (set() if iteration == 1 else {"policy/config.json", "policy/model.safetensors"})
    assert "posttrain.registered_version" not in c.get_run(children[1]).data.tags
    version = c.get_model_version(tracking.POLICY_MODEL_NAME, "2")
    assert {"iteration": "2", "execution_id": "f1", "git_sha": "0123abcd", "suite_digest": suite_digest(DEMO_SUITE),
            "policy_version": "2", "gate": "failed"}.items() <= version.tags.items()
    assert "regressed on 1 env(s)" in version.tags["gate_reason"]
    assert c.get_run(version.run_id).data.tags["posttrain.gate"].startswith("failed: regressed on 1 env(s)")
    experiment = c.get_experiment_by_name("posttrain-registry-test")
    assert experiment.tags[tracking.EXPERIMENT_KIND_TAG] == "custom_model_development"

    downloaded = Path(registry.download_policy("models:/posttrain-policy@champion", str(store / "dl")))
    assert json.loads((downloaded / "config.json").read_text()) == {"version": 3}
    assert (downloaded / "model.safetensors").read_bytes() == b"weights 3"
    assert not (downloaded / "train_state").exists()
    assert registry.get_version("models:/posttrain-policy/2").tags["iteration"] == "2"
    with pytest.raises(ValueError, match="tag posttrain.registered_version missing"):
        registry.promote(children[1], results(1, {"a": True}))  # results, but no version: not logged by log_iteration


def test_gate_fails_closed_when_the_champion_was_never_evaluated_on_the_suite(store):
    parent = tracking.start_run("posttrain-registry-test", run_name="rl_loop-y")
    registry.record_lineage(parent, suite_digest(DEMO_SUITE))
    child = tracking.log_iteration(parent, 0, {}, tables={"eval_results": results(0, {"a": True})},
                                   policy_dir=policy_dir(store, 0), policy_version=0)
    assert registry.promote(child, results(0, {"a": True})).passed
    decision = registry.gate(results(1, {"a": True}), digest="another-suite")
    assert not decision.passed
    assert "has no eval results on suite another-suit" in decision.reason


def test_unknown_uris_are_refused_with_the_field_named(store):
    with pytest.raises(ValueError, match="policy='models:/posttrain-policy@nobody': no such"):
        registry.get_version("models:/posttrain-policy@nobody")
    with pytest.raises(ValueError, match="policy='s3://bucket/p': not a models:/"):
        registry.get_version("s3://bucket/p")


def test_the_suite_is_the_runs_dataset_input_once_with_its_digest_and_context(store):
    digest = suite_digest(DEMO_SUITE)
    run = tracking.start_run("datasets", run_name="training")
    for _ in range(2):  # a resumed run logs it again: still one input
        tracking.log_suite_input(run, DEMO_SUITE, digest, context="training")
    [logged] = tracking.client().get_run(run).inputs.dataset_inputs
    assert (logged.dataset.name, logged.dataset.digest) == (Path(DEMO_SUITE).name, digest[:32])
    assert Path(DEMO_SUITE).resolve().as_uri() in logged.dataset.source
    assert {(tag.key, tag.value) for tag in logged.tags} == {("mlflow.data.context", "training")}


def test_admission_runs_and_the_training_runs_that_used_their_result_are_linked_either_way(store):
    key = tracking.admission_key("digest-1", {"k": 8}, {"backend": "bwrap"})
    assert key != tracking.admission_key("digest-1", {"k": 4}, {"backend": "bwrap"})  # another admission result
    admission = tracking.start_run("posttrain-admission", "admit-a", tags={"posttrain.workflow": "admit"})
    assert tracking.link_admission(admission, key) == []  # nothing used it yet
    first = tracking.start_run("posttrain", "rl_loop-a", tags={"posttrain.workflow": "rl_loop"})
    assert tracking.link_admission(first, key) == [admission]
    other = tracking.start_run("posttrain", "rl_loop-b", tags={"posttrain.workflow": "rl_loop"})
    tracking.link_admission(other, tracking.admission_key("digest-2", {"k": 8}, {"backend": "bwrap"}))
    later = tracking.start_run("posttrain-admission", "admit-b", tags={"posttrain.workflow": "admit"})
    assert tracking.link_admission(later, key) == [first]  # logged after the training run: linked back to it

    c = tracking.client()
    assert c.get_run(first).data.tags["posttrain.admission_run_id"] == later  # the latest admission of that result
    assert "posttrain.admission_run_id" not in c.get_run(other).data.tags
    assert c.get_run(admission).data.tags[f"posttrain.used_by.{first}"] == "rl_loop"
    assert f"posttrain.used_by.{other}" not in c.get_run(admission).data.tags


def test_an_iteration_references_its_version_where_it_lives_not_the_local_copy(store):
    """On a cluster the track task reads a pod-local copy of v_k: the reference is the blob store's URI."""
    parent = tracking.start_run("posttrain-registry-test", run_name="rl_loop-y", tags={"flyte.execution_id": "f2"})
    local = policy_dir(store, 1)
    child = tracking.log_iteration(parent, 1, {"reward/mean": 0.5}, policy_dir=local, policy_version=1,
                                   policy_uri="s3://bucket/run-y/policy-v1")
    tags = tracking.client().get_run(child).data.tags
    assert tags[tracking.POLICY_URI_TAG] == "s3://bucket/run-y/policy-v1"
    assert tags[tracking.POLICY_DIGEST_TAG] == weights_digest(local)

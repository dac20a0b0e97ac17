"""The evaluate workflow's tasks, called as plain functions: a policy given as a checkpoint dir, a bad dir or an
unknown alias (each refused naming the input), a suite with bad spec files (the good envs are evaluated), and the
report (on the MLflow run and as the task's Flyte Deck)."""

from __future__ import annotations

import logging

import pytest

from posttrain.envs.suite import load_suite, suite_digest
from posttrain.training.checkpoints import CheckpointError
from tasks.standalone_eval import load_suite_envs, resolve_policy
from tests import FIXTURES, mlflow_store

pytestmark = pytest.mark.integration


def test_a_checkpoint_dir_resolves_to_itself_unregistered(tiny_policy):
    resolved = resolve_policy(policy=str(tiny_policy))
    assert resolved.policy.path == str(tiny_policy)
    assert (resolved.version, resolved.registered) == (0, "")


def test_bad_policies_are_refused_naming_the_input(tmp_path, monkeypatch):
    with pytest.raises(CheckpointError, match=f"policy dir {tmp_path} has no config.json"):
        resolve_policy(policy=str(tmp_path))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_store(tmp_path))
    with pytest.raises(ValueError, match="policy='models:/posttrain-policy@champion': no such registered"):
        resolve_policy(policy="models:/posttrain-policy@champion")


def test_a_suite_with_bad_specs_keeps_its_good_envs_and_logs_the_rest(caplog):
    suite = FIXTURES / "broken_suite"
    with caplog.at_level(logging.WARNING, logger="tasks.standalone_eval"):
        loaded = load_suite_envs(suite=str(suite))
    expected = load_suite(suite)
    assert sorted(loaded.envs["env_id"]) == sorted(env.id for env in expected.envs)
    assert loaded.digest == suite_digest(suite)
    assert len(expected.rejections) > 0
    assert sum("evaluate: skipping" in r.message for r in caplog.records) == len(expected.rejections)
    assert any("bad_malformed_yaml.yaml" in r.message for r in caplog.records)


def test_the_report_is_logged_on_the_run_and_shown_as_a_deck(tmp_path, monkeypatch, caplog):
    """Champion v1 passed both envs; the evaluated policy passes one: the report compares them, lists the flip, and
    is the task's Flyte Deck."""
    import re
    import shutil

    import pandas as pd

    from posttrain import tracking
    from posttrain.config import DEMO_SUITE, EvaluateConfig
    from posttrain.tracking import registry
    from posttrain.tracking.run_report import REPORT_PATH
    from tasks.standalone_eval import report_evaluation

    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_store(tmp_path))
    monkeypatch.setenv("POSTTRAIN_ARTIFACT_ROOT", (tmp_path / "artifacts").as_uri())
    suite, policy = tmp_path / "suite", tmp_path / "my-policy"
    suite.mkdir()
    policy.mkdir()
    (policy / "config.json").write_text("{}")
    for name in ("add_2", "mul_2"):
        shutil.copy(f"{DEMO_SUITE}/{name}.yaml", suite)

    def results(passed: dict[str, bool]) -> pd.DataFrame:
        return pd.DataFrame([{"env_id": f"demo/{env}", "domain": "python", "difficulty": 1, "decoding": "greedy",
                              "sample_idx": 0, "policy_version": 0, "steps": 1, "passed": ok, "reward": float(ok),
                              "infra_error": "", "assertions": "{}"} for env, ok in passed.items()])

    parent = tracking.start_run("posttrain", run_name="rl_loop-earlier")
    registry.record_lineage(parent, suite_digest(str(suite)))
    champion = results({"add_2": True, "mul_2": True})
    child = tracking.log_iteration(parent, 0, {}, tables={"eval_results": champion}, policy_dir=str(policy),
                                   policy_version=0)
    assert registry.promote(child, champion).passed
    with caplog.at_level(logging.INFO, logger="flytekit"):
        report = report_evaluation(cfg=EvaluateConfig(policy=str(policy), suite=str(suite)),
                                   results=results({"add_2": True, "mul_2": False}), registered="",
                                   digest=suite_digest(suite))

    local = tmp_path / "download"
    local.mkdir()
    page = open(tracking.client().download_artifacts(report.run_id, REPORT_PATH, str(local))).read()
    assert "<th>champion (registered v1)</th><th>my-policy</th>" in page
    assert "<h2>flips vs champion</h2>" in page
    assert re.findall(r'<td class="label">([^<]*)</td><td>(\w+)</td>', page) == [("demo/mul_2", "broken")]
    (deck_path,) = re.findall(r"report_evaluation task creates flyte deck html to file://(\S+)", caplog.text)
    deck = open(deck_path).read()
    assert "evaluation report" in deck
    assert "greedy pass@1 per stratum" in deck
    assert "<svg" in deck

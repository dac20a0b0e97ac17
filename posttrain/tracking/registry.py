"""Promotion in the MLflow model registry: lineage tags on every ``posttrain-policy`` version, and the aliases
``candidate`` (the latest registered version) and ``champion`` (the best version that passed the regression gate),
which only ``promote`` moves.

A version is registered by ``tracking.log_iteration`` for each RL iteration run that evaluated its policy (v0, every
``eval.every``-th and the last: the weights that were measured; the other iterations log only a reference to their
policy directory); ``promote(run_id, results)`` then tags it with its lineage (``iteration``, ``execution_id``,
``git_sha``, ``suite_digest``, read from the run and its parent, which ``record_lineage`` tagged when the workflow
started), points ``candidate`` at it and, when the version was evaluated, runs the gate
(``posttrain.evaluation.regression.regression_gate``) against the champion's eval results on the same suite (same
digest): from its own RL iteration run or a later ``workflows/evaluate.py`` run. A champion with no results on this
suite cannot be compared: the gate fails closed and says so. The decision is tagged on the version (``gate``,
``gate_reason``).

Policies are addressed as ``models:/posttrain-policy@champion`` (alias) or ``models:/posttrain-policy/3`` (version).

Example:
    >>> parse_model_uri("models:/posttrain-policy@champion"), parse_model_uri("models:/posttrain-policy/3")
    (('posttrain-policy', 'champion'), ('posttrain-policy', '3'))
    >>> parse_model_uri("/checkpoints/v3") is None
    True
    >>> promote(child_run_id, eval_results)   # doctest: +SKIP
    GateDecision(passed=True, reason='no champion yet', ...)
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile

import pandas as pd

from posttrain import tracking
from posttrain.config import PROJECT_ROOT
from posttrain.evaluation.regression import GateDecision, regression_gate

CANDIDATE, CHAMPION = "candidate", "champion"
RESULTS_ARTIFACT = f"tables/{tracking.EVAL_RESULTS}.parquet"  # where tracking.log_table puts the EvalResults table
_MODEL_URI = re.compile(r"^models:/(?P<name>[^/@]+)(?:@(?P<alias>[\w-]+)|/(?P<version>\d+))$")


def parse_model_uri(uri: str) -> tuple[str, str] | None:
    """``(model name, alias or version number)`` of a ``models:/`` URI; None for any other path or URI."""
    match = _MODEL_URI.match(uri)
    return (match["name"], match["alias"] or match["version"]) if match else None


def get_version(uri: str):
    """The ``ModelVersion`` a ``models:/name@alias`` or ``models:/name/N`` URI names (raises ValueError if none)."""
    parsed = parse_model_uri(uri)
    if parsed is None:
        raise ValueError(f"policy={uri!r}: not a models:/<name>@<alias> or models:/<name>/<version> URI")
    name, ref = parsed
    c = tracking.client()
    try:
        return c.get_model_version(name, ref) if ref.isdigit() else c.get_model_version_by_alias(name, ref)
    except Exception as missing:  # MlflowException RESOURCE_DOES_NOT_EXIST
        raise ValueError(f"policy={uri!r}: no such registered version or alias ({missing})") from missing


def pinned(uri: str) -> str:
    """A ``models:/name@alias`` URI as the version the alias points at now (``models:/name/N``); any other reference
    (a version, a path) as it is."""
    parsed = parse_model_uri(uri)
    if parsed is None or parsed[1].isdigit():
        return uri
    return f"models:/{parsed[0]}/{get_version(uri).version}"


def download_policy(uri: str, dst: str) -> str:
    """Download the policy directory of a registered version or alias into ``dst``; returns its path."""
    import mlflow

    version = get_version(uri)
    tracking.client()  # sets the tracking (and registry) URI
    return mlflow.artifacts.download_artifacts(artifact_uri=version.source, dst_path=dst)


def git_sha() -> str:
    """The code's commit: ``POSTTRAIN_GIT_SHA`` (set in task images), else ``git rev-parse HEAD``, else unknown."""
    if sha := os.environ.get("POSTTRAIN_GIT_SHA"):
        return sha
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def record_lineage(parent_run_id: str, digest: str) -> None:
    """Tag a workflow's parent run with what every version it registers descends from: the suite's content digest
    (``envs.suite.suite_digest``), the code commit."""
    c = tracking.client()
    c.set_tag(parent_run_id, "posttrain.suite_digest", digest)
    c.set_tag(parent_run_id, "mlflow.source.git.commit", git_sha())


def lineage_tags(run_id: str) -> dict[str, str]:
    """The version tags of the policy an iteration run registered: iteration, execution id, git sha, suite digest."""
    c = tracking.client()
    run = c.get_run(run_id)
    parent_id = run.data.tags.get("mlflow.parentRunId", "")
    parent = c.get_run(parent_id).data.tags if parent_id else {}
    return {"iteration": run.data.tags.get("posttrain.iteration", ""),
            "execution_id": parent.get("flyte.execution_id", ""),
            "git_sha": parent.get("mlflow.source.git.commit", "unknown"),
            "suite_digest": parent.get("posttrain.suite_digest", "")}


def run_results(run_id: str) -> pd.DataFrame | None:
    """The EvalResults table logged on a run, or None when it has none."""
    c = tracking.client()
    if RESULTS_ARTIFACT not in {f.path for f in c.list_artifacts(run_id, "tables")}:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        return pd.read_parquet(c.download_artifacts(run_id, RESULTS_ARTIFACT, tmp))


def version_results(version: str, digest: str) -> pd.DataFrame | None:
    """The latest EvalResults of registered version ``version`` on the suite with ``digest``, from any run tagged
    with both (its RL iteration run, standalone evaluations); None when there is none."""
    c = tracking.client()
    experiments = [e.experiment_id for e in c.search_experiments()]
    runs = c.search_runs(experiments, order_by=["attributes.start_time DESC"],
                         filter_string=f"tags.`posttrain.registered_version` = '{version}' and "
                                       f"tags.`posttrain.suite_digest` = '{digest}'")
    return next((table for run in runs if (table := run_results(run.info.run_id)) is not None), None)


def alias_version(alias: str) -> str | None:
    """The version number an alias of ``posttrain-policy`` points at, or None."""
    try:
        return str(tracking.client().get_model_version_by_alias(tracking.POLICY_MODEL_NAME, alias).version)
    except Exception:  # MlflowException: no such alias (or no registered model yet)
        return None


def promote(run_id: str, results: pd.DataFrame | None, regression_envs: list[str] | None = None,
            max_regressions: int = 0) -> GateDecision | None:
    """Tag the version that iteration run ``run_id`` registered, make it ``candidate``, and when it was evaluated
    (``results``: its EvalResults) gate it against the champion; ``champion`` moves to it only if the gate passes.
    Returns the gate's decision; None, and nothing done, for a run that registered no version because it evaluated
    none (``results`` None)."""
    c = tracking.client()
    version = c.get_run(run_id).data.tags.get("posttrain.registered_version")
    if version is None and results is None:
        return None
    if version is None:
        raise ValueError(f"run {run_id}: tag posttrain.registered_version missing (no policy registered by it)")
    tags = lineage_tags(run_id)
    for key, value in tags.items():
        c.set_model_version_tag(tracking.POLICY_MODEL_NAME, version, key, value)
    c.set_tag(run_id, "posttrain.suite_digest", tags["suite_digest"])  # lets version_results find this run
    c.set_registered_model_alias(tracking.POLICY_MODEL_NAME, CANDIDATE, version)
    if results is None:
        return None  # a version registered without its evaluation (not by log_iteration): nothing to gate
    decision = gate(results, tags["suite_digest"], regression_envs, max_regressions)
    verdict = "passed" if decision.passed else "failed"
    c.set_model_version_tag(tracking.POLICY_MODEL_NAME, version, "gate", verdict)
    c.set_model_version_tag(tracking.POLICY_MODEL_NAME, version, "gate_reason", decision.reason[:4000])
    c.set_tag(run_id, "posttrain.gate", f"{verdict}: {decision.reason}"[:4000])  # shown with the iteration's run
    if decision.passed:
        c.set_registered_model_alias(tracking.POLICY_MODEL_NAME, CHAMPION, version)
    return decision


def gate(results: pd.DataFrame, digest: str, regression_envs: list[str] | None = None,
         max_regressions: int = 0) -> GateDecision:
    """The regression gate of ``results`` against the current champion's results on the suite ``digest``."""
    champion = alias_version(CHAMPION)
    if champion is None:
        return regression_gate(results, None)
    baseline = version_results(champion, digest)
    if baseline is None:
        return GateDecision(False, f"champion v{champion} has no eval results on suite {digest[:12]}: evaluate it "
                                   "there first (workflows/evaluate.py)")
    return regression_gate(results, baseline, regression_envs, max_regressions)


"""Flyte tasks: fingerprint a suite, admit its envs (report + admitted Envs table + details and per-check stats), and
log an admission to MLflow."""

from __future__ import annotations

import tempfile
from dataclasses import asdict
from typing import NamedTuple

from flytekit import task
from pandera.typing import DataFrame

from posttrain import tracking
from posttrain.admission import admit
from posttrain.admission.policies import POLICY_FIELDS, scripted_policy
from posttrain.admission.render import write_report
from posttrain.config import AdmissionConfig, RolloutConfig, SandboxConfig
from posttrain.envs.suite import suite_digest
from posttrain.locations import local_copy
from posttrain.envs.table import envs_to_table
from posttrain.sandbox import make_sandbox
from posttrain.tracking.policies import pin_aliases, resolved
from posttrain.schemas import AdmissionCheckStats, AdmissionDetails, AdmissionReport, Envs
from tasks.execution import execution_name
from tasks.resources import CACHE_VERSION, stage
from tasks.tables import Table

Admission = NamedTuple("Admission", [("report", DataFrame[AdmissionReport]), ("envs", Table[Envs]),
                                     ("details", DataFrame[AdmissionDetails]),
                                     ("stats", DataFrame[AdmissionCheckStats]), ("wall_s", float)])


@task(**stage("track"))
def fingerprint_suite(suite: str) -> str:
    """Content hash of the suite's spec files: the cache key that makes admission re-run when a spec changes."""
    return suite_digest(local_copy(suite))


@task(**stage("track"))
def admission_rollout(rollout: RolloutConfig, cfg: AdmissionConfig) -> RolloutConfig:
    """How admission serves and prompts the policies it samples through vLLM (``weak_policy``, ``strong_policy``,
    ``learnability_policy`` naming a policy reference, not a scripted policy): as the run's rollout does (its chat
    template, system prompt, engine settings). The defaults when it samples none, so that admission's cache does not
    depend on settings it never uses."""
    names = (getattr(cfg, field) for field in POLICY_FIELDS)
    return rollout if any(name and scripted_policy(name) is None for name in names) else RolloutConfig()


@task(**stage("track"))
def pin_policies(cfg: AdmissionConfig) -> AdmissionConfig:
    """``cfg`` with each registry alias among its policies pinned to the version it points at now
    (``posttrain.tracking.policies.pin_aliases``): admission's cache key changes when the alias moves, and its report names the
    version it sampled."""
    return pin_aliases(cfg)


@task(cache=True, cache_version=CACHE_VERSION, **stage("admit"))
def admit_suite(suite: str, digest: str, sandbox: SandboxConfig, cfg: AdmissionConfig,
                rollout: RolloutConfig = RolloutConfig()) -> Admission:
    """Run the admission checks on every env of ``suite``; only admitted envs reach training. ``rollout``: how
    checkpoint policies are served and prompted (``admission_rollout``); policy references are resolved here, in the
    pod that samples them."""
    local = resolved(cfg)
    box = make_sandbox(sandbox)
    try:
        result = admit(local_copy(suite), box, sandbox, local, progress=True, rollout=rollout)
    finally:
        box.close()
    return Admission(report=result.report, envs=envs_to_table(result.admitted), details=result.details,
                     stats=result.stats, wall_s=result.wall_s)


@task(**stage("track"))
def log_admission(suite: str, digest: str, cfg: AdmissionConfig, details: DataFrame[AdmissionDetails],
                  stats: DataFrame[AdmissionCheckStats], wall_s: float, experiment: str,
                  sandbox: SandboxConfig = SandboxConfig()) -> str:
    """One MLflow run per admission: config as params, the report (parquet + HTML), per-check stats and metrics;
    linked both ways to the training runs that use the same admission result (``tracking.link_admission``)."""
    execution = execution_name()
    run_id = tracking.start_run(experiment, run_name=f"admit-{execution}",
                                params={"suite": suite, "suite_digest": digest, **asdict(cfg)},
                                tags={"flyte.execution_id": execution, "posttrain.workflow": "admit"})
    tracking.log_suite_input(run_id, suite, digest, context="admission")
    tracking.log_table(run_id, details, "admission_report", html=True)
    tracking.log_table(run_id, stats, "admission_check_stats", html=True)
    tracking.log_metrics(run_id, tracking.admission_metrics(details, stats, wall_s), step=0)
    tracking.link_admission(run_id, tracking.admission_key(digest, asdict(cfg), asdict(sandbox)))
    with tempfile.TemporaryDirectory() as tmp:
        write_report(tmp, details, stats, title=suite, wall_s=wall_s)
        tracking.client().log_artifacts(run_id, tmp, artifact_path="admission")
    tracking.finish_run(run_id)
    return run_id

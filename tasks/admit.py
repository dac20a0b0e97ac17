"""Flyte tasks: fingerprint a suite and admit its envs (report + admitted Envs table)."""

from __future__ import annotations

from typing import NamedTuple

from flytekit import task
from pandera.typing import DataFrame

from posttrain.admission import admit
from posttrain.config import SandboxConfig
from posttrain.envs.suite import suite_digest
from posttrain.envs.table import envs_to_table
from posttrain.schemas import AdmissionReport, Envs
from posttrain.sandbox import make_sandbox
from tasks.resources import CACHE_VERSION, stage

Admission = NamedTuple("Admission", [("report", DataFrame[AdmissionReport]), ("envs", DataFrame[Envs])])


@task(**stage("track"))
def fingerprint_suite(suite: str) -> str:
    """Content hash of the suite's spec files: the cache key that makes admission re-run when a spec changes."""
    return suite_digest(suite)


@task(cache=True, cache_version=CACHE_VERSION, **stage("admit"))
def admit_suite(suite: str, digest: str, sandbox: SandboxConfig) -> Admission:
    """Run the admission checks on every env of ``suite``; only admitted envs reach training."""
    box = make_sandbox(sandbox)
    try:
        result = admit(suite, box, sandbox)
    finally:
        box.close()
    return Admission(report=result.report, envs=envs_to_table(result.admitted))

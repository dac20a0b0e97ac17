"""Admit a suite on its own and log the report to MLflow.

    pyflyte run workflows/admit.py admit --suite posttrain/envs/suites/demo_python
    pyflyte run workflows/admit.py admit --suite tests/fixtures/broken_suite --cfg '{"repeats": 5, "k": 8}'

The MLflow run (experiment ``posttrain-admission`` unless ``--experiment``) holds the suite digest and the config as
params, ``tables/admission_report.parquet`` (+ ``.html``), ``tables/admission_check_stats.parquet``, the rendered
``admission/report.html`` (the same files ``posttrain admit SUITE --out DIR`` writes) and per-check metrics.
"""

from __future__ import annotations

from flytekit import workflow
from pandera.typing import DataFrame

from posttrain.config import DEMO_SUITE_REF, AdmissionConfig, RolloutConfig, SandboxConfig
from posttrain.schemas import AdmissionReport
from tasks.admit import admission_rollout, admit_suite, fingerprint_suite, log_admission, pin_policies


@workflow
def admit(suite: str = DEMO_SUITE_REF, cfg: AdmissionConfig = AdmissionConfig(),
          sandbox: SandboxConfig = SandboxConfig(), experiment: str = "posttrain-admission",
          rollout: RolloutConfig = RolloutConfig()) -> DataFrame[AdmissionReport]:
    """Fingerprint and admit ``suite``, log the report; returns the report (one row per env and check).
    ``rollout``: how checkpoint policies of the checks are served and prompted (as the loop's ``rollout``)."""
    digest = fingerprint_suite(suite=suite)
    admission = admit_suite(suite=suite, digest=digest, sandbox=sandbox, cfg=pin_policies(cfg=cfg),
                            rollout=admission_rollout(rollout=rollout, cfg=cfg))
    log_admission(suite=suite, digest=digest, cfg=cfg, details=admission.details, stats=admission.stats,
                  wall_s=admission.wall_s, experiment=experiment, sandbox=sandbox)
    return admission.report

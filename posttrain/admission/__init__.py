"""Admission: which envs of a suite are fit for RL, with a report (one row per env and check) and statistics.

``admit(suite, sandbox, sandbox_cfg, AdmissionConfig())`` runs the checks ``admission.checks`` describes; each row's
detail starts with its reason code (every code and its meaning: ``admission.reasons``, rendered into the README),
and ``admission.render.write_report`` writes the parquet + HTML report that ``posttrain admit`` and
``workflows/admit.py`` share. The scripted and checkpoint policies the discrimination and learnability checks sample
are in ``admission.policies``.

Example:
    >>> from posttrain.admission import admit
    >>> from posttrain.config import DEMO_SUITE, AdmissionConfig, SandboxConfig
    >>> from posttrain.sandbox import make_sandbox
    >>> result = admit(DEMO_SUITE, make_sandbox("bwrap"), SandboxConfig(), AdmissionConfig())   # doctest: +SKIP
    >>> result.report.columns.tolist(), len(result.admitted)                                    # doctest: +SKIP
    (['env_id', 'check', 'passed', 'detail'], 84)
"""

from posttrain.admission.checks import AdmissionResult, admit, run_checks
from posttrain.admission.render import write_report
from posttrain.admission.report import check_stats, env_codes, rejection_reasons, report_text

__all__ = ["AdmissionResult", "admit", "check_stats", "env_codes", "rejection_reasons", "report_text", "run_checks",
           "write_report"]

"""Admission: which envs of a suite are fit for RL, with a report (one row per env and check) and statistics.

``admit(suite, sandbox, sandbox_cfg, AdmissionConfig())`` runs the checks ``admission.checks`` describes; each row's
detail starts with its reason code, and ``admission.render.write_report`` writes the parquet + HTML report that
``posttrain admit`` and ``workflows/admit.py`` share. Reason codes, by check (details in each check's module):

- consistency (``admission.consistency``): ``malformed_yaml``, ``unreadable``, ``missing_field``,
  ``unknown_field``, ``wrong_type``, ``unknown_runtime`` / ``unknown_kind`` / ``unknown_split`` /
  ``unknown_verifier``, ``invalid_id``, ``empty_prompt``, ``out_of_range``, ``duplicate_id``, ``no_tests``,
  ``no_asserts``, ``runtime_mismatch``, ``invalid_entry_point``, ``contradictory_spec``, ``invalid_verifier``,
  ``entry_point_not_in_prompt``, ``entry_point_mismatch``, ``entry_point_not_in_reference``,
  ``entry_point_not_in_tests``, ``contradictory_kind``, ``missing_file``, ``limits_too_large``,
  ``limits_too_small``;
- solvability: ``reference_failed``; reproducibility: ``flaky`` (``not_applicable`` with one repeat);
- anti_hacking (``admission.hacking``): ``probe_passed:<probe name>`` (``not_applicable``: no probes);
- coverage (``admission.coverage``): ``mutants_survived`` (``not_applicable``: no mutants);
- discrimination (``admission.discrimination``): ``gap_too_small``;
- learnability: ``solved`` / ``unsolved`` (reject only with ``filter_learnability``);
- every check: ``<check>.ok``, ``<check>.skipped`` (its prerequisite, a sound reference, failed) and ``infra``
  (the sandbox or a policy engine failed: not admitted this run, not the env's fault).

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
from posttrain.admission.report import check_stats, env_codes, rejection_reasons, summarize

__all__ = ["AdmissionResult", "admit", "check_stats", "env_codes", "rejection_reasons", "run_checks", "summarize",
           "write_report"]

"""Admission: which envs of a suite are fit for RL (consistency, solvability, anti-hacking), with a report.

Example:
    >>> from posttrain.admission import admit
    >>> from posttrain.config import DEMO_SUITE, SandboxConfig
    >>> from posttrain.sandbox import make_sandbox
    >>> result = admit(DEMO_SUITE, make_sandbox("bwrap"), SandboxConfig())      # doctest: +SKIP
    >>> result.report.columns.tolist()                                          # doctest: +SKIP
    ['env_id', 'check', 'passed', 'detail']
"""

from posttrain.admission.checks import AdmissionResult, admit

__all__ = ["AdmissionResult", "admit"]

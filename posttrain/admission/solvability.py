"""The solvability and reproducibility checks: the reference passes, and passes the same way every time.

Runs of the reference are compared by ``fingerprint`` (a reference that returns time- or randomness-dependent
values is flaky). Reason codes: ``admission.reasons``.

Example:
    >>> from posttrain.envs.verifiers.base import Verdict
    >>> ok = Verdict(reward=1.0, passed=True, compiled=True, tests_passed=8, tests_total=8, detail="8/8 cases passed")
    >>> bad = Verdict(reward=0.875, passed=False, compiled=True, tests_passed=7, tests_total=8, detail="7/8 ...")
    >>> reproducibility_row("e/1", [ok, ok, bad]).code, reproducibility_row("e/1", [ok, ok, ok]).passed
    ('reproducibility.flaky', True)
"""

from __future__ import annotations

from collections import Counter

from posttrain.admission.report import INFRA, CheckRow
from posttrain.envs.verifiers.base import Verdict


def fingerprint(verdict: Verdict) -> tuple:
    """What must not change between runs of the same solution (timings are left out)."""
    return (verdict.passed, verdict.compiled, verdict.tests_passed, verdict.tests_total, round(verdict.reward, 9),
            verdict.exit_code, verdict.timed_out, verdict.detail)


def solvability_row(env_id: str, reference: Verdict) -> CheckRow:
    """The reference must pass; an infra failure is reported as such."""
    if reference.excluded:
        return CheckRow(env_id, "solvability", False, INFRA, reference.infra_error)
    if reference.passed:
        return CheckRow(env_id, "solvability", True, "solvability.ok", f"reference: {reference.detail}",
                        reference.reward)
    return CheckRow(env_id, "solvability", False, "solvability.reference_failed", f"reference: {reference.detail}",
                    reference.reward)


def reproducibility_row(env_id: str, runs: list[Verdict]) -> CheckRow:
    """``runs`` (the reference, R times) must agree; value = the number of distinct outcomes."""
    infra = [v for v in runs if v.excluded]
    if infra:
        return CheckRow(env_id, "reproducibility", False, INFRA, infra[0].infra_error)
    if len(runs) < 2:
        return CheckRow(env_id, "reproducibility", True, "reproducibility.not_applicable",
                        f"{len(runs)} run of the reference (repeats < 2)")
    outcomes = Counter(fingerprint(v) for v in runs)
    if len(outcomes) == 1:
        return CheckRow(env_id, "reproducibility", True, "reproducibility.ok",
                        f"{len(runs)} runs agree: {runs[0].detail}", 1.0)
    first = {fingerprint(v): v for v in reversed(runs)}
    shown = "; ".join(f"{count}x [{first[fp].detail[:80]}]" for fp, count in outcomes.most_common())
    return CheckRow(env_id, "reproducibility", False, "reproducibility.flaky",
                    f"{len(runs)} runs of the reference gave {len(outcomes)} different verdicts: {shown}",
                    float(len(outcomes)))


def reference_is_sound(runs: list[Verdict]) -> bool:
    """Whether the checks built on the reference (coverage, discrimination, learnability) can run."""
    return bool(runs) and all(not v.excluded for v in runs) and runs[0].passed \
        and len({fingerprint(v) for v in runs}) == 1

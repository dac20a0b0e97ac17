"""The solvability and reproducibility checks: the reference passes (and, for an agent env, so does its oracle
episode: ``admission.agent_episodes``) with full reward, and the reference passes the same way every time. Full
reward is what an env's reward layers add (``reward_layers``): a reference that passes every test but fails a gate or
a layer (lint) shows layers no solution can meet; without layers, passing is full reward.

Runs of the reference are compared by ``fingerprint`` (a reference that returns time- or randomness-dependent
values is flaky). Reason codes: ``admission.reasons``.

Example:
    >>> from posttrain.envs.verifiers.base import Verdict
    >>> ok = Verdict(reward=1.0, passed=True, compiled=True, tests_passed=8, tests_total=8, detail="8/8 cases passed")
    >>> bad = Verdict(reward=0.875, passed=False, compiled=True, tests_passed=7, tests_total=8, detail="7/8 ...")
    >>> reproducibility_row("e/1", [ok, ok, bad]).code, reproducibility_row("e/1", [ok, ok, ok]).passed
    ('reproducibility.flaky', True)
    >>> [solvability_row("e/1", ok, agent=True, oracle=o).code for o in (ok, bad)]
    ['solvability.ok', 'solvability.oracle_failed']
    >>> solvability_row("e/1", bad, agent=True, oracle=ok).code
    'solvability.reference_failed'
    >>> linted = Verdict(reward=0.9, passed=True, compiled=True, tests_passed=8, tests_total=8, detail="8/8 ...")
    >>> solvability_row("e/1", linted).code
    'solvability.reference_below_full_reward'
"""

from __future__ import annotations

from collections import Counter

from posttrain.admission.report import INFRA, CheckRow
from posttrain.envs.verifiers.base import Verdict


def fingerprint(verdict: Verdict) -> tuple:
    """What must not change between runs of the same solution (timings are left out)."""
    return (verdict.passed, verdict.compiled, verdict.tests_passed, verdict.tests_total, round(verdict.reward, 9),
            verdict.exit_code, verdict.timed_out, verdict.detail)


def solvability_row(env_id: str, reference: Verdict, agent: bool = False, oracle: Verdict | None = None) -> CheckRow:
    """The reference must pass with full reward and, for an ``agent`` env, its oracle episode too (``oracle``: the
    verdict on the episode's final workspace); an infra failure is reported as such."""
    if reference.excluded:
        return CheckRow(env_id, "solvability", False, INFRA, reference.infra_error)
    if not reference.passed:
        return CheckRow(env_id, "solvability", False, "solvability.reference_failed",
                        f"reference: {reference.detail}", reference.reward)
    if reference.reward < 1.0:
        return CheckRow(env_id, "solvability", False, "solvability.reference_below_full_reward",
                        f"reference: reward {reference.reward:.3g} under the env's reward layers: {reference.detail}",
                        reference.reward)
    if not agent:
        return CheckRow(env_id, "solvability", True, "solvability.ok", f"reference: {reference.detail}",
                        reference.reward)
    if oracle is None:
        raise ValueError(f"{env_id}: an agent env's solvability needs its oracle episode's verdict")
    if oracle.excluded:
        return CheckRow(env_id, "solvability", False, INFRA, f"oracle episode: {oracle.infra_error}")
    text = f"reference: {reference.detail}; oracle episode: {oracle.detail}"
    if oracle.passed and oracle.reward >= 1.0:
        return CheckRow(env_id, "solvability", True, "solvability.ok", text, oracle.reward)
    return CheckRow(env_id, "solvability", False, "solvability.oracle_failed", text, oracle.reward)


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

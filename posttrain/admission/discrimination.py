"""Discriminative power and learnability: pass rates of policies over k samples per env.

**Discrimination** compares a weak and a strong policy (``AdmissionConfig.weak_policy`` / ``strong_policy``:
scripted, or any policy reference sampled through vLLM, e.g. the starting policy ``demo`` against
``models:/posttrain-policy@champion``). Decision: an env is rejected iff ``strong - weak < min_gap``, the larger of
the run's ``AdmissionConfig.min_gap`` (default 0.1) and the spec's own (default 0). The run's default rejects the envs
on which the two policies do not differ: both pass every sample (too easy for either), both fail every one (too hard
for either: a GRPO group of such samples has zero advantage everywhere), both pass equally often in between, or the
weak one passes more often. With the scripted defaults (weak ``identity``, strong ``reference``) the gap is 1 minus
the identity program's pass rate, so only an env a program returning its first argument solves is rejected; an
``admission.min_gap`` of 0 rejects only the weak policy doing better (the rates are still reported). A weak policy
that passes sometimes is *not* by itself a rejection: a weak checkpoint legitimately solves easy envs, and degenerate
cheats are the anti-hacking check's job; "too easy" means the weak policy gets within ``min_gap`` of the strong one.
Value: the gap.

**Learnability** (only when ``learnability_policy`` is set): the current policy's pass rate must be strictly between
0 and 1 for the env to give a GRPO learning signal. Its rows reject only with ``filter_learnability``; otherwise
they pass with status ``reported``. Value: the pass rate. Reason codes of both checks: ``admission.reasons``.

Example:
    >>> gap_decision(weak=0.5, strong=1.0, min_gap=0.6)
    (False, -0.1)
    >>> learnability_code(0.0), learnability_code(0.25), learnability_code(1.0)
    ('learnability.unsolved', 'learnability.ok', 'learnability.solved')
"""

from __future__ import annotations

from posttrain.admission.report import INFRA, CheckRow
from posttrain.envs.verifiers.base import Verdict

EPS = 1e-9


def pass_rate(verdicts: list[Verdict]) -> float:
    """Fraction of samples that passed (callers handle infra verdicts first)."""
    return sum(v.passed for v in verdicts) / len(verdicts) if verdicts else 0.0


def gap_decision(weak: float, strong: float, min_gap: float) -> tuple[bool, float]:
    """(admitted, margin): admitted iff strong - weak >= min_gap; margin = (strong - weak) - min_gap."""
    margin = round((strong - weak) - min_gap, 9)
    return margin >= -EPS, margin


def discrimination_row(env_id: str, min_gap: float, weak: list[Verdict], strong: list[Verdict],
                       weak_name: str, strong_name: str) -> CheckRow:
    infra = [v for v in weak + strong if v.excluded]
    if infra:
        return CheckRow(env_id, "discrimination", False, INFRA, infra[0].infra_error)
    weak_rate, strong_rate = pass_rate(weak), pass_rate(strong)
    ok, _ = gap_decision(weak_rate, strong_rate, min_gap)
    gap = strong_rate - weak_rate
    text = (f"strong {strong_name!r} {strong_rate:.2f} - weak {weak_name!r} {weak_rate:.2f} = gap {gap:.2f} "
            f"(min_gap {min_gap:g}, k={len(strong)}/{len(weak)})")
    code = "discrimination.ok" if ok else "discrimination.gap_too_small"
    return CheckRow(env_id, "discrimination", ok, code, text, gap)


def learnability_code(rate: float) -> str:
    if rate <= EPS:
        return "learnability.unsolved"
    if rate >= 1 - EPS:
        return "learnability.solved"
    return "learnability.ok"


def learnability_row(env_id: str, samples: list[Verdict], policy_name: str, filtering: bool) -> CheckRow:
    infra = [v for v in samples if v.excluded]
    if infra:
        return CheckRow(env_id, "learnability", False, INFRA, infra[0].infra_error)
    rate = pass_rate(samples)
    code = learnability_code(rate)
    use = "filtered" if filtering else "reported only"
    text = f"{policy_name!r} passes {sum(v.passed for v in samples)}/{len(samples)} samples ({use})"
    return CheckRow(env_id, "learnability", code == "learnability.ok" or not filtering, code, text, rate)


def policy_failure_row(env_id: str, check: str, policy_name: str, error: BaseException) -> CheckRow:
    """A policy that could not sample (vLLM failed to start...) is infra, never the env's fault."""
    return CheckRow(env_id, check, False, INFRA, f"policy {policy_name!r} failed: {type(error).__name__}: {error}")

"""The anti-hacking check: every degenerate or cheating solution the verifier knows (``verifier.probes(spec)``:
empty program, no-op, ``return None``, early exits, skip-raising, runner and I/O monkeypatches, fake pass lines,
outputs hard-coded from the prompt...) must fail: not pass and earn a reward below 1.

The row's value is the fraction of probes that failed (1.0 for a sound env). Reason codes: ``admission.reasons``.

Example:
    >>> from posttrain.envs.verifiers.base import Verdict
    >>> fail = Verdict(reward=0.0, passed=False, compiled=True, tests_passed=0, tests_total=3)
    >>> cheat = Verdict(reward=1.0, passed=True, compiled=True, tests_passed=3, tests_total=3)
    >>> row = anti_hacking_row("e/1", {"empty program": fail, "return None": cheat})
    >>> row.code
    'anti_hacking.probe_passed:return None'
    >>> row.detail
    'anti_hacking.probe_passed:return None: 1/2 probes pass: return None (3/3)'
"""

from __future__ import annotations

from posttrain.admission.report import INFRA, CheckRow
from posttrain.envs.verifiers.base import Verdict

CHECK = "anti_hacking"


def cheated(verdict: Verdict) -> bool:
    """A probe cheats if it passes or earns full reward."""
    return verdict.passed or verdict.reward >= 1.0


def anti_hacking_row(env_id: str, probes: dict[str, Verdict]) -> CheckRow:
    """Every probe must fail; the detail names the probes that did not."""
    if not probes:
        return CheckRow(env_id, CHECK, True, f"{CHECK}.not_applicable", "the verifier has no probes for this env")
    infra = [(name, v) for name, v in probes.items() if v.excluded]
    if infra:
        return CheckRow(env_id, CHECK, False, INFRA, f"probe {infra[0][0]!r}: {infra[0][1].infra_error}")
    cheats = [name for name, v in probes.items() if cheated(v)]
    value = 1.0 - len(cheats) / len(probes)
    if cheats:
        shown = ", ".join(f"{name} ({probes[name].tests_passed}/{probes[name].tests_total})" for name in cheats)
        return CheckRow(env_id, CHECK, False, f"{CHECK}.probe_passed:{cheats[0]}",
                        f"{len(cheats)}/{len(probes)} probes pass: {shown}", value)
    best = max(probes, key=lambda name: probes[name].reward)
    return CheckRow(env_id, CHECK, True, f"{CHECK}.ok", f"all {len(probes)} probes fail (best: {best!r} with "
                                                       f"reward {probes[best].reward:.2f})", value)

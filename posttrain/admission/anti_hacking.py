"""The anti-hacking check: every degenerate or cheating solution the verifier knows (``verifier.probes(spec)``:
empty program, no-op, ``return None``, early exits, skip-raising, runner and I/O monkeypatches, fake pass lines,
outputs hard-coded from the prompt...) must fail: not pass and earn a reward below 1. The degenerate answers of
``DEGENERATE_PROBES`` (empty, constant, the prompt copied, self-consistent garbage) must moreover earn almost
nothing: at most ``AdmissionConfig.max_probe_reward``. A verifier gives its own version of one in its answer format
under the same name (numeric: every field 7; scene: the empty scene); ``probe_battery`` makes the others from
completions, through the verifier's ``extract_solution``, for every env of every kind.

One gap is listed, not hidden: ``UNBOUNDED`` names the verifier kinds whose degenerate answers must still fail but
are not yet bounded, and why; their rows say so and show the best such reward.

The row's value is the fraction of probes that failed as they must (1.0 for a sound env). Reason codes:
``admission.reasons``.

Example:
    >>> from posttrain.envs.verifiers.base import Verdict
    >>> fail = Verdict(reward=0.0, passed=False, compiled=True, tests_passed=0, tests_total=3)
    >>> cheat = Verdict(reward=1.0, passed=True, compiled=True, tests_passed=3, tests_total=3)
    >>> row = anti_hacking_row("e/1", {"empty program": fail, "return None": cheat})
    >>> row.code
    'anti_hacking.probe_passed:return None'
    >>> row.detail
    'anti_hacking.probe_passed:return None: 1/2 probes pass: return None (3/3)'
    >>> some = Verdict(reward=0.25, passed=False, compiled=True, tests_passed=1, tests_total=4)
    >>> row = anti_hacking_row("e/1", {"empty program": fail, "self-consistent garbage": some})
    >>> row.code, row.value
    ('anti_hacking.probe_rewarded:self-consistent garbage', 0.5)
    >>> row.detail.split(": ", 1)[1]
    '1/2 probes earn more than 0.1: self-consistent garbage (reward 0.25, 1/4)'
"""

from __future__ import annotations

from posttrain.admission.report import INFRA, CheckRow
from posttrain.envs.spec import EnvSpec
from posttrain.envs.verifiers.base import Verdict, Verifier

CHECK = "anti_hacking"
MAX_PROBE_REWARD = 0.1  # AdmissionConfig.max_probe_reward's default

# The degenerate answers whose reward admission bounds, by probe name: what each is, and its generic completion
# (None: only a verifier that knows its answer format can make one).
DEGENERATE_PROBES: dict[str, tuple[str, str | None]] = {
    "empty answer": ("the empty completion, or the verifier's empty answer (an empty scene)", ""),
    "constant answer": ("one fixed answer whatever the env asks (numeric: every field 7; scene: one unit box)", "0"),
    "copy of the prompt": ("the env's prompt, copied as the completion", None),
    "self-consistent garbage": ("an answer consistent with itself but not with the env (numeric: every field 7, "
                                "each formula solved for its left-hand side)", None),
}


# Verifier kinds whose degenerate answers are not bounded yet (they must still fail), and why.
UNBOUNDED: dict[str, str] = {
    "workspace_tests": "it credits the tests the untouched workspace already passes: doing nothing earns up to "
                       "0.57 on 48 of the 114 bundled terminal, node and agent_repo envs, which a bound would reject "
                       "until the verifier credits only what the solution changed",
}


def probe_battery(spec: EnvSpec, verifier: Verifier) -> dict[str, str]:
    """Every probe of ``spec``: the verifier's own, plus a generic version of each degenerate probe it does not give
    (its completion through ``verifier.extract_solution``; the prompt for ``copy of the prompt``)."""
    own = dict(verifier.probes(spec))
    generic = {name: completion for name, (_, completion) in DEGENERATE_PROBES.items() if completion is not None}
    generic["copy of the prompt"] = spec.prompt
    return {**{name: verifier.extract_solution(text) for name, text in generic.items() if name not in own}, **own}


def cheated(verdict: Verdict) -> bool:
    """A probe cheats if it passes or earns full reward."""
    return verdict.passed or verdict.reward >= 1.0


def over_bound(name: str, verdict: Verdict, max_reward: float) -> bool:
    """A degenerate probe (``DEGENERATE_PROBES``) that earns more than ``max_reward``."""
    return name in DEGENERATE_PROBES and verdict.reward > max_reward


def anti_hacking_row(env_id: str, probes: dict[str, Verdict], max_reward: float = MAX_PROBE_REWARD,
                     unbounded: str = "") -> CheckRow:
    """Every probe must fail, and every degenerate one earn at most ``max_reward`` (unless ``unbounded`` says why
    not); the detail names the probes that did not (the code the first: a cheat that passes before a degenerate
    answer that earns)."""
    if not probes:
        return CheckRow(env_id, CHECK, True, f"{CHECK}.not_applicable", "the verifier has no probes for this env")
    infra = [(name, v) for name, v in probes.items() if v.excluded]
    if infra:
        return CheckRow(env_id, CHECK, False, INFRA, f"probe {infra[0][0]!r}: {infra[0][1].infra_error}")
    cheats = [name for name, v in probes.items() if cheated(v)]
    over = [name for name, v in probes.items() if over_bound(name, v, max_reward) and name not in cheats]
    earners = [] if unbounded else over
    value = 1.0 - (len(cheats) + len(earners)) / len(probes)
    if cheats:
        shown = ", ".join(f"{name} ({probes[name].tests_passed}/{probes[name].tests_total})" for name in cheats)
        more = f"; {_earning(earners, probes, max_reward)}" if earners else ""
        return CheckRow(env_id, CHECK, False, f"{CHECK}.probe_passed:{cheats[0]}",
                        f"{len(cheats)}/{len(probes)} probes pass: {shown}{more}", value)
    if earners:
        return CheckRow(env_id, CHECK, False, f"{CHECK}.probe_rewarded:{earners[0]}",
                        f"{len(earners)}/{len(probes)} {_earning(earners, probes, max_reward)}", value)
    best = max(probes, key=lambda name: probes[name].reward)
    gap = f"; not bounded ({unbounded}): {_earning(over, probes, max_reward)}" if unbounded and over else ""
    return CheckRow(env_id, CHECK, True, f"{CHECK}.ok", f"all {len(probes)} probes fail (best: {best!r} with "
                                                       f"reward {probes[best].reward:.2f}){gap}", value)


def _earning(names: list[str], probes: dict[str, Verdict], max_reward: float) -> str:
    shown = ", ".join(f"{name} (reward {probes[name].reward:.2f}, {probes[name].tests_passed}/"
                      f"{probes[name].tests_total})" for name in names)
    return f"probes earn more than {max_reward:g}: {shown}"

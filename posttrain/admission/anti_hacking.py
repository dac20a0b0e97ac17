"""The anti-hacking check: every degenerate or cheating solution the verifier knows (``verifier.probes(spec)``:
empty program, no-op, ``return None``, early exits, skip-raising, runner and I/O monkeypatches, fake pass lines,
outputs hard-coded from the prompt...) must fail: not pass and earn a reward below 1. The degenerate answers of
``DEGENERATE_PROBES`` (empty, constant, the prompt copied, self-consistent garbage) must moreover earn almost
nothing: at most ``AdmissionConfig.max_probe_reward``. A verifier gives its own version of one in its answer format
under the same name (numeric: every field 7; scene: the empty scene); ``probe_battery`` makes the others from
completions, through the verifier's ``extract_solution``, for every env of every kind.

A verifier whose tests may be labelled ``guard`` (behaviour the untouched workspace already has, which earns nothing
and must keep working: ``workspace_tests``) bounds doing nothing only if the labels are true, so its ``test_labels``
are checked against the verdict of its ``untouched workspace`` probe, test by test (``Verdict.failures``;
``label_outcomes``): a guard must pass there, any other test fail. One run of all the tests, as the reward runs
them, instead of one run per test.

The row's value is the fraction of probes that failed as they must and labels that held (1.0 for a sound env).
Reason codes: ``admission.reasons``.

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
    >>> row = anti_hacking_row("e/1", {"empty program": fail}, labels={"kept": (True, ""), "fixed": (False, "")})
    >>> row.code, round(row.value, 2)
    ('anti_hacking.mislabelled:fixed', 0.67)
"""

from __future__ import annotations

from posttrain.admission.report import INFRA, CheckRow
from posttrain.envs.spec import EnvSpec
from posttrain.envs.verifiers.base import UNTOUCHED, Verdict, Verifier

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


def label_outcomes(spec: EnvSpec, verifier: Verifier, probes: dict[str, Verdict]) -> dict[str, tuple[bool, str]]:
    """Each labelled test of ``spec`` -> (is a guard, why it failed on the untouched workspace, "" if it passed), read
    off the verdict of the verifier's ``UNTOUCHED`` probe among ``probes``; none where the verifier labels no test or
    that verdict is an infra error (the probe itself is reported then).

    >>> from posttrain.envs.verifiers import get_verifier
    >>> spec = EnvSpec(id="t/w", prompt="p", reference="true", kind="agent", workspace={"a": "1"}, runtime="bash",
    ...                verifier={"kind": "workspace_tests", "tests": [{"name": "kept", "cmd": "true", "guard": True},
    ...                                                                {"name": "fixed", "cmd": "false"}]})
    >>> untouched = Verdict(reward=0.0, passed=False, compiled=True, tests_passed=1, tests_total=2,
    ...                     failures=("", "fixed: exit code 1 (want 0)"))
    >>> label_outcomes(spec, get_verifier("workspace_tests"), {UNTOUCHED: untouched})
    {'kept': (True, ''), 'fixed': (False, 'fixed: exit code 1 (want 0)')}
    """
    labels = verifier.test_labels(spec)
    if not labels:
        return {}
    if UNTOUCHED not in probes:
        raise ValueError(f"verifier {verifier.kind!r} labels its tests but gives no {UNTOUCHED!r} probe")
    verdict = probes[UNTOUCHED]
    if verdict.excluded:
        return {}
    if len(verdict.failures) != len(labels):
        raise ValueError(f"the {UNTOUCHED!r} verdict reports {len(verdict.failures)} tests, the spec labels "
                         f"{len(labels)}")
    return {name: (guard, failure) for (name, guard), failure in zip(labels, verdict.failures)}


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


def mislabelled(labels: dict[str, tuple[bool, str]]) -> dict[str, str]:
    """The tests whose label the untouched workspace contradicts, and what each did there; ``labels`` maps a test to
    (is a guard, why it failed on the untouched workspace or "" if it passed: ``label_outcomes``)."""
    out = {}
    for test, (guard, failure) in labels.items():
        if guard and failure:
            out[test] = f"guard, fails there: {failure}"
        elif not guard and not failure:
            out[test] = "not a guard, passes there: doing nothing earns it"
    return out


def anti_hacking_row(env_id: str, probes: dict[str, Verdict], max_reward: float = MAX_PROBE_REWARD,
                     labels: dict[str, tuple[bool, str]] | None = None) -> CheckRow:
    """Every probe must fail, every degenerate one earn at most ``max_reward``, and every test label (``labels``:
    ``label_outcomes``) agree with the untouched workspace; the detail names what did not (the code the first: a
    cheat that passes, then a wrong label, then a degenerate answer that earns)."""
    labels = labels or {}
    if not probes:
        return CheckRow(env_id, CHECK, True, f"{CHECK}.not_applicable", "the verifier has no probes for this env")
    infra = [(name, v) for name, v in probes.items() if v.excluded]
    if infra:
        return CheckRow(env_id, CHECK, False, INFRA, f"probe {infra[0][0]!r}: {infra[0][1].infra_error}")
    cheats = [name for name, v in probes.items() if cheated(v)]
    earners = [name for name, v in probes.items() if over_bound(name, v, max_reward) and name not in cheats]
    wrong = mislabelled(labels)
    value = 1.0 - (len(cheats) + len(earners) + len(wrong)) / (len(probes) + len(labels))
    if cheats:
        shown = ", ".join(f"{name} ({probes[name].tests_passed}/{probes[name].tests_total})" for name in cheats)
        more = f"; {_earning(earners, probes, max_reward)}" if earners else ""
        return CheckRow(env_id, CHECK, False, f"{CHECK}.probe_passed:{cheats[0]}",
                        f"{len(cheats)}/{len(probes)} probes pass: {shown}{more}", value)
    if wrong:
        more = f"; {_earning(earners, probes, max_reward)}" if earners else ""
        shown = ", ".join(f"{test} ({why})" for test, why in wrong.items())
        return CheckRow(env_id, CHECK, False, f"{CHECK}.mislabelled:{next(iter(wrong))}",
                        f"{len(wrong)}/{len(labels)} test labels disagree with the untouched workspace: {shown}{more}",
                        value)
    if earners:
        return CheckRow(env_id, CHECK, False, f"{CHECK}.probe_rewarded:{earners[0]}",
                        f"{len(earners)}/{len(probes)} {_earning(earners, probes, max_reward)}", value)
    held = f"; all {len(labels)} test labels hold" if labels else ""
    best = max(probes, key=lambda name: probes[name].reward)
    return CheckRow(env_id, CHECK, True, f"{CHECK}.ok", f"all {len(probes)} probes fail (best: {best!r} with "
                                                       f"reward {probes[best].reward:.2f}){held}", value)


def _earning(names: list[str], probes: dict[str, Verdict], max_reward: float) -> str:
    shown = ", ".join(f"{name} (reward {probes[name].reward:.2f}, {probes[name].tests_passed}/"
                      f"{probes[name].tests_total})" for name in names)
    return f"probes earn more than {max_reward:g}: {shown}"

"""Admission: decide which envs of a suite are fit for RL, with one report row per (env, check).

Checks, all run for every env (sandbox work batched through ``verify_many``, ``cfg.concurrency`` at a time):
- ``consistency``: the spec file loads (each load rejection is a failing row naming file and field), and the entry
  point is named in both the prompt and the reference. A duplicated id fails every env that carries it.
- ``solvability``: the reference solution passes the verifier in the sandbox.
- ``anti_hacking``: scripted cheats must not pass: a no-op ``def <entry>(*a, **k): pass`` and a program that
  exits 0 before doing anything (``sys.exit(0)``).
An env is admitted iff all its rows pass. A sandbox infra failure fails the row with detail ``infra: ...``: the
env is not admitted this time, but the report says the sandbox, not the env, was at fault.

Example:
    >>> from posttrain.config import DEMO_SUITE, SandboxConfig
    >>> from posttrain.sandbox import make_sandbox
    >>> cfg = SandboxConfig()
    >>> result = admit(DEMO_SUITE, make_sandbox(cfg), cfg)                      # doctest: +SKIP
    >>> len(result.admitted), result.report.shape                              # doctest: +SKIP
    (84, (252, 4))
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from posttrain.admission.report import CheckRow, admitted_ids, to_frame
from posttrain.config import SandboxConfig
from posttrain.envs.spec import EnvSpec
from posttrain.envs.suite import Rejection, load_suite
from posttrain.envs.verifiers import verify_many
from posttrain.envs.verifiers.base import Verdict

# Scripted cheats (admission probes) for Python envs: each gets an entry point name, returns a program.
PROBES = {
    "no-op": lambda entry: f"def {entry}(*a, **k):\n    pass\n",
    "sys.exit(0)": lambda entry: "import sys\nsys.exit(0)\n",
}


@dataclass
class AdmissionResult:
    report: pd.DataFrame  # AdmissionReport: env_id, check, passed, detail
    admitted: list[EnvSpec]  # in suite order


def rejection_row(rejection: Rejection) -> CheckRow:
    """A load rejection as a failing consistency row (keyed by the env id if the file had one, else the file)."""
    return CheckRow(rejection.env_id or rejection.file, "consistency", False,
                    f"{rejection.file}: {rejection.field}: {rejection.reason}")


def consistency_row(spec: EnvSpec) -> CheckRow:
    """Whether the entry point is named in the prompt and in the reference."""
    name = re.compile(rf"\b{re.escape(spec.entry_point)}\b") if spec.entry_point else None
    missing = [what for what, text in (("prompt", spec.prompt), ("reference", spec.reference))
               if name is None or not name.search(text)]
    if missing:
        return CheckRow(spec.id, "consistency", False,
                        f"{spec.source}: entry point {spec.entry_point!r} is not named in the {' or '.join(missing)}")
    return CheckRow(spec.id, "consistency", True, "entry point named in prompt and reference")


def solvability_row(spec: EnvSpec, reference: Verdict) -> CheckRow:
    """The reference must pass (an infra failure is reported as such)."""
    if reference.excluded:
        return CheckRow(spec.id, "solvability", False, reference.detail)
    return CheckRow(spec.id, "solvability", reference.passed, f"reference: {reference.detail}")


def anti_hacking_row(spec: EnvSpec, probes: dict[str, Verdict]) -> CheckRow:
    """Every probe must fail; the detail lists what each probe scored."""
    infra = [v.detail for v in probes.values() if v.excluded]
    if infra:
        return CheckRow(spec.id, "anti_hacking", False, infra[0])
    scores = "; ".join(f"{name}: {v.tests_passed}/{v.tests_total}" for name, v in probes.items())
    cheats = [name for name, v in probes.items() if v.passed]
    if cheats:
        return CheckRow(spec.id, "anti_hacking", False, f"hackable: {', '.join(cheats)} passes ({scores})")
    return CheckRow(spec.id, "anti_hacking", True, f"probes fail ({scores})")


def admit(suite_path: str | Path, sandbox, cfg: SandboxConfig) -> AdmissionResult:
    """Load ``suite_path``, run every check on every env, and return the report and the admitted envs."""
    suite = load_suite(suite_path)
    jobs = [(spec, spec.reference) for spec in suite.envs]
    jobs += [(spec, probe(spec.entry_point)) for probe in PROBES.values() for spec in suite.envs]
    verdicts = verify_many(jobs, sandbox, cfg)
    n = len(suite.envs)
    rows = [rejection_row(r) for r in suite.rejections]
    for i, spec in enumerate(suite.envs):
        probes = {name: verdicts[n * (k + 1) + i] for k, name in enumerate(PROBES)}
        rows += [consistency_row(spec), solvability_row(spec, verdicts[i]), anti_hacking_row(spec, probes)]
    report = to_frame(rows)
    ok = admitted_ids(report)
    return AdmissionResult(report=report, admitted=[spec for spec in suite.envs if spec.id in ok])

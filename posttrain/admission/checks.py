"""Admission: decide which envs of a suite are fit for RL, with one report row per (env, check).

The checks (``AdmissionConfig.checks`` selects them), in the order they run:

1. ``consistency`` (host): schema (every loader rejection, with file and field), entry point named in the prompt
   and defined by the reference / used by the tests, files the reference and tests read present or named in the
   prompt, limits sane, verifier config valid. See ``admission.consistency``.
2. ``solvability``: the reference passes in the sandbox (``admission.solvability``); an agent env's ``oracle`` episode
   solves it too (``admission.agent_episodes``).
3. ``reproducibility``: ``repeats`` runs of the reference give identical verdicts and rewards.
4. ``anti_hacking``: every ``verifier.probes(spec)`` cheat fails and every degenerate answer (empty, constant, the
   prompt copied, self-consistent garbage) earns at most ``max_probe_reward`` (``admission.anti_hacking``); for
   agent envs the no-op and test-editing agents' episodes must fail too.
5. ``coverage``: mutation score of ``verifier.mutants(spec)`` >= ``mutation_threshold`` (``admission.coverage``).
6. ``discrimination``: strong - weak pass rate >= ``min_gap`` (the run's or the spec's, the larger) over ``k`` samples
   (``admission.discrimination``); plus ``learnability`` when ``learnability_policy`` is set.

Coverage, discrimination and learnability build on the reference, so they run only for envs whose reference
passed reproducibly; for the others their rows say ``<check>.skipped``. Every check's sandbox work is one
``verify_many`` batch over all envs (``batch_concurrency`` in flight), with a shared verdict cache (``admission.batch``)
and a progress bar. An env is admitted iff all its rows pass. A sandbox infra failure fails the row with reason code
``infra`` and detail ``infra: ...``: the env is not admitted this time, but the sandbox, not the env, was at fault.

Example:
    >>> from posttrain.config import DEMO_SUITE, AdmissionConfig, SandboxConfig
    >>> from posttrain.sandbox import make_sandbox
    >>> cfg = SandboxConfig()
    >>> result = admit(DEMO_SUITE, make_sandbox(cfg), cfg, AdmissionConfig(), progress=True)  # doctest: +SKIP
    >>> len(result.admitted), sorted(result.report["check"].unique())                        # doctest: +SKIP
    (84, ['anti_hacking', 'consistency', 'coverage', 'discrimination', 'reproducibility', 'solvability'])
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd

from posttrain.admission.agent_episodes import oracle_verdicts, probe_verdicts
from posttrain.admission.anti_hacking import anti_hacking_row, label_outcomes, probe_battery
from posttrain.admission.batch import SandboxBatches
from posttrain.admission.consistency import consistency_rows
from posttrain.admission.coverage import coverage_row, select_mutants
from posttrain.admission.discrimination import discrimination_row, learnability_row, policy_failure_row
from posttrain.admission.policies import SolutionPolicy, config_policy
from posttrain.admission.report import INFRA, CheckRow, admitted_ids, check_stats, details_frame, to_frame
from posttrain.admission.solvability import reference_is_sound, reproducibility_row, solvability_row
from posttrain.config import ADMISSION_CHECKS, AdmissionConfig, RolloutConfig, SandboxConfig
from posttrain.envs.spec import EnvSpec
from posttrain.envs.suite import Suite, load_suite
from posttrain.envs.verifiers import get_verifier
from posttrain.timing import timed

CHECK_ORDER = (*ADMISSION_CHECKS, "learnability")
REFERENCE_CHECKS = ("coverage", "discrimination", "learnability")  # need a sound reference


@dataclass
class AdmissionResult:
    report: pd.DataFrame  # AdmissionReport: env_id, check, passed, detail ("<reason code>: text")
    admitted: list[EnvSpec]  # in suite order
    details: pd.DataFrame = field(default_factory=pd.DataFrame)  # + status, code, value (report.DETAIL_COLUMNS)
    stats: pd.DataFrame = field(default_factory=pd.DataFrame)  # per-check statistics (report.STATS_COLUMNS)
    seconds: dict[str, float] = field(default_factory=dict)  # wall seconds per check
    executions: dict[str, int] = field(default_factory=dict)  # verifier runs per check (after the cache)
    reruns: dict[str, int] = field(default_factory=dict)  # deadline hits run again per check (admission.batch)
    wall_s: float = 0.0
    envs: int = 0  # spec files and envs seen (loaded envs + files that did not load)


def _skipped(envs: list[EnvSpec], check: str, why: dict[str, str]) -> list[CheckRow]:
    return [CheckRow(spec.id, check, False, f"{check}.skipped", why[spec.id]) for spec in envs if spec.id in why]


def _sample_check(batches: SandboxBatches, check: str, envs: list[EnvSpec], policies: list[tuple[str, object]],
                  k: int, seed: int) -> tuple[dict[str, list], Exception | None, str]:
    """Sample k solutions per env from each policy and verify them all in one batch: {env id: [verdicts per policy]}."""
    with batches.time(check):
        samples = []
        for name, policy in policies:
            try:
                samples.append(policy.solutions_many(envs, k, seed))
            except Exception as error:  # noqa: BLE001 - a policy engine failure is infra for every env
                return {}, error, name
    pairs = [(spec, solution) for per_policy in samples for spec, sols in zip(envs, per_policy) for solution in sols]
    verdicts = batches.run(check, pairs)
    out: dict[str, list] = {spec.id: [] for spec in envs}
    at = 0
    for per_policy in samples:
        for spec, sols in zip(envs, per_policy):
            out[spec.id].append(verdicts[at:at + len(sols)])
            at += len(sols)
    return out, None, ""


def _open_policies(cfg: AdmissionConfig, given: dict[str, SolutionPolicy],
                   rollout: RolloutConfig | None) -> dict[str, SolutionPolicy]:
    """The policies the configured checks sample, by config field (``weak_policy`` and ``strong_policy`` for
    discrimination, ``learnability_policy`` when set): ``given`` ones as they are, the others resolved now, before any
    sandbox work, so that one that cannot be resolved stops admission with a ``ConfigError`` naming its field."""
    fields = [*(("weak_policy", "strong_policy") if "discrimination" in cfg.checks else ()),
              *(("learnability_policy",) if cfg.learnability_policy else ())]
    return {field: given.get(getattr(cfg, field)) or config_policy(cfg, field, rollout) for field in fields}


def run_checks(suite: Suite, sandbox, sandbox_cfg: SandboxConfig, cfg: AdmissionConfig, progress: bool = False,
               policies: dict[str, SolutionPolicy] | None = None,
               rollout: RolloutConfig | None = None) -> tuple[list[CheckRow], SandboxBatches]:
    """Every configured check on every env of a loaded suite: the rows, and the batches (timings, executions).
    ``rollout``: how checkpoint policies are served and prompted (its engine and prompt fields; None: defaults)."""
    checks, envs, given = set(cfg.checks), suite.envs, dict(policies or {})
    opened = _open_policies(cfg, given, rollout)
    run_cfg = replace(sandbox_cfg, batch_concurrency=cfg.batch_concurrency or sandbox_cfg.batch_concurrency)
    batches = SandboxBatches(sandbox, run_cfg, progress=progress)
    rows: list[CheckRow] = []
    try:
        with batches.time("consistency"):
            consistency = consistency_rows(suite, sandbox_cfg, cfg)
        loaded = {spec.id for spec in envs}
        # files that did not load are always reported, even with the consistency check switched off
        rows += [row for row in consistency if "consistency" in checks or row.env_id not in loaded]
        want_reference = checks & {"solvability", "reproducibility", *REFERENCE_CHECKS} or cfg.learnability_policy
        runs: dict[str, list] = {spec.id: [] for spec in envs}
        if want_reference:
            for spec, verdict in zip(envs, batches.run("solvability", [(s, s.reference) for s in envs], fresh=True)):
                runs[spec.id].append(verdict)
            if "solvability" in checks:
                oracle = oracle_verdicts(batches, sandbox, run_cfg, cfg, envs)  # agent envs: the oracle episodes
                rows += [solvability_row(spec.id, runs[spec.id][0], spec.kind == "agent", oracle.get(spec.id))
                         for spec in envs]
        if "reproducibility" in checks and want_reference:
            repeats = cfg.repeats - 1
            verdicts = batches.run("reproducibility", [(s, s.reference) for s in envs for _ in range(repeats)],
                                   fresh=True)
            for i, spec in enumerate(envs):
                runs[spec.id] += verdicts[i * repeats:(i + 1) * repeats]
            rows += [reproducibility_row(spec.id, runs[spec.id]) for spec in envs]
        if "anti_hacking" in checks:
            rows += _anti_hacking(batches, envs, probe_verdicts(batches, sandbox, run_cfg, cfg, envs),
                                  cfg.max_probe_reward)
        why = {spec.id: ("the reference run hit an infra error" if any(v.excluded for v in runs[spec.id])
                         else "the reference did not pass reproducibly")
               for spec in envs if not reference_is_sound(runs[spec.id])}
        sound = [spec for spec in envs if spec.id not in why]
        if "coverage" in checks:
            rows += _coverage(batches, sound, cfg) + _skipped(envs, "coverage", why)
        if "discrimination" in checks:
            rows += _policy_rows(batches, "discrimination", sound, ["weak_policy", "strong_policy"], opened, cfg) + \
                _skipped(envs, "discrimination", why)
        if cfg.learnability_policy:
            rows += _policy_rows(batches, "learnability", sound, ["learnability_policy"], opened, cfg) + \
                _skipped(envs, "learnability", why)
    finally:
        batches.close()
        for policy in opened.values():
            if policy not in given.values():
                policy.close()
    return rows, batches


def _anti_hacking(batches: SandboxBatches, envs: list[EnvSpec], agent: dict[str, dict],
                  max_reward: float) -> list[CheckRow]:
    """The probes of every env (``probe_battery``), in one batch, plus, for agent envs, the agent probes' verdicts
    (``agent``); test labels are read off the untouched workspace's verdict (``label_outcomes``)."""
    probes: dict[str, dict[str, str]] = {}
    broken: dict[str, str] = {}
    for spec in envs:
        try:
            probes[spec.id] = probe_battery(spec, get_verifier(spec.verifier_kind))
        except Exception as error:  # noqa: BLE001 - a verifier bug is not the env's fault
            broken[spec.id] = f"verifier.probes raised {type(error).__name__}: {error}"
    sound = [spec for spec in envs if spec.id not in broken]
    verdicts = iter(batches.run("anti_hacking", [(spec, solution) for spec in sound
                                                 for solution in probes[spec.id].values()]))
    rows = []
    for spec in envs:
        if spec.id in broken:
            rows.append(CheckRow(spec.id, "anti_hacking", False, INFRA, broken[spec.id]))
            continue
        got = {name: next(verdicts) for name in probes[spec.id]}
        try:
            labels = label_outcomes(spec, get_verifier(spec.verifier_kind), got)
        except ValueError as error:  # a verifier bug is not the env's fault
            rows.append(CheckRow(spec.id, "anti_hacking", False, INFRA, f"test labels: {error}"))
            continue
        rows.append(anti_hacking_row(spec.id, {**got, **agent.get(spec.id, {})}, max_reward, labels))
    return rows


def _coverage(batches: SandboxBatches, envs: list[EnvSpec], cfg: AdmissionConfig) -> list[CheckRow]:
    mutants: dict[str, list[str]] = {}
    broken: dict[str, str] = {}
    with batches.time("coverage"):
        for spec in envs:
            try:
                mutants[spec.id] = select_mutants(spec.reference, list(get_verifier(spec.verifier_kind).mutants(spec)),
                                                  cfg.max_mutants)
            except Exception as error:  # noqa: BLE001
                broken[spec.id] = f"verifier.mutants raised {type(error).__name__}: {error}"
    pairs = [(spec, m) for spec in envs if spec.id in mutants for m in mutants[spec.id]]
    verdicts = batches.run("coverage", pairs)
    rows, at = [], 0
    for spec in envs:
        if spec.id in broken:
            rows.append(CheckRow(spec.id, "coverage", False, INFRA, broken[spec.id]))
            continue
        n = len(mutants[spec.id])
        rows.append(coverage_row(spec.id, spec.reference, mutants[spec.id], verdicts[at:at + n],
                                 cfg.mutation_threshold))
        at += n
    return rows


def _policy_rows(batches: SandboxBatches, check: str, envs: list[EnvSpec], fields: list[str],
                 opened: dict[str, SolutionPolicy], cfg: AdmissionConfig) -> list[CheckRow]:
    """Discrimination (fields = [weak, strong]) or learnability (fields = [learnability]) rows for ``envs``, sampled
    from the ``opened`` policy of each field."""
    if not envs:
        return []
    policies = [(getattr(cfg, field), opened[field]) for field in fields]
    names = [name for name, _ in policies]
    by_env, error, failed = _sample_check(batches, check, envs, policies, cfg.k, cfg.seed)
    if error is not None:
        return [policy_failure_row(spec.id, check, failed, error) for spec in envs]
    if check == "discrimination":
        return [discrimination_row(spec.id, max(spec.min_gap, cfg.min_gap), by_env[spec.id][0], by_env[spec.id][1],
                                   names[0], names[1]) for spec in envs]
    return [learnability_row(spec.id, by_env[spec.id][0], names[0], cfg.filter_learnability) for spec in envs]


def _ordered(rows: list[CheckRow], suite: Suite) -> list[CheckRow]:
    """Rows grouped by env in suite order (files that did not load last), checks in ``CHECK_ORDER``."""
    position = {spec.id: i for i, spec in enumerate(suite.envs)}
    check_at = {check: i for i, check in enumerate(CHECK_ORDER)}
    return sorted(rows, key=lambda r: (position.get(r.env_id, len(position)), r.env_id if r.env_id not in position
                                       else "", check_at.get(r.check, len(check_at))))


def admit(suite_path: str | Path, sandbox, sandbox_cfg: SandboxConfig, cfg: AdmissionConfig | None = None, *,
          progress: bool = False, policies: dict[str, SolutionPolicy] | None = None,
          rollout: RolloutConfig | None = None) -> AdmissionResult:
    """Load ``suite_path``, run the configured checks on every env, return the report and the admitted envs.

    ``policies`` maps policy names used in ``cfg`` to ready policy objects (otherwise built by ``make_policy``, a
    checkpoint's served and prompted as ``rollout`` says).
    """
    cfg = cfg or AdmissionConfig()
    clock = timed()
    suite = load_suite(suite_path)
    rows, batches = run_checks(suite, sandbox, sandbox_cfg, cfg, progress=progress, policies=policies,
                               rollout=rollout)
    details = details_frame(_ordered(rows, suite))
    report = to_frame(details)
    ok = admitted_ids(report)
    seconds = dict(batches.seconds)
    return AdmissionResult(report=report, admitted=[spec for spec in suite.envs if spec.id in ok], details=details,
                           stats=check_stats(details, seconds), seconds=seconds, executions=dict(batches.executions),
                           reruns=dict(batches.reruns), wall_s=clock.seconds, envs=int(details["env_id"].nunique()))

"""Turn a scored eval decode into the EvalResults table and its headline numbers: greedy and sampled pass@1.

Example (hand-computed: greedy passes env e; of its 4 samples 1 passes, of f's 2 samples 2 pass):
    >>> import pandas as pd
    >>> from posttrain.envs.spec import EnvSpec
    >>> envs = {i: EnvSpec(id=i, prompt="p", verifier={"kind": "python_tests"}, reference="", difficulty=d)
    ...         for i, d in (("e", 1), ("f", 2))}
    >>> scored = pd.DataFrame({"env_id": ["e"] * 5 + ["f"] * 2, "decoding": ["greedy"] + ["sampled"] * 6,
    ...                        "sample_idx": [0, 0, 1, 2, 3, 0, 1], "policy_version": 3, "steps": 1,
    ...                        "reward": [1.0, 1.0, 0.0, 0.5, 0.0, 1.0, 1.0], "infra_error": "",
    ...                        "tests_passed": [1, 1, 0, 1, 0, 1, 1], "tests_total": [1, 1, 1, 2, 1, 1, 1]})
    >>> summary = eval_metrics(eval_results(scored, envs))
    >>> summary["eval/pass_at_1"], summary["eval/pass_at_1_sampled"], summary["eval/pass_at_1_sampled/difficulty_1"]
    (1.0, 0.625, 0.25)

Each row's ``assertions`` are its env's (``posttrain.envs.assertions``; ``result/tests_pass`` alone when the
spec declares none), judged on the row's verdict, the previous policy's greedy verdicts (``previous``), the
episode's step log (``steps``) and the destructive effects its final workspace shows (``effects``); what cannot be
judged is null (not applicable):
    >>> envs["e"].evaluation = {"result": ["no_regression"], "behavior": ["no_destructive_command"]}
    >>> table = eval_results(scored, envs, previous={"e": True})
    >>> table["assertions"].iloc[0]   # greedy row of e: no agent episode, so no behavior verdict
    '{"result/tests_pass": true, "result/no_regression": true, "behavior/no_destructive_command": null}'
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence

import pandas as pd

from posttrain.envs import assertions as checks
from posttrain.envs.spec import EnvSpec
from posttrain.evaluation.metrics import pass_at_k
from posttrain.evaluation.regression import greedy_verdicts
from posttrain.schemas import EvalResults, all_tests_passed

log = logging.getLogger(__name__)
NO_REGRESSION = "result/no_regression"

StepLogs = Mapping[tuple[str, int], Sequence[Mapping]]  # (group_id, sample_idx) -> the episode's Steps rows
Effects = Mapping[tuple[str, int], Sequence[str] | None]  # (group_id, sample_idx) -> workspace_effects; None: unseen
STRATA = ("difficulty", "domain")  # the columns pass@1 is also logged per value of

def eval_results(scored: pd.DataFrame, envs: dict[str, EnvSpec], steps: pd.DataFrame | StepLogs | None = None,
                 previous: pd.DataFrame | Mapping[str, bool | None] | None = None,
                 effects: Effects | None = None) -> pd.DataFrame:
    """One EvalResults row per scored eval completion (greedy or sampled); passed means every test passed.

    ``steps``: the eval decode's agent episodes, a ``Steps`` table (or its rows grouped by ``(group_id,
    sample_idx)``), matched to ``scored`` rows by ``(group_id, sample_idx)`` (``group_id`` tells the greedy episode from
    sampled episode 0); a row without one has no behavior verdicts. ``previous``: the previous policy's (the
    champion's) greedy verdicts, env_id -> passed (NA/None: unverified), or its EvalResults table; it judges
    ``no_regression`` on greedy rows (sampled rows: not applicable). ``effects``: the destructive effects each
    episode's final workspace shows (``workspace_effects``, read by ``posttrain.agent.envs.final_effects``), by
    ``(group_id, sample_idx)`` like ``steps``; a row without them is judged by text alone. An env whose
    ``evaluation`` is invalid is warned about and judged on ``result/tests_pass`` alone."""
    logs = _step_logs(steps, scored)
    baseline = _verdicts(previous)
    declared: dict[str, list[checks.Assertion]] = {}
    all_passed = all_tests_passed(scored)
    rows = []
    for row in scored.itertuples():
        env = envs[row.env_id]
        passed = bool(all_passed[row.Index]) and not row.infra_error
        if env.id not in declared:
            declared[env.id] = _assertions(env)
        key = (getattr(row, "group_id", None), int(row.sample_idx))
        verdicts = checks.evaluate(declared[env.id], passed=None if row.infra_error else passed,
                                   previous=baseline.get(row.env_id) if row.decoding == "greedy" else None,
                                   steps=None if logs is None else logs.get(key),
                                   effects=None if effects is None else effects.get(key))
        rows.append({
            "env_id": row.env_id,
            "domain": env.domain,
            "difficulty": int(env.difficulty),
            "decoding": row.decoding,
            "sample_idx": int(row.sample_idx),
            "policy_version": int(row.policy_version),
            "steps": int(row.steps),
            "passed": passed,
            "reward": float(row.reward),
            "infra_error": row.infra_error,
            "assertions": json.dumps(verdicts),
        })
    return EvalResults.validate(pd.DataFrame(rows, columns=list(EvalResults.to_schema().columns)))


def judge_regressions(results: pd.DataFrame, previous: pd.DataFrame | Mapping[str, bool | None] | None
                      ) -> pd.DataFrame:
    """``results`` (EvalResults) with ``result/no_regression`` judged against ``previous`` (the previous evaluated
    version's EvalResults, or env_id -> its greedy verdict) on the greedy rows whose env declares it; other rows and
    assertions as they were. For rows judged where the previous version was not known yet: the agent tier's
    episodes are scored in a node that runs beside the previous version's evaluation, not after it.

    >>> rows = pd.DataFrame({"env_id": ["e", "f"], "decoding": "greedy", "passed": [False, True], "infra_error": "",
    ...                      "assertions": ['{"result/tests_pass": false, "result/no_regression": null}',
    ...                                     '{"result/tests_pass": true}']})
    >>> judge_regressions(rows, {"e": True, "f": False})["assertions"].tolist()  # e passed before, fails now
    ['{"result/tests_pass": false, "result/no_regression": false}', '{"result/tests_pass": true}']
    """
    baseline = _verdicts(previous)
    if not baseline or not len(results):
        return results
    rule = checks.parse_evaluation({"result": ["no_regression"]})
    judged = []
    for row in results.itertuples():
        verdicts = json.loads(row.assertions)
        if NO_REGRESSION in verdicts and row.decoding == "greedy":
            verdicts.update(checks.evaluate(rule, passed=None if row.infra_error else bool(row.passed),
                                            previous=baseline.get(row.env_id)))
        judged.append(json.dumps(verdicts))
    return results.assign(assertions=judged)


def _assertions(env: EnvSpec) -> list[checks.Assertion]:
    try:
        return checks.spec_assertions(env)
    except checks.EvaluationSpecError as error:
        log.warning("%s\n(judged on result/tests_pass alone)", error)
        return list(checks.DEFAULT)


def _step_logs(steps: pd.DataFrame | StepLogs | None, scored: pd.DataFrame) -> StepLogs | None:
    """(group_id, sample_idx) -> the episode's step rows in step order; None when no episodes were given."""
    if steps is None:
        return None
    if not isinstance(steps, pd.DataFrame):
        return steps
    if "group_id" not in scored.columns:
        raise ValueError("eval_results: steps given, but the scored table has no group_id column to match them by")
    ordered = steps.sort_values("step", kind="stable") if "step" in steps.columns else steps
    return {(str(group), int(idx)): part.to_dict("records")
            for (group, idx), part in ordered.groupby(["group_id", "sample_idx"], sort=False)}


def _verdicts(previous: pd.DataFrame | Mapping[str, bool | None] | None) -> dict[str, bool]:
    """env_id -> the previous greedy verdict, unverified ones left out."""
    if previous is None:
        return {}
    if isinstance(previous, pd.DataFrame):
        previous = greedy_verdicts(previous)
    return {str(env_id): bool(v) for env_id, v in previous.items() if v is not None and not pd.isna(v)}


def eval_metrics(results: pd.DataFrame) -> dict[str, float]:
    """Headline metrics over completions without infra errors: greedy pass@1 overall, per difficulty and per domain
    (``STRATA``: a run over several suites gets a curve per domain), and, when
    the table has sampled completions, sampled pass@1 likewise (``sampled_pass_at_1``); ``eval/infra_errors``
    counts every eval completion (greedy and sampled) whose verification hit one."""
    greedy = results[results["decoding"] == "greedy"]
    usable = greedy[greedy["infra_error"] == ""]
    summary = {
        "eval/pass_at_1": float(usable["passed"].mean()) if len(usable) else 0.0,
        "eval/reward_mean": float(usable["reward"].mean()) if len(usable) else 0.0,
        "eval/envs": float(len(greedy)),
        "eval/infra_errors": float((results["infra_error"] != "").sum()),
    }
    for stratum in STRATA if len(usable) else ():
        for group, part in usable.groupby(stratum):
            summary[f"eval/pass_at_1/{stratum}_{group}"] = float(part["passed"].mean())
    sampled = results[results["decoding"] == "sampled"]
    return {**summary, **sampled_pass_at_1(sampled)} if len(sampled) else summary


def sampled_pass_at_1(sampled: pd.DataFrame) -> dict[str, float]:
    """Sampled pass@1: per env the unbiased pass@1 of its usable samples (c of n passed: c / n), averaged over the
    envs, overall and per difficulty and domain (those of ``STRATA`` the table has). An env whose every sample hit an infra error has no estimate.

    >>> sampled = pd.DataFrame({"env_id": ["a", "a", "b", "b", "b"], "difficulty": [1, 1, 2, 2, 2],
    ...                         "passed": [True, False, True, True, False],
    ...                         "infra_error": ["", "", "", "", "sandbox did not start"]})
    >>> sampled_pass_at_1(sampled)   # a: 1 of 2, b: 2 of its 2 usable samples
    {'eval/pass_at_1_sampled': 0.75, 'eval/pass_at_1_sampled/difficulty_1': 0.5, \
'eval/pass_at_1_sampled/difficulty_2': 1.0}
    """
    usable = sampled[sampled["infra_error"] == ""]
    strata = [stratum for stratum in STRATA if stratum in usable]
    per_env = usable.groupby("env_id").agg(n=("passed", "size"), c=("passed", "sum"),
                                           **{stratum: (stratum, "first") for stratum in strata})
    per_env["pass_at_1"] = [pass_at_k(int(n), int(c), 1) for n, c in zip(per_env["n"], per_env["c"])]
    summary = {"eval/pass_at_1_sampled": float(per_env["pass_at_1"].mean()) if len(per_env) else 0.0}
    for stratum in strata:
        for group, part in per_env.groupby(stratum):
            summary[f"eval/pass_at_1_sampled/{stratum}_{group}"] = float(part["pass_at_1"].mean())
    return summary

"""Flyte tasks of ``workflows/evaluate.py`` around the evaluation itself (``tasks.evaluate.evaluate``): resolve the
policy (checkpoint dir, URI or registered version/alias), load the suite, and report (stratified metrics, flips vs
the baseline alias, parquet tables, the HTML report on the MLflow run and as a Flyte Deck). The engine's release is
the workflow's last step and failure handler."""

from __future__ import annotations

import logging
from dataclasses import asdict
from typing import NamedTuple, Optional

from flytekit import Deck, task
from flytekit.types.error import FlyteError
from pandera.typing import DataFrame

from posttrain import tracking
from posttrain.config import EvaluateConfig
from posttrain.envs.suite import load_suite, suite_digest
from posttrain.envs.table import envs_to_table
from posttrain.evaluation.regression import FLIPS, Flips, flips
from posttrain.evaluation.strata import EvalStrata, strata, strata_metrics
from posttrain.locations import is_remote, local_copy
from posttrain.rollout import live
from posttrain.sandbox import live as live_sandbox
from posttrain.schemas import Envs, EvalResults, empty
from posttrain.tracking import registry
from posttrain.tracking.run_report import log_report
from posttrain.training.checkpoints import policy_version
from tasks.execution import execution_name
from tasks.policy import PolicyDir, policy_folder
from tasks.resources import stage

log = logging.getLogger(__name__)

Resolved = NamedTuple("Resolved", [("policy", PolicyDir), ("version", int), ("registered", str)])
SuiteEnvs = NamedTuple("SuiteEnvs", [("envs", DataFrame[Envs]), ("digest", str)])
Report = NamedTuple("Report", [("strata", DataFrame[EvalStrata]), ("flips", DataFrame[Flips]), ("run_id", str)])


@task(**stage("policy"))
def resolve_policy(policy: str) -> Resolved:
    """The policy directory, its policy version (0 when unknown) and registered version ("" when not registered):
    ``models:/...`` is downloaded from the registry; a URI is passed through; a local dir is checked."""
    folder = policy_folder(policy)
    if registry.parse_model_uri(policy):
        version = registry.get_version(policy)
        return Resolved(folder, int(version.tags.get("policy_version", 0)), str(version.version))
    return Resolved(folder, 0 if is_remote(folder.path) else policy_version(folder.path), "")


@task(**stage("track"))
def load_suite_envs(suite: str) -> SuiteEnvs:
    """Every env of ``suite`` (no admission: evaluate what the suite says) and its digest; bad spec files are
    logged with their file and field, and the rest is evaluated."""
    local = local_copy(suite)
    loaded = load_suite(local)
    for rejection in loaded.rejections:
        log.warning("evaluate: skipping %s", rejection)
    return SuiteEnvs(envs=envs_to_table(loaded.envs), digest=suite_digest(local))


@task(**stage("track"), enable_deck=True, deck_fields=())
def report_evaluation(cfg: EvaluateConfig, results: DataFrame[EvalResults], registered: str,
                      digest: str) -> Report:
    """Stratified metrics, per-env flips vs ``cfg.baseline``'s latest results on this suite, all logged to one MLflow
    run (tagged so the registry finds these results: ``posttrain.registered_version``, ``posttrain.suite_digest``),
    and the HTML report (pass@1 per stratum of the baseline and this policy, the flips): ``reports/evaluation.html``
    on the run and this task's Flyte Deck (locally, ``FLYTE_SDK_LOGGING_LEVEL=20`` logs the deck file's path)."""
    table = strata(results, cfg.eval.pass_k)
    baseline_version = registry.alias_version(cfg.baseline) if cfg.baseline else None
    baseline = registry.version_results(baseline_version, digest) if baseline_version else None
    changes = flips(results, baseline) if baseline is not None else empty(Flips)
    execution = execution_name()
    tags = {"flyte.execution_id": execution, "posttrain.workflow": "evaluate", "posttrain.policy": cfg.policy,
            "posttrain.suite_digest": digest, "posttrain.baseline_version": baseline_version or ""}
    if registered:
        tags["posttrain.registered_version"] = registered
    run_id = tracking.start_run(cfg.experiment, run_name=f"evaluate-{execution}", params=asdict(cfg), tags=tags)
    tracking.log_suite_input(run_id, cfg.suite, digest, context="evaluation")
    tracking.log_table(run_id, results, tracking.EVAL_RESULTS)
    tracking.log_table(run_id, table, "eval_strata", html=True)
    tracking.log_table(run_id, changes, "eval_flips", html=True)
    counts = {f"eval/flips/{name}": float((changes["flip"] == name).sum()) for name in FLIPS} if len(changes) else {}
    tracking.log_metrics(run_id, {**strata_metrics(table), **counts}, step=0)
    evaluated = f"registered v{registered}" if registered else cfg.policy.rstrip("/").rsplit("/", 1)[-1]
    evaluations = {f"{cfg.baseline} (registered v{baseline_version})": baseline} if baseline is not None else {}
    Deck("evaluation report", log_report(run_id, {**evaluations, evaluated: results},
                                         flips=changes if baseline is not None else None,
                                         title=f"Evaluation of {cfg.policy}", flips_title=f"flips vs {cfg.baseline}"))
    tracking.finish_run(run_id)
    return Report(strata=table, flips=changes, run_id=run_id)


@task(**stage("track"))
def release_eval_engine(cfg: EvaluateConfig, err: Optional[FlyteError] = None) -> None:
    """Stop the process's live vLLM engine and sandbox: the evaluate workflow's last step and failure handler."""
    live.shutdown_all()
    live_sandbox.shutdown()

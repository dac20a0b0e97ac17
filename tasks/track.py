"""Flyte tasks: MLflow lineage. A parent run per RL run, a nested run per iteration.

Never cached, idempotent instead: the parent run is keyed by the run identity (``tracking.run_key``: config, suite
digest, starting policy digest, cache version), so a rerun of an interrupted execution resumes the first execution's
parent run, skips the iterations it finished and completes the one it left open: no duplicate runs or registry
versions. ``pyflyte run --overwrite-cache`` recomputes every stage, so it opens a new parent run.

While the loop runs these tasks print to stdout (``posttrain.tracking.run_lines``): where to open the run, then
per policy version, as it is logged, a line for the iteration that trained it and one for its evaluation (marked
resumed when an earlier execution logged them); ``finish_tracking`` prints the summary table.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Optional

from flytekit import Deck, task
from flytekit.configuration import LocalConfig
from pandera.typing import DataFrame

from posttrain import tracking
from posttrain.config import LoopConfig, PromotionConfig
from posttrain.evaluation.regression import flip_metrics, flips
from posttrain.schemas import AdmissionReport, EpisodeSnapshots, EvalResults, Scored, Steps
from posttrain.tracking import registry
from posttrain.tracking.metrics import baseline_metrics, iteration_metrics
from posttrain.tracking.run_lines import mlflow_line, version_lines, write_lines
from posttrain.tracking.run_report import log_loop_report
from posttrain.tracking.run_summary import print_summary
from posttrain.training.checkpoints import dir_digest
from tasks.execution import execution_name
from tasks.policy import PolicyDir
from tasks.resources import CACHE_VERSION, stage


@task(**stage("track"))
def start_tracking(cfg: LoopConfig, report: DataFrame[AdmissionReport], suite_digest: str, policy: PolicyDir) -> str:
    """Open the parent run (config as params, the admission report as an artifact), or resume the one an earlier
    execution of the same run (``suite_digest``, starting ``policy``, ``CACHE_VERSION``) opened, unless this
    execution recomputes every stage (``pyflyte run --overwrite-cache``); prints where to open it; returns the run
    id."""
    execution = execution_name()
    key = tracking.run_key(asdict(cfg), suite_digest, dir_digest(policy.download()), CACHE_VERSION)
    run_id, resumed = tracking.start_or_resume_run(
        cfg.experiment, key, run_name=f"rl_loop-{execution}", params=asdict(cfg),
        tags={"flyte.execution_id": execution, "posttrain.workflow": "rl_loop"},
        resume=not LocalConfig.auto().cache_overwrite)
    if resumed:
        tracking.client().set_tag(run_id, "posttrain.resumed_by", execution)
    registry.record_lineage(run_id, suite_digest)  # suite digest and git sha, for the registered versions' tags
    tracking.log_suite_input(run_id, cfg.suite, suite_digest, context="training")
    # the admission run of workflows/admit.py whose (cached) result this run trained on, if one was logged
    tracking.link_admission(run_id, tracking.admission_key(suite_digest, asdict(cfg.admission), asdict(cfg.sandbox)))
    tracking.log_dict(run_id, asdict(cfg), "config.json")
    tracking.log_table(run_id, report, "admission_report", html=True)
    tracking.log_metrics(run_id, tracking.admission_counts(report), step=0, once=resumed)
    _print_where(run_id, cfg.experiment, resumed)
    return run_id


def _print_where(run_id: str, experiment: str, resumed: bool) -> None:
    """The line that says where to open the run in the MLflow UI."""
    experiment_id = tracking.client().get_run(run_id).info.experiment_id
    local_default = f"sqlite:///{Path.cwd() / 'mlflow.db'}"  # tracking_uri()'s default, which `make mlflow-ui` opens
    write_lines([mlflow_line(run_id, experiment_id, experiment, tracking.tracking_uri(), local_default, resumed)])


@task(**stage("track"))
def log_baseline(run_id: str, policy: PolicyDir, results: DataFrame[EvalResults], metrics: list[dict[str, float]],
                 steps: dict[str, DataFrame[Steps]], promotion: PromotionConfig = PromotionConfig(),
                 snapshots: Optional[dict[str, DataFrame[EpisodeSnapshots]]] = None) -> str:
    """Iteration 0: the starting policy's evaluation, so every curve starts at the baseline, with what its stages
    logged (``metrics``, ``steps``: with agent envs, its greedy episodes' ``agent_eval/*`` and ``agent_eval_steps``;
    ``snapshots``: its failed ones' ``agent_eval_snapshots``, with ``agent.snapshot_every``)."""
    tables = {tracking.EVAL_RESULTS: results, **steps, **(snapshots or {})}
    return _log_once(run_id, 0, baseline_metrics(metrics, results), tables, policy, results, promotion)


@task(**stage("track"))
def log_iteration(run_id: str, iteration: int, policy: PolicyDir, metrics: list[dict[str, float]],
                  scored: DataFrame[Scored], steps: dict[str, DataFrame[Steps]],
                  results: Optional[DataFrame[EvalResults]] = None, previous: Optional[DataFrame[EvalResults]] = None,
                  promotion: PromotionConfig = PromotionConfig(),
                  snapshots: Optional[dict[str, DataFrame[EpisodeSnapshots]]] = None) -> str:
    """Iteration k, which trained v_k: its stages' metrics (``metrics``, by MLflow name; merged by
    ``tracking.metrics.iteration_metrics`` with where the iteration's wall time went), the rows it trained on
    (``scored``), the agent tier's step tables by name (``steps``: ``agent_steps``, and ``agent_eval_steps`` when v_k
    was evaluated; ``snapshots``: ``agent_eval_snapshots``, its failed greedy episodes' workspaces), and the
    evaluation of v_k when it was evaluated (``eval.every``), with its per-env flips against the previously
    evaluated version (``previous``: ``eval/flips/<fixed|broken|...>`` and the ``eval_flips`` table)."""
    iteration_s = tracking.seconds_since_iteration_logged(run_id, iteration - 1)
    logged = iteration_metrics(metrics, results, iteration_s)
    tables = {"scored": scored} if results is None else {"scored": scored, tracking.EVAL_RESULTS: results}
    if results is not None and previous is not None:
        tables["eval_flips"] = flips(results, previous)
        logged.update(flip_metrics(tables["eval_flips"]))
    return _log_once(run_id, iteration, logged, {**tables, **steps, **(snapshots or {})}, policy, results, promotion)


def _log_once(run_id: str, iteration: int, metrics: dict[str, float], tables: dict, policy: PolicyDir,
              results: Optional[DataFrame[EvalResults]], promotion: PromotionConfig) -> str:
    """Log iteration ``iteration`` with policy v_k, then promote v_k, unless an earlier execution of this run did
    both (the iteration's nested run is finished only then); print v_k's lines (``run_lines``: from what the earlier
    execution logged, if it did); return the nested run's id."""
    done = tracking.finished_iteration(run_id, iteration)
    if done is not None:
        write_lines(version_lines(iteration, tracking.client().get_run(done).data.metrics, resumed=True))
        return done
    # the tag names where v_k lives (on a cluster the blob store's URI, not this pod's copy)
    child = tracking.log_iteration(run_id, iteration, metrics, tables=tables, policy_dir=policy.download(),
                                   policy_version=iteration, finish=False,
                                   policy_uri=policy.remote_source or policy.path)
    # lineage tags, alias candidate; champion if it passes the regression gate
    registry.promote(child, results, promotion.regression_envs, promotion.max_regressions)
    tracking.finish_run(child)
    write_lines(version_lines(iteration, metrics))
    return child


@task(**stage("track"), enable_deck=True, deck_fields=())
def finish_tracking(run_id: str, final_policy: PolicyDir) -> str:
    """Close the parent run: the evaluation report (``reports/evaluation.html``, also this task's Deck), then a
    per-iteration summary table printed at the end of ``pyflyte run``."""
    tracking.client().set_tag(run_id, "posttrain.final_policy", final_policy.path)
    Deck("evaluation report", log_loop_report(run_id))
    tracking.finish_run(run_id)
    print_summary(run_id)
    return run_id

"""Log the evaluation report (``posttrain.evaluation.report``) on an MLflow run as ``reports/evaluation.html``.

``log_report`` renders given results (the evaluate workflow: the policy and its baseline); ``log_loop_report``
gathers an RL run's own: the ``tables/eval_results.parquet`` of its iteration runs (one column per evaluated policy
version), the parent's ``reward/mean`` curve, and the flips of the last evaluated version vs the one before.

Example (a store with an RL run's parent run ``parent_id``; the page lands on the parent, the fragment is returned
for a Flyte Deck):
    >>> body = log_loop_report(parent_id)                       # doctest: +SKIP
    >>> flytekit.Deck("evaluation report", body)                # doctest: +SKIP
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pandas as pd

from posttrain import tracking
from posttrain.evaluation.regression import flips as compute_flips
from posttrain.evaluation.report import as_page, assertions_by_policy, pass_at_1_by_policy, render_body

REPORT_PATH = "reports/evaluation.html"


def log_report(run_id: str, evaluations: dict[str, pd.DataFrame], rewards: pd.Series | None = None,
               flips: pd.DataFrame | None = None, title: str = "Evaluation", flips_title: str = "flips") -> str:
    """Render the report of ``evaluations`` (label -> EvalResults) and log it on ``run_id`` as a page; returns the
    rendered fragment (``report.render_body``: what a Flyte Deck shows)."""
    body = render_body(pass_at_1_by_policy(evaluations), rewards, flips, title, flips_title,
                       assertions_by_policy(evaluations))
    tracking.client().log_text(run_id, as_page(body, title), REPORT_PATH)
    return body


def loop_evaluations(parent_run_id: str) -> dict[str, pd.DataFrame]:
    """``v<k>`` -> EvalResults of every evaluated iteration of an RL run, in version order."""
    client = tracking.client()
    found = {}
    for run in client.search_runs([client.get_run(parent_run_id).info.experiment_id],
                                  filter_string=f"tags.mlflow.parentRunId = '{parent_run_id}'"):
        iteration = run.data.tags.get("posttrain.iteration")
        names = {item.path for item in client.list_artifacts(run.info.run_id, "tables")}
        if iteration is not None and "tables/eval_results.parquet" in names:
            with tempfile.TemporaryDirectory() as tmp:
                path = client.download_artifacts(run.info.run_id, "tables/eval_results.parquet", tmp)
                found[int(iteration)] = pd.read_parquet(Path(path))
    return {f"v{version}": found[version] for version in sorted(found)}


def metric_curve(run_id: str, key: str) -> pd.Series:
    """A metric's history on a run as a series indexed by step (the latest value of a step wins)."""
    history = sorted(tracking.client().get_metric_history(run_id, key), key=lambda m: (m.step, m.timestamp))
    return pd.Series({m.step: m.value for m in history}, dtype=float)


def log_loop_report(parent_run_id: str) -> str:
    """Render an RL run's report from what its runs logged and log it on the parent run (again: the page is replaced,
    as when a resumed run finishes); returns the rendered fragment, as ``log_report``."""
    evaluations = loop_evaluations(parent_run_id)
    labels = list(evaluations)
    changes = compute_flips(evaluations[labels[-1]], evaluations[labels[-2]]) if len(labels) >= 2 else None
    name = tracking.client().get_run(parent_run_id).info.run_name
    return log_report(parent_run_id, evaluations, metric_curve(parent_run_id, "reward/mean"), changes,
                      title=f"Evaluation of {name}", flips_title=f"flips {' → '.join(labels[-2:])}")

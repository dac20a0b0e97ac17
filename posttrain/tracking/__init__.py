"""MLflow lineage: one parent run per RL run, one nested run per RL iteration, policy versions registered.

The tracking URI comes from ``MLFLOW_TRACKING_URI`` (default ``sqlite:///<cwd>/mlflow.db``); artifacts of experiments
created here go to ``<cwd>/mlartifacts`` so ``make mlflow-ui`` over the same store shows them. Run ids are passed
explicitly between Flyte tasks (no global "active run"), so the same code works when tasks run in different pods.
The metric dicts the Flyte tasks log are shaped by pure functions, here for admission (``admission_counts``,
``admission_metrics``) and in ``metrics`` for an RL iteration's stages: names are ``<stage>/<field>``, e.g.
``rollout/tokens_per_s``, ``reward/mean``, ``sandbox/p50_ms``, ``train/loss``, ``admission/coverage/pass_rate``.

The package is the MLflow side of posttrain, above every stage it records: this module (runs, metrics, tables,
registered versions), ``metrics`` (an RL iteration's metrics from its stages'), ``registry`` (aliases and the
regression gate's promotion), ``run_report`` (the evaluation page logged on a run), ``run_lines`` and ``run_summary``
(what an RL run prints while it runs and when it ends).

What is kept where: each policy version's directory stays where the update wrote it (the Flyte output; with the
newest training states, ``training.checkpoints``); MLflow gets, per iteration, a reference to it (tags
``posttrain.policy_uri`` and ``posttrain.policy_weights_sha256``; for a LoRA version also its base's,
``posttrain.lora_base`` and ``posttrain.lora_base_sha256``) and, for the versions the iteration evaluated
(an ``eval_results`` table), their weights without the training state, registered as versions of
``posttrain-policy`` (``register_policy``): the lineage and the weights that were measured, not every iteration's
folder.

Writing is idempotent, so a rerun of an interrupted execution leaves no duplicates: the parent run is found by its
run identity (``run_key``: config, suite digest, starting policy digest) and resumed (``start_or_resume_run``); an
iteration whose nested run finished is not logged again (``finished_iteration``), one left unfinished is completed
(metrics already at its step are not logged twice) and a run's policy is registered once (``register_policy``).

Example:
    >>> import pandas as pd
    >>> report = pd.DataFrame({"env_id": ["a", "a", "b"], "check": ["solvability", "coverage", "solvability"],
    ...                        "passed": [True, False, True], "detail": ["solvability.ok", "coverage.x", "-"]})
    >>> admission_counts(report)
    {'admission/envs': 2, 'admission/admitted': 1, 'admission/rejected': 1}
    >>> run_key({"iterations": 2}, "suite-sha", "policy-sha") == run_key({"iterations": 2}, "suite-sha", "policy-sha")
    True
    >>> run_key({"iterations": 2}, "suite-sha", "policy-sha") == run_key({"iterations": 3}, "suite-sha", "policy-sha")
    False
    >>> import os, tempfile
    >>> d = tempfile.mkdtemp(); os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{d}/m.db"   # doctest: +SKIP
    >>> parent = start_run("posttrain-doc", run_name="demo", params={"iterations": 1})           # doctest: +SKIP
    >>> child = log_iteration(parent, 1, {"reward/mean": 0.5})                                    # doctest: +SKIP
    >>> finish_run(parent)                                                                        # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from pathlib import Path, PurePosixPath

import pandas as pd

from posttrain.admission.render import stats_json
from posttrain.admission.report import admitted_ids
from posttrain.training.checkpoints import read_lora_meta, weight_files, weights_digest

POLICY_MODEL_NAME = "posttrain-policy"
EVAL_RESULTS = "eval_results"  # the table an iteration that evaluated its version logs (``log_table``)
POLICY_URI_TAG = "posttrain.policy_uri"  # where an iteration's policy directory lives (a path or URI)
POLICY_DIGEST_TAG = "posttrain.policy_weights_sha256"  # the digest of its weights (``checkpoints.weights_digest``)
LORA_BASE_TAG = "posttrain.lora_base"  # a LoRA version's base: where it was (its digest in LORA_BASE_DIGEST_TAG)
LORA_BASE_DIGEST_TAG = "posttrain.lora_base_sha256"
RUN_KEY_TAG = "posttrain.run_key"  # the run identity a rerun finds its parent run by
ADMISSION_KEY_TAG = "posttrain.admission_key"  # which admission result a run made or used (``admission_key``)
RESUMED_AT_TAG = "posttrain.resumed_at"  # epoch seconds of the latest resume: iteration times count from there
# Per-check columns of the admission statistics logged as ``admission/<check>/<column>``.
ADMISSION_STAT_METRICS = ("pass", "fail", "infra", "skipped", "pass_rate", "value_mean", "seconds")


def tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path.cwd() / 'mlflow.db'}"


def client():
    import mlflow
    from mlflow.tracking import MlflowClient

    uri = tracking_uri()
    mlflow.set_tracking_uri(uri)
    return MlflowClient(tracking_uri=uri)


# MLflow 3's UI opens an experiment by its kind tag; without one it may infer the GenAI view (traces panels).
EXPERIMENT_KIND_TAG, MODEL_TRAINING_KIND = "mlflow.experimentKind", "custom_model_development"


def experiment_id(name: str) -> str:
    """The id of experiment ``name``, created if new as a model-training experiment (the UI opens it on runs and
    metric charts); one created by someone else keeps its own kind."""
    c = client()
    existing = c.get_experiment_by_name(name)
    if existing is not None:
        return existing.experiment_id
    artifacts = os.environ.get("POSTTRAIN_ARTIFACT_ROOT") or (Path.cwd() / "mlartifacts").as_uri()
    return c.create_experiment(name, artifact_location=artifacts, tags={EXPERIMENT_KIND_TAG: MODEL_TRAINING_KIND})


def start_run(experiment: str, run_name: str, params: dict | None = None, tags: dict | None = None,
              parent_run_id: str = "") -> str:
    """Create a run and return its id; with ``parent_run_id`` it is nested in the parent's experiment."""
    c = client()
    all_tags = dict(tags or {})
    if parent_run_id:
        all_tags["mlflow.parentRunId"] = parent_run_id
        exp_id = c.get_run(parent_run_id).info.experiment_id
    else:
        exp_id = experiment_id(experiment)
    run = c.create_run(exp_id, run_name=run_name, tags=all_tags)
    for key, value in _flatten(params or {}).items():
        c.log_param(run.info.run_id, key, str(value)[:6000])
    return run.info.run_id


def run_key(config: dict, suite_digest: str, policy_digest: str, cache_version: str = "") -> str:
    """The identity of an RL run: equal for the same config, suite contents, starting policy weights and cache
    version (the version of the cached stages' code: results computed under another are other results)."""
    identity = json.dumps({"config": config, "suite": suite_digest, "policy": policy_digest,
                           "cache_version": cache_version}, sort_keys=True, default=str)
    return hashlib.sha256(identity.encode()).hexdigest()[:32]


def start_or_resume_run(experiment: str, key: str, run_name: str, params: dict | None = None,
                        tags: dict | None = None, resume: bool = True) -> tuple[str, bool]:
    """The parent run of run identity ``key`` and whether it was resumed: with ``resume``, the latest run tagged with
    ``key`` is set ``RUNNING`` again (a killed execution left it so, or it had finished) and tagged with the resume's
    time; without one, or without ``resume`` (the stages are recomputed), a new run is started."""
    c = client()
    found = c.search_runs([experiment_id(experiment)], filter_string=f"tags.`{RUN_KEY_TAG}` = '{key}'",
                          order_by=["attributes.start_time DESC"], max_results=1) if resume else []
    if not found:
        return start_run(experiment, run_name, params, {**(tags or {}), RUN_KEY_TAG: key}), False
    run_id = found[0].info.run_id
    c.update_run(run_id, status="RUNNING")
    c.set_tag(run_id, RESUMED_AT_TAG, f"{time.time():.3f}")
    return run_id, True


def log_metrics(run_id: str, metrics: dict[str, float], step: int, once: bool = False) -> None:
    """Log ``metrics`` at ``step``; with ``once``, skip those that already have a value at ``step`` (a resumed run)."""
    from mlflow.entities import Metric

    c = client()
    keys = [key for key in metrics
            if not (once and any(point.step == step for point in c.get_metric_history(run_id, key)))]
    now = int(time.time() * 1000)
    batch = [Metric(key, float(metrics[key]), now, step) for key in keys]
    for lo in range(0, len(batch), 1000):  # one write per 1000 metrics (MLflow's limit), not one per metric
        c.log_batch(run_id, metrics=batch[lo : lo + 1000])


def log_table(run_id: str, table: pd.DataFrame, name: str, html: bool = False) -> None:
    """Log a table as ``tables/<name>.parquet`` (and ``.html`` for people) on the run."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{name}.parquet"
        table.to_parquet(path, index=False)
        if html:
            (Path(tmp) / f"{name}.html").write_text(table.to_html(index=False))
        client().log_artifacts(run_id, tmp, artifact_path="tables")


def log_dict(run_id: str, data: dict, name: str) -> None:
    client().log_text(run_id, json.dumps(data, indent=2, sort_keys=True, default=str), name)


def register_policy(run_id: str, policy_dir: str, version: int) -> str:
    """Log the policy's weights (every file of its directory but the training state, ``checkpoints.weight_files``)
    as the run's ``policy`` artifact and register them as a version of ``posttrain-policy``, once per run: the
    version a run already registered is returned as it is."""
    c = client()
    existing = c.search_model_versions(f"name='{POLICY_MODEL_NAME}' and run_id='{run_id}'")
    if existing:
        return str(existing[0].version)
    for path in weight_files(policy_dir):
        folder = PurePosixPath("policy", *path.relative_to(policy_dir).parts[:-1])
        c.log_artifact(run_id, str(path), artifact_path=folder.as_posix())
    try:
        c.get_registered_model(POLICY_MODEL_NAME)
    except Exception:  # MlflowException RESOURCE_DOES_NOT_EXIST: first version ever
        c.create_registered_model(POLICY_MODEL_NAME, description="Policies produced by posttrain RL iterations")
    source = f"{c.get_run(run_id).info.artifact_uri}/policy"
    model_version = c.create_model_version(POLICY_MODEL_NAME, source=source, run_id=run_id,
                                           tags={"policy_version": str(version)})
    return str(model_version.version)


def log_suite_input(run_id: str, suite: str, digest: str, context: str) -> None:
    """Record the env suite a run used as its MLflow dataset input (name: the suite folder; digest: the first 32
    hex digits of its content digest, ``envs.suite.suite_digest``; source: where it lives; ``context``: training,
    admission or evaluation). The UI lists it under the run's Datasets; every run on the same suite contents carries
    the same digest."""
    from mlflow.data.dataset_source_registry import resolve_dataset_source
    from mlflow.data.meta_dataset import MetaDataset
    from mlflow.entities import DatasetInput, InputTag

    from posttrain.locations import display_name, is_remote, local_copy

    source = suite if is_remote(suite) else Path(local_copy(suite)).resolve().as_uri()
    dataset = MetaDataset(resolve_dataset_source(source), name=display_name(suite),
                          digest=digest[:32])  # MLflow keeps at most 36 characters of a digest
    client().log_inputs(run_id, [DatasetInput(dataset._to_mlflow_entity(),
                                              tags=[InputTag("mlflow.data.context", context)])])


def iteration_runs(parent_run_id: str, iteration: int) -> list:
    """The nested runs of iteration ``iteration`` under a parent run (at most one unless written by hand)."""
    c = client()
    return c.search_runs(
        [c.get_run(parent_run_id).info.experiment_id],
        filter_string=f"tags.mlflow.parentRunId = '{parent_run_id}' and tags.`posttrain.iteration` = '{iteration}'")


def finished_iteration(parent_run_id: str, iteration: int) -> str | None:
    """The id of iteration ``iteration``'s nested run if it finished (an earlier execution logged it all), else None."""
    return next((run.info.run_id for run in iteration_runs(parent_run_id, iteration)
                 if run.info.status == "FINISHED"), None)


def log_iteration(parent_run_id: str, iteration: int, metrics: dict[str, float],
                  tables: dict[str, pd.DataFrame] | None = None, policy_dir: str = "", policy_version: int = -1,
                  finish: bool = True, policy_uri: str = "") -> str:
    """One nested run per RL iteration; metrics go to it and to the parent (``step=iteration``). The iteration's
    nested run that already exists (an interrupted execution left it unfinished) is completed, not duplicated.
    With ``policy_dir`` (a local copy), the version is referenced (``POLICY_URI_TAG``: ``policy_uri``, where the
    version lives, e.g. the blob store's URI on a cluster, else ``policy_dir``; ``POLICY_DIGEST_TAG``) and, when
    ``tables`` hold its evaluation (``EVAL_RESULTS``), its weights are logged and registered (``register_policy``).
    ``finish=False`` leaves the run open for the caller to add to and finish (``finish_run``)."""
    existing = [run.info.run_id for run in iteration_runs(parent_run_id, iteration)]
    child = existing[0] if existing else start_run("", run_name=f"iteration-{iteration}", parent_run_id=parent_run_id,
                                                   tags={"posttrain.iteration": str(iteration)})
    log_metrics(child, metrics, step=iteration, once=bool(existing))
    log_metrics(parent_run_id, metrics, step=iteration, once=bool(existing))
    for name, table in (tables or {}).items():
        log_table(child, table, name)
    if policy_dir:
        client().set_tag(child, POLICY_URI_TAG, policy_uri or policy_dir)
        client().set_tag(child, POLICY_DIGEST_TAG, weights_digest(policy_dir))
        lora = read_lora_meta(policy_dir)
        if lora is not None:  # its adapter goes with the weights (register_policy); the base is named
            client().set_tag(child, LORA_BASE_TAG, lora["base"])
            client().set_tag(child, LORA_BASE_DIGEST_TAG, lora["base_sha256"])
    if policy_dir and EVAL_RESULTS in (tables or {}):
        registered = register_policy(child, policy_dir, policy_version)
        client().set_tag(child, "posttrain.registered_version", registered)
    if finish:
        finish_run(child)
    return child


def finish_run(run_id: str, status: str = "FINISHED") -> None:
    client().set_terminated(run_id, status=status)


def admission_counts(report: pd.DataFrame) -> dict[str, int]:
    """Envs in an admission report (or its details table), admitted (all rows passed) and rejected."""
    envs = int(report["env_id"].nunique())
    admitted = len(admitted_ids(report))
    return {"admission/envs": envs, "admission/admitted": admitted, "admission/rejected": envs - admitted}


def admission_metrics(details: pd.DataFrame, stats: pd.DataFrame, wall_s: float) -> dict[str, float]:
    """Metrics of one admission: env counts, wall time, and per check its row counts, rates and seconds."""
    metrics = {**admission_counts(details), "admission/wall_s": wall_s}
    for check, values in stats_json(stats).items():
        for key in ADMISSION_STAT_METRICS:
            if values.get(key) is not None:
                metrics[f"admission/{check}/{key}"] = float(values[key])
    return metrics


def seconds_since_iteration_logged(parent_run_id: str, iteration: int) -> float | None:
    """Wall seconds since iteration ``iteration``'s nested run ended, or since the parent run was resumed if that
    came later (None when there is no such run)."""
    ended = [run.info.end_time / 1000 for run in iteration_runs(parent_run_id, iteration) if run.info.end_time]
    if not ended:
        return None
    resumed = float(client().get_run(parent_run_id).data.tags.get(RESUMED_AT_TAG, 0.0))
    return time.time() - max(*ended, resumed)


def _flatten(data: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def admission_key(suite_digest: str, admission: dict, sandbox: dict) -> str:
    """The identity of one admission result: suite contents, admission config and sandbox config (what the cached
    admission task is keyed on besides the suite's name)."""
    identity = json.dumps({"suite": suite_digest, "admission": admission, "sandbox": sandbox}, sort_keys=True,
                          default=str)
    return hashlib.sha256(identity.encode()).hexdigest()[:32]


def link_admission(run_id: str, key: str) -> list[str]:
    """Link ``run_id`` to the runs that share its admission result ``key``, whichever was logged first: an admission
    run (``workflows/admit.py``) gets ``posttrain.used_by.<training run id>`` tags, a training or evaluation run the
    ``posttrain.admission_run_id`` of the latest admission run. Returns the ids of the runs linked."""
    c = client()
    c.set_tag(run_id, ADMISSION_KEY_TAG, key)
    is_admission = c.get_run(run_id).data.tags.get("posttrain.workflow") == "admit"
    experiments = [e.experiment_id for e in c.search_experiments()]
    others = [r for r in c.search_runs(experiments, filter_string=f"tags.`{ADMISSION_KEY_TAG}` = '{key}'",
                                       order_by=["attributes.start_time DESC"])
              if r.info.run_id != run_id and (r.data.tags.get("posttrain.workflow") == "admit") != is_admission]
    if is_admission:
        for user in others:
            c.set_tag(run_id, f"posttrain.used_by.{user.info.run_id}", user.data.tags.get("posttrain.workflow", ""))
            c.set_tag(user.info.run_id, "posttrain.admission_run_id", run_id)
        return [r.info.run_id for r in others]
    if not others:
        return []
    admission_run = others[0].info.run_id
    c.set_tag(run_id, "posttrain.admission_run_id", admission_run)
    c.set_tag(admission_run, f"posttrain.used_by.{run_id}", c.get_run(run_id).data.tags.get("posttrain.workflow", ""))
    return [admission_run]

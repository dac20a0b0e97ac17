"""Evaluate any policy on any suite, outside the RL loop, and log the report to MLflow.

    pyflyte run workflows/evaluate.py evaluate                                  # champion on the demo suite
    pyflyte run workflows/evaluate.py evaluate --cfg '{"policy": "models:/posttrain-policy/3"}'
    pyflyte run workflows/evaluate.py evaluate --cfg '{"policy": ".posttrain/demo-policy", "suite": "my_suite/",
                                                       "eval": {"split": "train", "samples": 8, "pass_k": [1, 4, 8]}}'

``cfg`` is an ``EvaluateConfig``: the policy (checkpoint dir, URI, or ``models:/posttrain-policy@<alias>`` /
``models:/posttrain-policy/<N>``), the suite, the eval settings (split, greedy + ``samples`` sampled completions, the
``pass_k`` to report), the agent tier's (a suite's agent envs of the eval split run as episodes, as in the loop's
evaluation: ``agent.eval_samples``, ``agent.eval_limit``, tools and budgets), the baseline alias for flips
(``champion``) and the MLflow experiment (``posttrain-eval``). The MLflow run holds ``tables/eval_results.parquet``,
``tables/eval_strata.parquet`` (+ .html: greedy pass@1, unbiased sampled pass@k and assertion pass rates per domain,
difficulty and step bucket), ``tables/eval_flips.parquet`` (+ .html: per env vs the baseline's latest results on the
same suite), the same numbers as metrics, and ``reports/evaluation.html``: one self-contained page with greedy and
sampled pass@1 per domain and difficulty of the baseline and this policy (tables and plots) and the flips, also the
Flyte Deck of ``report_evaluation``. A registered policy's run is tagged with its version and the suite digest, so
the regression gate (``posttrain.tracking.registry.promote``) compares later candidates against these results.
"""

from __future__ import annotations

from typing import NamedTuple

from flytekit import workflow
from pandera.typing import DataFrame

from posttrain.config import EvaluateConfig
from posttrain.evaluation.regression import Flips
from posttrain.evaluation.strata import EvalStrata
from posttrain.schemas import EvalResults
from tasks.agent import agent_sample, join_results
from tasks.evaluate import evaluate as evaluate_task
from tasks.standalone_eval import load_suite_envs, release_eval_engine, report_evaluation, resolve_policy

Evaluation = NamedTuple("Evaluation", [("results", DataFrame[EvalResults]), ("strata", DataFrame[EvalStrata]),
                                       ("flips", DataFrame[Flips]), ("run_id", str)])


@workflow(on_failure=release_eval_engine)
def evaluate(cfg: EvaluateConfig = EvaluateConfig()) -> Evaluation:
    """Resolve the policy, load the suite, decode + verify (greedy and sampled) its single-turn envs and run its
    agent envs' episodes (``cfg.agent``: one greedy and ``eval_samples`` sampled each, eval split), report; returns
    the tables."""
    policy = resolve_policy(policy=cfg.policy)
    suite = load_suite_envs(suite=cfg.suite)
    # cfg["eval"], not cfg.eval: a workflow input is a Promise, whose own eval() method shadows the attribute
    single_turn = evaluate_task(policy=policy.policy, envs=suite.envs, cfg=cfg["eval"], rollout=cfg.rollout,
                                sandbox=cfg.sandbox, policy_version=policy.version)
    episodes = agent_sample(policy=policy.policy, envs=suite.envs, cfg=cfg.agent, sandbox=cfg.sandbox,
                            rollout_cfg=cfg.rollout, policy_version=policy.version, rollout=False, evaluate=True)
    results = join_results(agent=episodes.eval_results, single_turn=single_turn)
    report = report_evaluation(cfg=cfg, results=results, registered=policy.registered, digest=suite.digest)
    report >> release_eval_engine(cfg=cfg)  # the live vLLM engine would keep `pyflyte run` from exiting
    return Evaluation(results=results, strata=report.strata, flips=report.flips, run_id=report.run_id)

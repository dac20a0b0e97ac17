"""Turn a scored eval decode into the EvalResults table and its headline numbers: greedy and sampled pass@1.

Example (hand-computed: greedy passes env e; of its 4 samples 1 passes, of f's 2 samples 2 pass):
    >>> import pandas as pd
    >>> from posttrain.envs.spec import EnvSpec
    >>> envs = {i: EnvSpec(id=i, prompt="p", verifier={"kind": "python_tests"}, reference="", difficulty=d)
    ...         for i, d in (("e", 1), ("f", 2))}
    >>> scored = pd.DataFrame({"env_id": ["e"] * 5 + ["f"] * 2, "decoding": ["greedy"] + ["sampled"] * 6,
    ...                        "sample_idx": [0, 0, 1, 2, 3, 0, 1], "policy_version": 3, "steps": 1,
    ...                        "reward": [1.0, 1.0, 0.0, 0.5, 0.0, 1.0, 1.0], "infra_error": ""})
    >>> summary = summarize(eval_results(scored, envs))
    >>> summary["eval/pass_at_1"], summary["eval/pass_at_1_sampled"], summary["eval/pass_at_1_sampled/difficulty_1"]
    (1.0, 0.625, 0.25)
"""

from __future__ import annotations

import json

import pandas as pd

from posttrain.envs.spec import EnvSpec
from posttrain.evaluation.metrics import pass_at_k
from posttrain.schemas import EvalResults


def eval_results(scored: pd.DataFrame, envs: dict[str, EnvSpec]) -> pd.DataFrame:
    """One EvalResults row per scored eval completion (greedy or sampled); passed means every test passed."""
    rows = []
    for row in scored.itertuples():
        env = envs[row.env_id]
        passed = bool(row.reward >= 1.0) and not row.infra_error
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
            "assertions": json.dumps({"result/tests_pass": passed}),
        })
    return EvalResults.validate(pd.DataFrame(rows, columns=list(EvalResults.to_schema().columns)))


def summarize(results: pd.DataFrame) -> dict[str, float]:
    """Headline metrics over completions without infra errors: greedy pass@1 overall and per difficulty, and, when
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
    for difficulty, part in usable.groupby("difficulty"):
        summary[f"eval/pass_at_1/difficulty_{difficulty}"] = float(part["passed"].mean())
    sampled = results[results["decoding"] == "sampled"]
    return {**summary, **sampled_pass_at_1(sampled)} if len(sampled) else summary


def sampled_pass_at_1(sampled: pd.DataFrame) -> dict[str, float]:
    """Sampled pass@1: per env the unbiased pass@1 of its usable samples (c of n passed: c / n), averaged over the
    envs, overall and per difficulty. An env whose every sample hit an infra error has no estimate.

    >>> sampled = pd.DataFrame({"env_id": ["a", "a", "b", "b", "b"], "difficulty": [1, 1, 2, 2, 2],
    ...                         "passed": [True, False, True, True, False],
    ...                         "infra_error": ["", "", "", "", "sandbox did not start"]})
    >>> sampled_pass_at_1(sampled)   # a: 1 of 2, b: 2 of its 2 usable samples
    {'eval/pass_at_1_sampled': 0.75, 'eval/pass_at_1_sampled/difficulty_1': 0.5, \
'eval/pass_at_1_sampled/difficulty_2': 1.0}
    """
    usable = sampled[sampled["infra_error"] == ""]
    per_env = usable.groupby("env_id").agg(n=("passed", "size"), c=("passed", "sum"),
                                           difficulty=("difficulty", "first"))
    per_env["pass_at_1"] = [pass_at_k(int(n), int(c), 1) for n, c in zip(per_env["n"], per_env["c"])]
    summary = {"eval/pass_at_1_sampled": float(per_env["pass_at_1"].mean()) if len(per_env) else 0.0}
    for difficulty, part in per_env.groupby("difficulty"):
        summary[f"eval/pass_at_1_sampled/difficulty_{difficulty}"] = float(part["pass_at_1"].mean())
    return summary

"""Turn a greedy-decoded, scored eval rollout into the EvalResults table and its headline numbers.

Example:
    >>> import pandas as pd
    >>> from posttrain.envs.spec import EnvSpec
    >>> env = EnvSpec(id="e", prompt="p", verifier={"kind": "python_tests"}, reference="", difficulty=2)
    >>> scored = pd.DataFrame({"env_id": ["e"], "policy_version": [3], "steps": [1], "reward": [1.0],
    ...                        "infra_error": [""]})
    >>> table = eval_results(scored, {"e": env})
    >>> summarize(table)["eval/pass_at_1"]
    1.0
"""

from __future__ import annotations

import json

import pandas as pd

from posttrain.envs.spec import EnvSpec
from posttrain.schemas import EvalResults


def eval_results(scored: pd.DataFrame, envs: dict[str, EnvSpec]) -> pd.DataFrame:
    """One EvalResults row per scored greedy sample; passed means every test passed."""
    rows = []
    for row in scored.itertuples():
        env = envs[row.env_id]
        passed = bool(row.reward >= 1.0) and not row.infra_error
        rows.append({
            "env_id": row.env_id,
            "domain": env.domain,
            "difficulty": int(env.difficulty),
            "policy_version": int(row.policy_version),
            "steps": int(row.steps),
            "passed": passed,
            "reward": float(row.reward),
            "infra_error": row.infra_error,
            "assertions": json.dumps({"result/tests_pass": passed}),
        })
    return EvalResults.validate(pd.DataFrame(rows, columns=list(EvalResults.to_schema().columns)))


def summarize(results: pd.DataFrame) -> dict[str, float]:
    """Headline metrics: pass@1 over envs without infra errors, overall and per difficulty."""
    usable = results[results["infra_error"] == ""]
    summary = {
        "eval/pass_at_1": float(usable["passed"].mean()) if len(usable) else 0.0,
        "eval/reward_mean": float(usable["reward"].mean()) if len(usable) else 0.0,
        "eval/envs": float(len(results)),
        "eval/infra_errors": float(len(results) - len(usable)),
    }
    for difficulty, part in usable.groupby("difficulty"):
        summary[f"eval/pass_at_1/difficulty_{difficulty}"] = float(part["passed"].mean())
    return summary

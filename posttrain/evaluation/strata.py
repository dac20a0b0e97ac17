"""Stratified evaluation metrics of one EvalResults table: greedy pass@1, unbiased sampled pass@k and assertion pass
rates, overall and per domain, difficulty and step-count bucket (model turns of the greedy episode: 1, 2-3, 4-7,
8-15, 16+).

Infra errors are excluded everywhere (never a failure). Sampled pass@k of an env is ``pass_at_k(n, c, k)`` over its
n usable samples (c passed), averaged over the envs with n >= k; an env with fewer samples has no estimate for that
k. The long table (``stratum, group, metric, envs, value``) is what is logged as parquet; ``strata_metrics`` names
its rows for MLflow (``eval/pass_at_1/domain_python``, ``eval/pass_at_4_sampled/difficulty_2``).

An assertion's pass rate (``assertion/<name>``, from the greedy rows) counts only the envs where it applied (verdict
true or false); ``not_applicable`` says how many envs declared it but got null (e.g. a behavior assertion of an env
without agent episodes). An assertion no env could judge still has its row: ``envs`` 0, ``value`` NaN (not logged
to MLflow); ``eval/not_applicable/assertion/<name>`` logs the overall n/a counts.

Example (hand-computed: env a passes greedy, 2 of its 4 samples; b fails greedy, 0 of 4):
    >>> import pandas as pd
    >>> rows = [("a", "greedy", True)] + [("a", "sampled", p) for p in (True, True, False, False)] \\
    ...        + [("b", "greedy", False)] + [("b", "sampled", False)] * 4
    >>> results = pd.DataFrame([{"env_id": e, "domain": "python", "difficulty": 1 if e == "a" else 2,
    ...                          "decoding": d, "steps": 1, "passed": p, "infra_error": "",
    ...                          "assertions": '{"result/tests_pass": %s}' % str(p).lower()} for e, d, p in rows])
    >>> m = strata_metrics(strata(results, ks=[1, 2, 8]))
    >>> m["eval/pass_at_1"], m["eval/pass_at_1_sampled"], m["eval/pass_at_2_sampled"]   # a: 1 - C(2,2)/C(4,2) = 5/6
    (0.5, 0.25, 0.4166666666666667)
    >>> m["eval/pass_at_2_sampled/difficulty_1"], "eval/pass_at_8_sampled" in m          # k > n: no estimate
    (0.8333333333333334, False)
    >>> m["eval/assertion/result/tests_pass/steps_1"]
    0.5
    >>> results["assertions"] = results["assertions"].str.replace("}", ', "behavior/max_steps": null}')
    >>> row = strata(results, ks=[1]).query("stratum == 'all' and metric == 'assertion/behavior/max_steps'")
    >>> row[["envs", "not_applicable"]].values.tolist(), "eval/assertion/behavior/max_steps" in strata_metrics(row)
    ([[0, 2]], False)
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

from posttrain.evaluation.metrics import pass_at_k

STRATA = ("domain", "difficulty", "steps")  # besides "all"
STEP_BUCKETS = ((1, 1), (2, 3), (4, 7), (8, 15), (16, None))  # inclusive bounds; None: no upper bound


class EvalStrata(pa.DataFrameModel):
    """One row per (stratum, group, metric): e.g. ``difficulty, 2, pass_at_4_sampled``; ``envs`` measured it,
    ``not_applicable`` envs declared it but could not be judged (assertions; 0 for the other metrics). ``value`` is
    NaN exactly when no env measured it (an assertion that applied nowhere)."""

    stratum: Series[str] = pa.Field(isin=["all", *STRATA])
    group: Series[str]
    metric: Series[str]
    envs: Series[int] = pa.Field(ge=0)
    not_applicable: Series[int] = pa.Field(ge=0)
    value: Series[float] = pa.Field(ge=0.0, le=1.0, nullable=True)

    @pa.dataframe_check
    def value_exactly_where_measured(cls, df):
        return df["value"].isna() == (df["envs"] == 0)

    class Config:
        coerce = True


COLUMNS = list(EvalStrata.to_schema().columns)


def steps_bucket(steps: int) -> str:
    """The step-count bucket of an episode (its model turns): ``"1"``, ``"2-3"``, ``"4-7"``, ``"8-15"``, ``"16+"``.

    >>> [steps_bucket(s) for s in (1, 3, 4, 8, 16, 40)]
    ['1', '2-3', '4-7', '8-15', '16+', '16+']
    """
    for low, high in STEP_BUCKETS:
        if steps >= low and (high is None or steps <= high):
            return str(low) if high == low else f"{low}+" if high is None else f"{low}-{high}"
    raise ValueError(f"steps={steps}: must be >= 1")


def per_env(results: pd.DataFrame) -> pd.DataFrame:
    """One row per env: its strata (domain, difficulty, steps bucket of the greedy episode), the greedy verdict
    (NA: infra error) and assertion verdicts, and n usable samples of which c passed."""
    greedy = results[results["decoding"] == "greedy"].drop_duplicates("env_id").set_index("env_id")
    usable = results[(results["decoding"] == "sampled") & (results["infra_error"] == "")]
    counts = usable.groupby("env_id")["passed"].agg(n="size", c="sum")
    envs = results.drop_duplicates("env_id").set_index("env_id")[["domain", "difficulty"]]
    table = envs.join(counts).fillna({"n": 0, "c": 0}).astype({"n": int, "c": int})
    ok = greedy["infra_error"] == ""
    table["steps"] = greedy["steps"].map(steps_bucket).reindex(table.index).fillna("no_greedy")
    table["greedy_passed"] = greedy["passed"].astype("boolean").where(ok).reindex(table.index)
    table["assertions"] = greedy["assertions"].where(ok).reindex(table.index)
    return table.reset_index()


def strata(results: pd.DataFrame, ks: Sequence[int]) -> pd.DataFrame:
    """The long metrics table (``COLUMNS``) of one EvalResults table, overall (stratum ``all``) and per stratum."""
    envs = per_env(results)
    rows = []
    for stratum in ("all", *STRATA):
        groups = [("all", envs)] if stratum == "all" else list(envs.groupby(stratum, sort=True))
        if stratum == "steps":  # buckets in step order, "no_greedy" last
            groups.sort(key=lambda item: int(item[0].split("-")[0].rstrip("+")) if item[0][:1].isdigit() else math.inf)
        for group, part in groups:
            rows += [(stratum, str(group), *metric) for metric in _metrics(part, ks)]
    return EvalStrata.validate(pd.DataFrame(rows, columns=COLUMNS))


def _metrics(envs: pd.DataFrame, ks: Sequence[int]) -> list[tuple[str, int, int, float]]:
    """(metric, envs measured, envs not applicable, value) of a group of per-env rows; a metric no env can measure
    is left out, except a declared assertion (envs 0, value NaN)."""
    out = []
    verified = envs["greedy_passed"].dropna()
    if len(verified):
        out.append(("pass_at_1", len(verified), 0, float(verified.astype(float).mean())))
    for k in ks:
        enough = envs[envs["n"] >= k]
        if len(enough):
            values = [pass_at_k(int(n), int(c), k) for n, c in zip(enough["n"], enough["c"])]
            out.append((f"pass_at_{k}_sampled", len(enough), 0, sum(values) / len(values)))
    objects = [json.loads(text) for text in envs["assertions"].dropna()]
    for name in dict.fromkeys(name for verdicts in objects for name in verdicts):
        declared = [verdicts[name] for verdicts in objects if name in verdicts]  # absent: the env did not declare it
        applicable = [bool(v) for v in declared if v is not None]  # null: declared, not applicable
        value = sum(applicable) / len(applicable) if applicable else math.nan
        out.append((f"assertion/{name}", len(applicable), len(declared) - len(applicable), value))
    return out


def assertion_metrics(results: pd.DataFrame) -> dict[str, float]:
    """Every declared assertion's overall pass rate in one EvalResults table and its n/a count, by MLflow name
    (``eval/assertion/<name>``, ``eval/not_applicable/assertion/<name>``): what the RL loop logs per evaluated
    version (the standalone evaluation logs every stratum, ``strata_metrics``).

    >>> results = pd.DataFrame({"env_id": ["a", "b"], "domain": "x", "difficulty": 1, "decoding": "greedy",
    ...                         "steps": 3, "passed": [True, False], "infra_error": "", "assertions": [
    ...                             '{"result/tests_pass": true, "behavior/max_steps": true}',
    ...                             '{"result/tests_pass": false, "behavior/max_steps": null}']})
    >>> assertion_metrics(results)
    {'eval/assertion/result/tests_pass': 0.5, 'eval/assertion/behavior/max_steps': 1.0, \
'eval/not_applicable/assertion/result/tests_pass': 0.0, 'eval/not_applicable/assertion/behavior/max_steps': 1.0}
    """
    if not len(results):
        return {}
    overall = EvalStrata.validate(pd.DataFrame([("all", "all", *metric) for metric in _metrics(per_env(results), [])
                                                if metric[0].startswith("assertion/")], columns=COLUMNS))
    return strata_metrics(overall)


def strata_metrics(table: pd.DataFrame) -> dict[str, float]:
    """MLflow metric names of a ``strata`` table: ``eval/<metric>`` overall, ``eval/<metric>/<stratum>_<group>``
    (NaN values left out), and the overall n/a count of each assertion: ``eval/not_applicable/assertion/<name>``."""
    metrics = {f"eval/{row.metric}" + ("" if row.stratum == "all" else f"/{row.stratum}_{row.group}"): float(row.value)
               for row in table.itertuples() if not math.isnan(row.value)}
    overall = table[(table["stratum"] == "all") & table["metric"].str.startswith("assertion/")]
    counts = {f"eval/not_applicable/{row.metric}": float(row.not_applicable) for row in overall.itertuples()}
    return {**metrics, **counts}

"""Per-env flips between two policy versions and the regression gate that decides promotion to ``champion``.

Both read greedy EvalResults rows (one per env). A flip compares an env's verdicts: ``fixed`` (failed under the
baseline, passes now), ``broken`` (passed, fails now), ``still_passing``, ``still_failing``; an env one side did not
verify (infra error, or not evaluated) is ``unverified``. The gate: of the regression set's envs that the champion
passes, at most ``max_regressions`` (default 0) may fail (or go unverified) under the candidate, and the candidate's
greedy pass@1 over the envs both verified is not lower than the champion's. Without a champion the gate passes: the
first evaluated version becomes champion.

Example (hand-computed: a and b pass under the champion; the candidate fixes c but breaks b):
    >>> import pandas as pd
    >>> def table(passed):
    ...     return pd.DataFrame({"env_id": list(passed), "decoding": "greedy", "passed": list(passed.values()),
    ...                          "infra_error": ""})
    >>> champion = table({"a": True, "b": True, "c": False})
    >>> candidate = table({"a": True, "b": False, "c": True})
    >>> flips(candidate, champion)["flip"].tolist()
    ['still_passing', 'broken', 'fixed']
    >>> decision = regression_gate(candidate, champion)
    >>> decision.passed, decision.regressions, decision.reason
    (False, ['b'], 'regressed on 1 env(s) of the regression set the champion passes: b')
    >>> regression_gate(candidate, champion, regression_envs=["a", "c"]).passed   # b is not in the regression set
    True
    >>> print(regression_gate(candidate, champion, max_regressions=1).reason)   # one break tolerated
    greedy pass@1 0.6667 >= champion's 0.6667 (1 regression(s) tolerated: b)
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

FLIPS = ("fixed", "broken", "still_passing", "still_failing", "unverified")


class Flips(pa.DataFrameModel):
    """One row per env of either side; a verdict is NA where that side did not verify the env."""

    env_id: Series[str] = pa.Field(unique=True)
    baseline_passed: Series[pd.BooleanDtype] = pa.Field(nullable=True)
    candidate_passed: Series[pd.BooleanDtype] = pa.Field(nullable=True)
    flip: Series[str] = pa.Field(isin=list(FLIPS))

    class Config:
        coerce = True


def greedy_verdicts(results: pd.DataFrame) -> pd.Series:
    """env_id -> passed (bool) of the greedy rows; an env whose greedy row hit an infra error maps to NA."""
    greedy = results[results["decoding"] == "greedy"]
    verdicts = greedy["passed"].astype("boolean").where(greedy["infra_error"] == "")
    return pd.Series(verdicts.to_numpy(), index=greedy["env_id"].to_numpy(), dtype="boolean")


def flips(candidate: pd.DataFrame, baseline: pd.DataFrame) -> pd.DataFrame:
    """One row per env of either table: ``env_id, baseline_passed, candidate_passed, flip`` (one of ``FLIPS``)."""
    new, old = greedy_verdicts(candidate), greedy_verdicts(baseline)
    env_ids = list(dict.fromkeys([*old.index, *new.index]))
    table = pd.DataFrame({"env_id": env_ids, "baseline_passed": old.reindex(env_ids).to_numpy(),
                          "candidate_passed": new.reindex(env_ids).to_numpy()})
    table["flip"] = [_flip(before, after) for before, after in
                     zip(table["baseline_passed"], table["candidate_passed"])]
    return Flips.validate(table)


def flip_metrics(table: pd.DataFrame, prefix: str = "eval/flips") -> dict[str, float]:
    """How many envs of a ``Flips`` table flipped each way, as metrics.

    >>> flip_metrics(pd.DataFrame({"flip": ["fixed", "broken", "fixed", "still_failing"]}))["eval/flips/fixed"]
    2.0
    """
    counts = table["flip"].value_counts()
    return {f"{prefix}/{kind}": float(counts.get(kind, 0)) for kind in FLIPS}


def _passed(verdict) -> bool:
    """A verified pass (NA: infra error or not evaluated, is not one)."""
    return not pd.isna(verdict) and bool(verdict)


def _flip(before, after) -> str:
    if pd.isna(before) or pd.isna(after):
        return "unverified"
    return {(False, True): "fixed", (True, False): "broken", (True, True): "still_passing",
            (False, False): "still_failing"}[bool(before), bool(after)]


@dataclass
class GateDecision:
    """What the regression gate decided, and why (``reason`` is logged with the decision)."""

    passed: bool
    reason: str
    regressions: list[str] = field(default_factory=list)  # regression-set envs the champion passes, candidate not
    candidate_pass_at_1: float = 0.0  # greedy, over the envs both verified
    champion_pass_at_1: float = 0.0


def regression_gate(candidate: pd.DataFrame, champion: pd.DataFrame | None,
                    regression_envs: Collection[str] | None = None, max_regressions: int = 0) -> GateDecision:
    """Whether ``candidate`` (EvalResults) may replace ``champion`` (its EvalResults on the same suite; None when there
    is no champion yet). ``regression_envs``: the regression set (None or empty: every env the champion was
    evaluated on); ``max_regressions``: how many of its envs the champion passes the candidate may fail."""
    new = greedy_verdicts(candidate)
    if champion is None:
        rate = float(new.dropna().mean()) if new.notna().any() else 0.0
        return GateDecision(True, "no champion yet", candidate_pass_at_1=rate)
    old = greedy_verdicts(champion)
    watched = old.index if not regression_envs else old.index.intersection(pd.Index(list(regression_envs)))
    passing = [env for env in watched if _passed(old[env])]
    regressions = [env for env in passing if not _passed(new.get(env, pd.NA))]
    both = old.index.intersection(new.index)
    both = [env for env in both if pd.notna(old[env]) and pd.notna(new[env])]
    candidate_rate = float(new[both].astype(float).mean()) if both else 0.0
    champion_rate = float(old[both].astype(float).mean()) if both else 0.0
    decision = GateDecision(False, "", regressions, candidate_rate, champion_rate)
    tolerated = f" ({len(regressions)} regression(s) tolerated: {', '.join(regressions[:10])})" if regressions else ""
    if len(regressions) > max_regressions:
        decision.reason = (f"regressed on {len(regressions)} env(s) of the regression set the champion passes: "
                           + ", ".join(regressions[:10]))
    elif not both:
        decision.reason = "no env verified under both the candidate and the champion"
    elif candidate_rate < champion_rate:
        decision.reason = f"greedy pass@1 {candidate_rate:.4f} < champion's {champion_rate:.4f}" + tolerated
    else:
        decision.passed = True
        decision.reason = f"greedy pass@1 {candidate_rate:.4f} >= champion's {champion_rate:.4f}" + tolerated
    return decision

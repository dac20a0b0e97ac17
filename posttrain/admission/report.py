"""The admission report: one row per (env, check) with a verdict and a reason, and its text summary.

Example:
    >>> frame = to_frame([CheckRow("demo/add_2", "solvability", True, "8/8 cases passed"),
    ...                   CheckRow("demo/bad", "solvability", False, "0/8 cases passed")])
    >>> sorted(admitted_ids(frame))
    ['demo/add_2']
    >>> print(summarize(frame))
    admitted 1/2 envs
      solvability: 1/2 passed
    rejected:
      demo/bad [solvability] 0/8 cases passed
"""

from __future__ import annotations

from dataclasses import astuple, dataclass

import pandas as pd

from posttrain.schemas import AdmissionReport

COLUMNS = ("env_id", "check", "passed", "detail")


@dataclass
class CheckRow:
    env_id: str
    check: str  # consistency | solvability | anti_hacking
    passed: bool
    detail: str


def to_frame(rows: list[CheckRow]) -> pd.DataFrame:
    """The rows as an ``AdmissionReport`` table (validated)."""
    return AdmissionReport.validate(pd.DataFrame([astuple(r) for r in rows], columns=list(COLUMNS)))


def admitted_ids(frame: pd.DataFrame) -> set[str]:
    """Env ids all of whose rows passed."""
    return set(frame.groupby("env_id")["passed"].all().loc[lambda s: s].index)


def summarize(frame: pd.DataFrame) -> str:
    """A short text report: admitted count, pass count per check, and every failing row."""
    lines = [f"admitted {len(admitted_ids(frame))}/{frame['env_id'].nunique()} envs"]
    for check, passed in frame.groupby("check", sort=False)["passed"]:
        lines.append(f"  {check}: {int(passed.sum())}/{len(passed)} passed")
    failed = frame[~frame["passed"]]
    if len(failed):
        lines.append("rejected:")
        lines += [f"  {r.env_id} [{r.check}] {r.detail}" for r in failed.itertuples()]
    return "\n".join(lines)


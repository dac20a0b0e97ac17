"""The admission report: one row per (env, check) with a verdict, a reason code and a measured value; statistics.

Every row's ``detail`` starts with its reason code (``<check>.<reason>: text``, or ``infra: text``), so the
4-column ``AdmissionReport`` contract (env_id, check, passed, detail) carries the codes to every consumer. The
*details* table adds ``status``, ``code`` and ``value`` columns; the per-check statistics and the rejections by
reason are computed from either.

Statuses: ``pass`` (``<check>.ok``), ``fail``, ``infra`` (the sandbox or a policy engine failed, not the env: not
admitted this run), ``skipped`` (not run because a check it depends on failed; never admits), ``not_applicable``
(nothing to check, e.g. no mutants: passes), ``reported`` (measured and passing, but worth a look: learnability
outside (0, 1) when it is not used as a filter).

Example:
    >>> frame = to_frame([CheckRow("demo/add_2", "solvability", True, "solvability.ok", "8/8 cases passed"),
    ...                   CheckRow("demo/bad", "solvability", False, "solvability.reference_failed",
    ...                            "0/8 cases passed")])
    >>> sorted(admitted_ids(frame)), reason_code(frame["detail"][1])
    (['demo/add_2'], 'solvability.reference_failed')
    >>> print(report_text(frame))
    admitted 1/2 envs
      solvability: 1 pass, 1 fail
    rejected:
      demo/bad [solvability] solvability.reference_failed: 0/8 cases passed
    >>> check_stats(frame)[["check", "envs", "pass", "fail", "pass_rate"]].to_dict("records")
    [{'check': 'solvability', 'envs': 2, 'pass': 1, 'fail': 1, 'pass_rate': 0.5}]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from posttrain.schemas import ADMISSION_STATUSES as STATUSES
from posttrain.schemas import AdmissionCheckStats, AdmissionDetails, AdmissionReport

COLUMNS = ("env_id", "check", "passed", "detail")
DETAIL_COLUMNS = ("env_id", "check", "passed", "status", "code", "value", "detail")
STATS_COLUMNS = ("check", "envs", *STATUSES, "pass_rate", "value_mean", "seconds")
INFRA = "infra"


@dataclass
class CheckRow:
    env_id: str
    check: str  # consistency | solvability | reproducibility | anti_hacking | coverage | discrimination | learnability
    passed: bool
    code: str  # "<check>.ok", "<check>.<reason>", "<check>.skipped", "<check>.not_applicable" or "infra"
    text: str  # the human-readable part of the detail
    value: float = math.nan  # the check's measurement (mutation score, pass-rate gap, ...), NaN if none

    @property
    def detail(self) -> str:
        return f"{self.code}: {self.text}" if self.text else self.code


def reason_code(detail: str) -> str:
    """The reason code a detail starts with (``'coverage.mutants_survived: 2/5 ...'`` gives the part before ``: ``).

    >>> reason_code("anti_hacking.probe_passed:no-op: 8/8"), reason_code("infra: sandbox did not start")
    ('anti_hacking.probe_passed:no-op', 'infra')
    """
    return detail.split(": ", 1)[0].strip()


def status_of(passed: bool, code: str) -> str:
    """One of ``STATUSES`` for a row, from its verdict and reason code."""
    if code == INFRA:
        return "infra"
    if code.endswith(".skipped"):
        return "skipped"
    if code.endswith(".not_applicable"):
        return "not_applicable"
    if passed:
        return "pass" if code.endswith(".ok") else "reported"
    return "fail"


def details_frame(rows: list[CheckRow]) -> pd.DataFrame:
    """The rows with status, code and value (``AdmissionDetails``): the full report written to parquet/HTML and logged
    to MLflow."""
    records = [(r.env_id, r.check, bool(r.passed), status_of(r.passed, r.code), r.code, float(r.value), r.detail)
               for r in rows]
    return AdmissionDetails.validate(pd.DataFrame(records, columns=list(DETAIL_COLUMNS)))


def to_frame(rows_or_details: list[CheckRow] | pd.DataFrame) -> pd.DataFrame:
    """The ``AdmissionReport`` contract table (validated): env_id, check, passed, detail."""
    details = rows_or_details if isinstance(rows_or_details, pd.DataFrame) else details_frame(rows_or_details)
    return AdmissionReport.validate(details[list(COLUMNS)].reset_index(drop=True))


def with_status(frame: pd.DataFrame) -> pd.DataFrame:
    """A details table from a contract or details table (code and status recomputed from ``detail``)."""
    out = frame.copy()
    out["code"] = out["detail"].map(reason_code)
    out["status"] = [status_of(bool(p), c) for p, c in zip(out["passed"], out["code"])]
    if "value" not in out:
        out["value"] = math.nan
    return out[list(DETAIL_COLUMNS)]


def admitted_ids(frame: pd.DataFrame) -> set[str]:
    """Env ids all of whose rows passed."""
    return set(frame.groupby("env_id")["passed"].all().loc[lambda s: s].index)


def check_stats(frame: pd.DataFrame, seconds: dict[str, float] | None = None) -> pd.DataFrame:
    """Per check (``AdmissionCheckStats``): rows by status, pass rate among evaluated envs (pass / (pass + fail)),
    mean value, seconds."""
    details = with_status(frame) if "status" not in frame else frame
    records = []
    for check, group in details.groupby("check", sort=False):
        counts = group["status"].value_counts()
        row = {"check": check, "envs": int(group["env_id"].nunique())}
        row.update({status: int(counts.get(status, 0)) for status in STATUSES})
        judged = row["pass"] + row["fail"]
        row["pass_rate"] = row["pass"] / judged if judged else math.nan
        values = group["value"].dropna()
        row["value_mean"] = float(values.mean()) if len(values) else math.nan
        row["seconds"] = float((seconds or {}).get(check, math.nan))
        records.append(row)
    return AdmissionCheckStats.validate(pd.DataFrame(records, columns=list(STATS_COLUMNS)))


def rejection_reasons(frame: pd.DataFrame) -> pd.DataFrame:
    """Failing and infra rows counted by reason code: code, check, envs (most frequent first)."""
    details = with_status(frame) if "status" not in frame else frame
    bad = details[details["status"].isin(["fail", "infra"])]
    counts = bad.groupby(["code", "check"], sort=False)["env_id"].nunique().rename("envs").reset_index()
    return counts.sort_values(["envs", "code"], ascending=[False, True], kind="stable").reset_index(drop=True)


def env_verdicts(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per env: admitted, and the codes of its failing rows (``skipped`` rows are left out)."""
    details = with_status(frame) if "status" not in frame else frame
    records = []
    for env_id, group in details.groupby("env_id", sort=False):
        bad = group[group["status"].isin(["fail", "infra"])]
        records.append({"env_id": env_id, "admitted": bool(group["passed"].all()),
                        "reasons": ", ".join(dict.fromkeys(bad["code"]))})
    return pd.DataFrame(records, columns=["env_id", "admitted", "reasons"])


def env_codes(frame: pd.DataFrame) -> dict[str, set[str]]:
    """Env id -> reason codes of its failing and infra rows (empty set: nothing wrong)."""
    details = with_status(frame) if "status" not in frame else frame
    out: dict[str, set[str]] = {env_id: set() for env_id in details["env_id"]}
    for row in details[details["status"].isin(["fail", "infra"])].itertuples():
        out[row.env_id].add(row.code)
    return out


def report_text(frame: pd.DataFrame) -> str:
    """A short text report: admitted count, row statuses per check, and every failing row."""
    details = with_status(frame) if "status" not in frame else frame
    lines = [f"admitted {len(admitted_ids(details))}/{details['env_id'].nunique()} envs"]
    for check, group in details.groupby("check", sort=False):
        counts = group["status"].value_counts()
        lines.append(f"  {check}: " + ", ".join(f"{int(counts[s])} {s}" for s in STATUSES if counts.get(s, 0)))
    failed = details[details["status"].isin(["fail", "infra"])]
    if len(failed):
        lines.append("rejected:")
        lines += [f"  {r.env_id} [{r.check}] {r.detail}" for r in failed.itertuples()]
    return "\n".join(lines)


def stats_text(stats: pd.DataFrame) -> str:
    """The per-check statistics as an aligned text table (for the CLI)."""
    shown = stats.copy()
    for column in ("pass_rate", "value_mean"):
        shown[column] = shown[column].map(lambda v: "-" if pd.isna(v) else f"{v:.2f}")
    shown["seconds"] = shown["seconds"].map(lambda v: "-" if pd.isna(v) else f"{v:.1f}")
    return shown.to_string(index=False)

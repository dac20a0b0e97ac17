"""Admission report files: the details table as parquet, a self-contained HTML page, per-check statistics.

The CLI (``posttrain admit``) and the Flyte workflow (``workflows/admit.py``) both call ``write_report`` so they
produce the same files: ``report.parquet`` (one row per env and check, with status, code and value),
``check_stats.parquet`` + ``check_stats.json``, ``reasons.parquet`` (rejections by reason code) and ``report.html``.

Example:
    >>> from posttrain.admission.report import CheckRow, details_frame, check_stats
    >>> details = details_frame([CheckRow("e/1", "coverage", False, "coverage.mutants_survived", "1/4 killed", 0.25)])
    >>> html = report_html(details, check_stats(details), title="demo")
    >>> "coverage.mutants_survived" in html and html.startswith("<!DOCTYPE html>")
    True
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path

import pandas as pd

from posttrain.admission.report import admitted_ids, env_verdicts, rejection_reasons

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
td.pass { background: #e6f4e6; } td.fail { background: #fbe3e3; } td.infra { background: #fff2cc; }
td.skipped, td.not_applicable { background: #f4f4f4; color: #777; } td.reported { background: #e8eefc; }
"""


def _cell(value) -> str:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.3g}"
    return html.escape(str(value))


def _table(frame: pd.DataFrame, status_column: str | None = None) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
    body = []
    for record in frame.itertuples(index=False):
        cells = []
        for column, value in zip(frame.columns, record):
            css = ""
            if column == status_column:
                css = f' class="{html.escape(str(value))}"'
            elif column == "admitted":
                css = ' class="pass"' if value else ' class="fail"'
            cells.append(f"<td{css}>{_cell(value)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def report_html(details: pd.DataFrame, stats: pd.DataFrame, title: str, wall_s: float | None = None) -> str:
    """A standalone HTML page: summary, per-check statistics, rejections by reason, per-env verdicts, all rows."""
    envs = details["env_id"].nunique()
    admitted = len(admitted_ids(details))
    took = f" in {wall_s:.1f} s" if wall_s is not None else ""
    verdicts = env_verdicts(details)
    parts = [
        "<!DOCTYPE html>", "<html><head><meta charset='utf-8'>",
        f"<title>Admission: {html.escape(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>Admission report: {html.escape(title)}</h1>",
        f"<p><b>{admitted}/{envs}</b> envs admitted{took}.</p>",
        "<h2>Per-check statistics</h2>", _table(stats),
        "<h2>Rejections by reason</h2>", _table(rejection_reasons(details)),
        "<h2>Envs</h2>", _table(verdicts.sort_values("admitted", kind="stable")),
        "<h2>All checks</h2>", _table(details, status_column="status"),
        "</body></html>",
    ]
    return "\n".join(parts)


def stats_json(stats: pd.DataFrame) -> dict:
    """Per-check statistics as ``{check: {column: value}}`` (NaN as null)."""
    out = {}
    for record in stats.to_dict("records"):
        check = record.pop("check")
        out[check] = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in record.items()}
    return out


def write_report(out_dir: str | Path, details: pd.DataFrame, stats: pd.DataFrame, title: str,
                 wall_s: float | None = None) -> dict[str, Path]:
    """Write the report files into ``out_dir`` (created); returns their paths by name."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"report": out / "report.parquet", "html": out / "report.html", "stats": out / "check_stats.parquet",
             "stats_json": out / "check_stats.json", "reasons": out / "reasons.parquet"}
    details.to_parquet(paths["report"], index=False)
    stats.to_parquet(paths["stats"], index=False)
    rejection_reasons(details).to_parquet(paths["reasons"], index=False)
    paths["stats_json"].write_text(json.dumps(stats_json(stats), indent=2, sort_keys=True))
    paths["html"].write_text(report_html(details, stats, title, wall_s), encoding="utf-8")
    return paths

"""The evaluation report: one self-contained HTML page (tables, and plots as inline SVG) from evaluation results.

Pure rendering, no MLflow: ``posttrain.tracking.run_report`` gathers a run's results and logs the page. The page
shows greedy and sampled pass@1 per stratum (overall, domain, difficulty) across the evaluated policies (one column
and one point per policy, in the order given, labelled by the caller: ``v0``, ``v10``, ``champion (v3)``), every
declared assertion's pass rate per policy, the reward curve when given (training reward per iteration) and the
per-env flips when given (``regression.flips``).

Example (two versions of two envs; v1 fixes env b):
    >>> import pandas as pd
    >>> def results(version, b_passed):
    ...     rows = [("a", True, "greedy"), ("b", b_passed, "greedy"), ("a", True, "sampled"), ("b", False, "sampled")]
    ...     return pd.DataFrame([{"env_id": e, "domain": "python", "difficulty": 1 if e == "a" else 2,
    ...                           "decoding": d, "sample_idx": 0, "policy_version": version, "steps": 1, "passed": p,
    ...                           "reward": float(p), "infra_error": "", "assertions": "{}"} for e, p, d in rows])
    >>> table = pass_at_1_by_policy({"v0": results(0, False), "v1": results(1, True)})
    >>> table[(table["stratum"] == "all") & (table["decoding"] == "greedy")]["value"].tolist()
    [0.5, 1.0]
    >>> page = as_page(render_body(table, rewards=pd.Series({1: 0.25, 2: 0.5}), title="demo"))
    >>> page.startswith("<!DOCTYPE html>") and page.count("<svg") == 3   # greedy, sampled, reward curve
    True
"""

from __future__ import annotations

import html
import io

import pandas as pd

from posttrain.evaluation.regression import FLIPS
from posttrain.evaluation.strata import strata

REPORT_STRATA = ("all", "domain", "difficulty")
DECODINGS = {"pass_at_1": "greedy", "pass_at_1_sampled": "sampled"}  # strata metric -> decoding
MAX_FLIP_ROWS = 50  # fixed and broken envs listed; the counts cover all

STYLE = """<style>
.posttrain-report {font-family: sans-serif; font-size: 14px; color: #222; max-width: 1100px}
.posttrain-report table {border-collapse: collapse; margin: 8px 0 16px}
.posttrain-report th, .posttrain-report td {border: 1px solid #ccc; padding: 3px 8px; text-align: right}
.posttrain-report th {background: #f3f3f3}
.posttrain-report td.label {text-align: left}
.posttrain-report .note {color: #666}
</style>"""


def pass_at_1_by_policy(evaluations: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Greedy and sampled pass@1 per stratum of each evaluated policy: one row per ``policy, stratum, group,
    decoding`` with ``envs`` measured and ``value``; ``evaluations`` maps a policy's label to its EvalResults."""
    frames = []
    for label, results in evaluations.items():
        table = strata(results, ks=[1])
        table = table[table["metric"].isin(list(DECODINGS)) & table["stratum"].isin(REPORT_STRATA)]
        frames.append(table.assign(policy=label, decoding=table["metric"].map(DECODINGS)))
    columns = ["policy", "stratum", "group", "decoding", "envs", "value"]
    return pd.concat(frames, ignore_index=True)[columns] if frames else pd.DataFrame(columns=columns)


def assertions_by_policy(evaluations: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Every declared assertion's overall pass rate per evaluated policy: one row per ``policy, assertion`` with the
    ``envs`` it applied to, those it did ``not_applicable`` to, and ``value`` (NaN where it applied to none).

    >>> results = pd.DataFrame({"env_id": ["a", "b"], "domain": "x", "difficulty": 1, "decoding": "greedy",
    ...                         "steps": 3, "passed": [True, False], "infra_error": "",
    ...                         "assertions": ['{"behavior/max_steps": true}', '{"behavior/max_steps": false}']})
    >>> assertions_by_policy({"v0": results}).values.tolist()
    [['v0', 'behavior/max_steps', 2, 0, 0.5]]
    """
    frames = []
    for label, results in evaluations.items():
        table = strata(results, ks=[1])
        table = table[(table["stratum"] == "all") & table["metric"].str.startswith("assertion/")]
        frames.append(table.assign(policy=label, assertion=table["metric"].str.removeprefix("assertion/")))
    columns = ["policy", "assertion", "envs", "not_applicable", "value"]
    return pd.concat(frames, ignore_index=True)[columns] if frames else pd.DataFrame(columns=columns)


def assertions_table_html(table: pd.DataFrame) -> str:
    """``assertions_by_policy`` as an HTML table: a row per assertion, a column per policy (pass rate and the envs it
    applied to; "n/a" where it applied to none).

    >>> table = pd.DataFrame({"policy": ["v0", "v4"], "assertion": "behavior/max_steps", "envs": [2, 2],
    ...                       "not_applicable": 0, "value": [0.5, 1.0]})
    >>> cells = '<td class="label">behavior/max_steps</td><td>0.500 <span class="note">(2)</span></td>'
    >>> cells in assertions_table_html(table)
    True
    """
    policies = list(dict.fromkeys(table["policy"]))
    head = "".join(f"<th>{html.escape(p)}</th>" for p in policies)
    rows = []
    for name, cells in table.groupby("assertion", sort=False):
        by_policy = cells.set_index("policy")
        values = "".join(("<td>n/a</td>" if pd.isna(by_policy.at[p, "value"]) else
                          f'<td>{by_policy.at[p, "value"]:.3f} <span class="note">({by_policy.at[p, "envs"]})'
                          f"</span></td>") if p in by_policy.index else "<td>–</td>" for p in policies)
        rows.append(f'<tr><td class="label">{html.escape(name)}</td>{values}</tr>')
    return f"<table><tr><th>assertion</th>{head}</tr>{''.join(rows)}</table>"


def pass_table_html(table: pd.DataFrame, decoding: str) -> str:
    """One ``decoding``'s pass@1 as an HTML table: a row per stratum group, a column per policy (value and envs).

    >>> table = pd.DataFrame({"policy": ["v0", "v1"], "stratum": "all", "group": "all", "decoding": "greedy",
    ...                       "envs": [4, 4], "value": [0.25, 0.5]})
    >>> "<td>0.250 <span class=\\"note\\">(4)</span></td><td>0.500" in pass_table_html(table, "greedy")
    True
    """
    part = table[table["decoding"] == decoding]
    if part.empty:
        return f'<p class="note">no {decoding} evaluation</p>'
    policies = list(dict.fromkeys(part["policy"]))
    head = "".join(f"<th>{html.escape(p)}</th>" for p in policies)
    rows = []
    for (stratum, group), cells in part.groupby(["stratum", "group"], sort=False):
        by_policy = cells.set_index("policy")
        values = "".join(f'<td>{by_policy.at[p, "value"]:.3f} <span class="note">({by_policy.at[p, "envs"]})'
                         f"</span></td>" if p in by_policy.index else "<td>–</td>" for p in policies)
        name = "all" if stratum == "all" else f"{stratum} {group}"
        rows.append(f'<tr><td class="label">{html.escape(name)}</td>{values}</tr>')
    return f"<table><tr><th>stratum</th>{head}</tr>{''.join(rows)}</table>"


def line_plot_svg(series: dict[str, pd.Series], title: str, xlabel: str, ylabel: str,
                  ylim: tuple[float, float] | None = None) -> str:
    """An inline SVG line chart: one line (with markers) per named series over its index; ``ylim``: fixed y range.

    >>> svg = line_plot_svg({"all": pd.Series([0.2, 0.4], index=[0, 1])}, "pass@1", "version", "pass@1")
    >>> svg.startswith("<svg") and "pass@1" in svg
    True
    """
    import matplotlib

    from matplotlib.figure import Figure

    with matplotlib.rc_context({"svg.fonttype": "none", "font.size": 9}):
        figure = Figure(figsize=(5.5, 3.2))
        axes = figure.subplots()
        for name, values in series.items():
            axes.plot([str(x) for x in values.index], values.to_numpy(), marker="o", label=name,
                      linewidth=2.5 if name == "all" else 1.2)
        axes.set(title=title, xlabel=xlabel, ylabel=ylabel)
        if ylim:
            axes.set_ylim(*ylim)
        axes.grid(alpha=0.3)
        if len(series) > 1:
            axes.legend(fontsize=7, loc="best")
        figure.tight_layout()
        buffer = io.StringIO()
        figure.savefig(buffer, format="svg", metadata={"Date": None})
    text = buffer.getvalue()
    return text[text.index("<svg"):]  # drop the XML prolog and doctype: the SVG is inlined in HTML


def pass_plot_svg(table: pd.DataFrame, decoding: str) -> str:
    """``decoding``'s pass@1 across policies: the overall line, a line per domain and per difficulty."""
    part = table[table["decoding"] == decoding]
    series = {("all" if stratum == "all" else f"{stratum} {group}"): rows.set_index("policy")["value"]
              for (stratum, group), rows in part.groupby(["stratum", "group"], sort=False)}
    return line_plot_svg(series, f"{decoding} pass@1", "policy", "pass@1", ylim=(-0.02, 1.02))


def flips_html(flips: pd.DataFrame) -> str:
    """Counts per flip kind, then the fixed and broken envs (the first ``MAX_FLIP_ROWS``).

    >>> flips = pd.DataFrame({"env_id": ["a", "b"], "baseline_passed": [False, True],
    ...                       "candidate_passed": [True, True], "flip": ["fixed", "still_passing"]})
    >>> text = flips_html(flips)
    >>> "<td>1</td><td>0</td><td>1</td>" in text and '<td class="label">a</td><td>fixed</td>' in text
    True
    """
    counts = flips["flip"].value_counts()
    head = "".join(f"<th>{kind}</th>" for kind in FLIPS)
    cells = "".join(f"<td>{int(counts.get(kind, 0))}</td>" for kind in FLIPS)
    changed = flips[flips["flip"].isin(["fixed", "broken"])].sort_values(["flip", "env_id"])
    rows = "".join(f'<tr><td class="label">{html.escape(str(row.env_id))}</td><td>{row.flip}</td></tr>'
                   for row in changed.head(MAX_FLIP_ROWS).itertuples())
    more = (f'<p class="note">{len(changed) - MAX_FLIP_ROWS} more fixed or broken envs in the flips table</p>'
            if len(changed) > MAX_FLIP_ROWS else "")
    listed = f"<table><tr><th>env</th><th>flip</th></tr>{rows}</table>{more}" if rows else ""
    return f"<table><tr>{head}</tr><tr>{cells}</tr></table>{listed}"


def render_body(table: pd.DataFrame, rewards: pd.Series | None = None, flips: pd.DataFrame | None = None,
                title: str = "Evaluation", flips_title: str = "flips", assertions: pd.DataFrame | None = None) -> str:
    """The report as an HTML fragment with its own scoped style (what a Flyte Deck shows): ``table`` from
    ``pass_at_1_by_policy``, ``rewards`` (mean training reward by iteration), ``flips`` (under ``flips_title``:
    which policies they compare) and ``assertions`` (``assertions_by_policy``) when given."""
    parts = [STYLE, '<div class="posttrain-report">', f"<h1>{html.escape(title)}</h1>"]
    for decoding in DECODINGS.values():
        parts.append(f"<h2>{decoding} pass@1 per stratum</h2>")
        parts.append(pass_table_html(table, decoding))
        if (table["decoding"] == decoding).any():
            parts.append(pass_plot_svg(table, decoding))
    if assertions is not None and len(assertions):
        parts += ["<h2>assertion pass rates</h2>", assertions_table_html(assertions)]
    if rewards is not None and len(rewards):
        parts += ["<h2>reward curve</h2>",
                  line_plot_svg({"reward/mean": rewards}, "mean training reward", "iteration", "reward")]
    if flips is not None:
        parts += [f"<h2>{html.escape(flips_title)}</h2>", flips_html(flips)]
    parts.append("</div>")
    return "\n".join(parts)


def as_page(body: str, title: str = "Evaluation") -> str:
    """A ``render_body`` fragment as one self-contained HTML page (what MLflow stores)."""
    return (f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{html.escape(title)}</title></head>\n'
            f"<body>\n{body}\n</body></html>\n")

"""The summary table printed when an RL run ends: per iteration greedy and sampled pass@1, mean reward and wall time.

Read from the parent run's metric curves (step = iteration): ``eval/pass_at_1``, ``eval/pass_at_1_sampled`` (only
the evaluated versions have them), ``reward/mean`` and ``time/iteration_s`` (iterations 1..n). A missing value is
shown as ``-``.

Example:
    >>> table = pd.DataFrame({"greedy pass@1": [0.4, None, 0.55], "reward": [None, 0.31, 0.42],
    ...                       "time (s)": [None, 2.91, 9.5]}, index=pd.Index([0, 1, 2], name="iteration"))
    >>> print(format_summary(table))
    iteration  greedy pass@1  reward  time (s)
            0          0.400       -         -
            1              -   0.310       2.9
            2          0.550   0.420       9.5
    >>> print_summary(parent_id)       # doctest: +SKIP
"""

from __future__ import annotations

import sys
from typing import TextIO

import pandas as pd

from posttrain import tracking
from posttrain.tracking.run_report import metric_curve

COLUMNS = {"greedy pass@1": "eval/pass_at_1", "sampled pass@1": "eval/pass_at_1_sampled", "reward": "reward/mean",
           "time (s)": "time/iteration_s"}  # column -> the parent run's metric


def summary_table(parent_run_id: str) -> pd.DataFrame:
    """One row per iteration that logged any of ``COLUMNS``' metrics; a column no iteration logged is left out."""
    curves = {column: metric_curve(parent_run_id, key) for column, key in COLUMNS.items()}
    table = pd.DataFrame({column: curve for column, curve in curves.items() if len(curve)})
    return table.sort_index().rename_axis("iteration")


def format_summary(table: pd.DataFrame) -> str:
    """The table as aligned text: pass@1 and reward with 3 decimals, seconds with 1."""
    columns = {"iteration": [str(i) for i in table.index]}
    for column in table.columns:
        digits = 1 if column == "time (s)" else 3
        columns[column] = ["-" if pd.isna(v) else f"{v:.{digits}f}" for v in table[column]]
    widths = {name: max([len(name), *(len(cell) for cell in cells)]) for name, cells in columns.items()}
    rows = [list(columns)] + [list(row) for row in zip(*columns.values())]
    return "\n".join("  ".join(cell.rjust(widths[name]) for name, cell in zip(columns, row)) for row in rows)


def print_summary(parent_run_id: str, stream: TextIO | None = None) -> None:
    """Print the run's summary table (to stdout: the end of ``pyflyte run``'s output when it runs locally)."""
    name = tracking.client().get_run(parent_run_id).info.run_name
    print(f"\n{name} (MLflow run {parent_run_id})\n{format_summary(summary_table(parent_run_id))}",
          file=stream or sys.stdout, flush=True)

"""A table crossing a task boundary is validated by its pandera model both ways, keys the cache by content, and no
HTML report is rendered for it."""

from __future__ import annotations

import pandas as pd
import pandera.errors
import pytest
from flytekit import task
from flytekit.core.type_engine import TypeEngine
from flytekitplugins.pandera import PandasReportRenderer
from pandera.typing import DataFrame

from posttrain.schemas import AdmissionReport
from tasks.tables import Table, ValidatingTransformer, table_digest

pytestmark = pytest.mark.unit

REPORT = pd.DataFrame({"env_id": ["a", "b"], "check": ["solvability"] * 2, "passed": [True, False],
                       "detail": ["", "reference_failed"]})


@task
def passes(table: Table[AdmissionReport]) -> Table[AdmissionReport]:
    return table


@task
def drops_a_column(table: Table[AdmissionReport]) -> Table[AdmissionReport]:
    return table.drop(columns=["detail"])


def test_the_transformer_of_pandera_tables_is_ours():
    assert isinstance(TypeEngine.get_transformer(DataFrame[AdmissionReport]), ValidatingTransformer)


def test_a_valid_table_comes_back_whole_without_a_report(monkeypatch):
    rendered = []
    monkeypatch.setattr(PandasReportRenderer, "to_html", lambda self, *args, **kw: rendered.append(self) or "")
    out = passes(table=REPORT)
    pd.testing.assert_frame_equal(out.reset_index(drop=True), REPORT)
    assert table_digest(out) == table_digest(REPORT)
    assert rendered == []


def test_a_task_returning_a_bad_table_fails_naming_the_column():
    with pytest.raises(pandera.errors.SchemaErrors, match="detail"):
        drops_a_column(table=REPORT)


def test_a_bad_input_table_fails_before_the_task_runs():
    with pytest.raises(pandera.errors.SchemaErrors, match="passed"):
        passes(table=REPORT.drop(columns=["passed"]))

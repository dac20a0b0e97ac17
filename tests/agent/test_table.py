"""The agent tables' documentation: docs/agent.md's steps table names every column of the ``Steps`` schema, in order
(the rows themselves are checked with real episodes in ``test_runner.py``)."""

from __future__ import annotations

import re

import pytest

from posttrain.schemas import Steps
from tests import ROOT

pytestmark = pytest.mark.unit


def test_the_steps_table_of_the_docs_names_every_column_in_order():
    doc = (ROOT / "docs" / "agent.md").read_text(encoding="utf-8")
    section = doc.split("### The steps table", 1)[1].split("\n\n|", 1)[1].split("\n\n", 1)[0]
    documented = [name for row in section.splitlines()[2:] for name in re.findall(r"`(\w+)`", row.split(" | ")[0])]
    assert documented == list(Steps.to_schema().columns)

"""The configuration reference is written once, in config.py: docs/configuration.md's tables are rendered from its
dataclasses and their fields' declarations, and every field has a doc line to render."""

from __future__ import annotations

from dataclasses import fields, is_dataclass

import pytest

from posttrain import config_docs
from posttrain.cli import main
from posttrain.config import AdmissionConfig, EvaluateConfig, LoopConfig, SandboxConfig
from posttrain.config_docs import BEGIN, END, REWRITE, field_docs, markdown_tables, tables, undocumented, with_tables
from posttrain.declaration import rule_of
from tests import ROOT

pytestmark = pytest.mark.unit

DOC = ROOT / "docs" / "configuration.md"


def leaf_paths(cls: type, prefix: str = "") -> set[str]:
    """Every field path of a config, walked from the instances (independently of config_docs' own walk)."""
    paths = set()
    for f in fields(cls):
        value = getattr(cls(), f.name)
        if is_dataclass(value):
            paths |= leaf_paths(type(value), f"{prefix}{f.name}.")
        else:
            paths.add(prefix + f.name)
    return paths


def test_docs_file_is_the_rendered_one():
    doc = DOC.read_text(encoding="utf-8")
    assert with_tables(doc) == doc, f"stale configuration tables in docs/configuration.md: {REWRITE}"


def test_every_field_of_the_loop_is_a_row_once():
    rows = [row.path for table in tables() if table.cls is not EvaluateConfig for row in table.rows]
    assert len(rows) == len(set(rows))
    assert set(rows) == leaf_paths(LoopConfig)
    evaluate = next(t for t in tables() if t.cls is EvaluateConfig)
    assert [r.path for r in evaluate.rows] == ["policy", "suite", "baseline", "experiment"]
    assert "`eval` takes the fields of `eval.*`" in evaluate.intro


def test_every_field_has_a_doc_line():
    missing = undocumented()
    assert missing == [], (f"{len(missing)} config fields have no doc line in posttrain/config.py (declare(..., "
                           f"doc=...)): {', '.join(missing)}; add them, then: {REWRITE}")


def test_doc_lines_come_from_the_declarations():
    docs = field_docs(SandboxConfig)
    assert docs["memory_mb"] == "address-space / cgroup memory limit per execution"
    assert docs["backend"].startswith('"bwrap-warm"')
    assert docs == {f.name: rule_of(f).doc for f in fields(SandboxConfig)}
    assert field_docs(AdmissionConfig)["agent_batch"].endswith("(one container each while it runs).")


def test_markdown_escapes_outside_code_spans():
    row = config_docs.Row("x.y", "str", '"a"', "a | b, ``c|d`` and posttrain:<folder>")
    assert config_docs.markdown_row(row) == r'| `x.y` | `str` | `"a"` | a \| b, `c|d` and posttrain:\<folder> |'


def test_cli_prints_and_rewrites_the_block(tmp_path, capsys):
    doc = tmp_path / "doc.md"
    doc.write_text(f"intro\n{BEGIN}\nold tables\n{END}\nafter\n")
    assert main(["config-docs", "--write", str(doc)]) == 0
    assert doc.read_text() == f"intro\n{BEGIN}\n{markdown_tables()}\n{END}\nafter\n"
    assert main(["config-docs", "--write", str(doc)]) == 0
    assert capsys.readouterr().out.splitlines() == [f"{doc}: updated", f"{doc}: up to date"]
    assert main(["config-docs"]) == 0
    assert capsys.readouterr().out == markdown_tables() + "\n"
    doc.write_text("no block here\n")
    with pytest.raises(ValueError, match="no config-docs block"):
        config_docs.write_tables(doc)

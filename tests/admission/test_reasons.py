"""Admission reason codes are listed once: every code the checks can give is in ``admission.reasons``, and the
table in docs/admission.md is the one rendered from it."""

from __future__ import annotations

import re

import pytest

from posttrain.admission.consistency import rejection_code
from posttrain.admission.reasons import (BEGIN, END, EVERY_CHECK, REASON_CODES, markdown_table, meaning, with_table,
                                         write_table)
from posttrain.cli import main
from posttrain.envs.suite import Rejection
from tests import ROOT

pytestmark = pytest.mark.unit

REWRITE = "posttrain reason-codes --write docs/admission.md"
ADMISSION = ROOT / "posttrain" / "admission"
# A string literal starting "<check>.<reason>" (f-strings: "{CHECK}." is replaced by the module's CHECK first), and
# what follows the reason: ":" and a name (a family, e.g. probe_passed:<probe>; ": " starts a detail's text) or "{"
# (a reason completed at run time).
CODE_LITERAL = re.compile(r"""["'](%s)\.([a-z_]*)(:(?=\S)|\{)?""" % "|".join(REASON_CODES))
ANY_CHECK_LITERAL = re.compile(r"""["']\{check\}\.([a-z_]+)""")


def produced_codes(source: str) -> tuple[set[str], set[str], set[str]]:
    """(codes, code prefixes completed at run time, ``<check>.<reason>`` codes) a module's source produces."""
    check = re.search(r'^CHECK = "(\w+)"', source, re.MULTILINE)
    if check:
        source = source.replace("{CHECK}", check.group(1))
    codes, prefixes = set(), set()
    for name, reason, tail in CODE_LITERAL.findall(source):
        if tail == "{":
            prefixes.add(f"{name}.{reason}")
        else:
            codes.add(f"{name}.{reason}" + (":name" if tail == ":" else ""))
    return codes, prefixes, {f"<check>.{reason}" for reason in ANY_CHECK_LITERAL.findall(source)}


@pytest.mark.parametrize("module", sorted(p.name for p in ADMISSION.glob("*.py") if p.name != "reasons.py"))
def test_every_code_a_module_produces_is_listed(module):
    codes, prefixes, generic = produced_codes((ADMISSION / module).read_text(encoding="utf-8"))
    unlisted = []
    for code in sorted(codes):
        try:
            meaning(code)
        except KeyError:
            unlisted.append(code)
    listed = [c for codes_of_check in REASON_CODES.values() for c in codes_of_check]
    unlisted += [f"{p}..." for p in sorted(prefixes)
                 if not p.endswith(".") and not any(c.startswith(p) for c in listed)]
    unlisted += sorted(generic - set(EVERY_CHECK))
    assert unlisted == [], f"add them to posttrain/admission/reasons.py, then: {REWRITE}"


def test_the_scan_finds_codes():
    codes, prefixes, generic = produced_codes((ADMISSION / "anti_hacking.py").read_text(encoding="utf-8"))
    assert {"anti_hacking.ok", "anti_hacking.not_applicable", "anti_hacking.probe_passed:name"} <= codes
    assert "<check>.skipped" in produced_codes((ADMISSION / "checks.py").read_text(encoding="utf-8"))[2]
    assert "consistency.unknown_" in produced_codes((ADMISSION / "consistency.py").read_text(encoding="utf-8"))[1]


LOADER_REJECTIONS = [
    *[Rejection("f.yaml", "x", "why", code) for code in ("malformed_yaml", "unreadable", "missing_field",
                                                         "unknown_field", "wrong_type", "duplicate_id")],
    *[Rejection("f.yaml", field, "unknown", "unknown_value")
      for field in ("runtime", "kind", "split", "verifier.kind")],
    *[Rejection("f.yaml", field, reason, "out_of_range") for field, reason in (
        ("id", "empty"), ("prompt", "empty"), ("difficulty", "got 9"), ("min_gap", "got 2"),
        ("limits.timeout_s", "must be in (0, 600], got 9999"), ("limits.memory_mb", "must be in (0, 8192], got -1"))],
    *[Rejection("f.yaml", field, reason, "invalid_verifier") for field, reason in (
        ("verifier.cases", "must be a list of 1 or more"), ("verifier.asserts", "no assert in it"),
        ("verifier.fields", "values contradict the formula"), ("runtime", "cannot run"), ("entry_point", "bad"),
        ("verifier.other", "bad"))],
]


@pytest.mark.parametrize("rejection", LOADER_REJECTIONS, ids=lambda r: f"{r.code}-{r.field}")
def test_every_loader_rejection_maps_to_a_listed_code(rejection):
    assert meaning(rejection_code(rejection))


def test_meaning_of_generic_family_and_unknown_codes():
    assert meaning("infra") == EVERY_CHECK["infra"]
    assert meaning("learnability.skipped") == EVERY_CHECK["<check>.skipped"]
    assert meaning("anti_hacking.probe_passed:early exit") == REASON_CODES["anti_hacking"][
        "anti_hacking.probe_passed:<probe>"]
    for code in ("coverage.nope", "nocheck.ok", "anti_hacking.not_applicable:x"):
        with pytest.raises(KeyError):
            meaning(code)


def test_docs_table_is_the_rendered_one():
    doc = (ROOT / "docs" / "admission.md").read_text(encoding="utf-8")
    assert with_table(doc) == doc, f"stale reason codes in docs/admission.md: {REWRITE}"
    assert markdown_table() in doc


def test_cli_prints_and_rewrites_the_block(tmp_path, capsys):
    doc = tmp_path / "doc.md"
    doc.write_text(f"intro\n{BEGIN}\nold table\n{END}\nafter\n")
    assert main(["reason-codes", "--write", str(doc)]) == 0
    assert doc.read_text() == f"intro\n{BEGIN}\n{markdown_table()}\n{END}\nafter\n"
    assert main(["reason-codes", "--write", str(doc)]) == 0
    assert capsys.readouterr().out.splitlines() == [f"{doc}: updated", f"{doc}: up to date"]
    assert main(["reason-codes"]) == 0
    assert capsys.readouterr().out == markdown_table() + "\n"
    doc.write_text("no block here\n")
    with pytest.raises(ValueError, match="no reason-codes block"):
        write_table(doc)

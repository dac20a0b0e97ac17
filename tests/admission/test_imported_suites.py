"""Admission of suites made by ``import-jsonl`` from HumanEval-style (``check(candidate)``) and MBPP-style (asserts
that call the function by name) records: the importer and the checks agree, so every imported problem whose
reference is right is admitted, in real bubblewrap sandboxes."""

from __future__ import annotations

import shutil

import pytest

from posttrain.admission import admit, report_text
from posttrain.config import AdmissionConfig, SandboxConfig
from posttrain.envs.importers.jsonl import import_jsonl
from posttrain.sandbox import make_sandbox
from tests import FIXTURES

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("bwrap") is None,
                                 reason="bubblewrap (bwrap) is not installed: these tests run real sandboxes")]


@pytest.mark.parametrize("style", ["humaneval_style", "mbpp_style"])
def test_imported_suite_is_admitted_whole(style, tmp_path):
    imported = import_jsonl(FIXTURES / f"{style}.jsonl", tmp_path / style)
    assert len(imported.written) == 3
    assert imported.skipped == []
    cfg = SandboxConfig(backend="bwrap")
    with make_sandbox(cfg) as box:
        result = admit(tmp_path / style, box, cfg, AdmissionConfig())
    assert len(result.admitted) == 3, report_text(result.report)
    assert set(result.details["status"]) == {"pass"}, report_text(result.report)

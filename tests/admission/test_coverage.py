"""The coverage check: mutation score against the threshold, survivors listed."""

from __future__ import annotations

import pytest

from posttrain.admission.coverage import changed_line, coverage_row, mutation_score, select_mutants
from tests.admission.common import FAIL, INFRA, PART, PASS

pytestmark = pytest.mark.unit


def test_mutation_score_threshold_and_survivors():
    ref = "def f(x):\n    return x * 2\n"
    mutants = [f"def f(x):\n    return {body}" for body in ("x // 2", "x + 2", "x * 3", "x * 1", "None")]
    assert select_mutants(ref, mutants + [ref, mutants[0]], limit=10) == mutants
    assert select_mutants(ref, mutants, limit=2) == [mutants[0], mutants[2]]
    assert mutation_score([True, True, False]) == pytest.approx(2 / 3)
    assert mutation_score([]) == 1.0
    assert changed_line(ref, mutants[1]) == "return x + 2"
    weak = coverage_row("e", ref, mutants, [FAIL, PASS, FAIL, PASS, PASS], threshold=0.6)
    assert (weak.passed, weak.code, weak.value) == (False, "coverage.mutants_survived", pytest.approx(0.4))
    assert "survivors: `return x + 2`; `return x * 1`; `return None`" in weak.text
    strong = coverage_row("e", ref, mutants, [FAIL, FAIL, PART, PASS, FAIL], threshold=0.6)
    assert (strong.passed, strong.code, strong.value) == (True, "coverage.ok", pytest.approx(0.8))
    assert coverage_row("e", ref, mutants[:3], [FAIL, FAIL, PASS], threshold=2 / 3).passed  # exactly at threshold
    assert coverage_row("e", ref, [], [], 0.6).code == "coverage.not_applicable"
    assert coverage_row("e", ref, mutants[:2], [FAIL, INFRA], 0.6).code == "infra"

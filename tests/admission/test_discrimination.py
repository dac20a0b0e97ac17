"""The discrimination gap and the learnability report/filter."""

from __future__ import annotations

import pytest

from posttrain.admission.discrimination import discrimination_row, gap_decision, learnability_code, learnability_row
from tests.admission.common import FAIL, INFRA, PASS

pytestmark = pytest.mark.unit


def test_gap_logic_rejects_only_below_min_gap():
    assert gap_decision(weak=0.0, strong=1.0, min_gap=1.0) == (True, 0.0)
    assert gap_decision(weak=0.25, strong=1.0, min_gap=0.5) == (True, 0.25)
    assert gap_decision(weak=0.75, strong=1.0, min_gap=0.5) == (False, -0.25)
    assert gap_decision(weak=1.0, strong=1.0, min_gap=0.0) == (True, 0.0)  # min_gap 0 never rejects a tie
    assert gap_decision(weak=0.5, strong=0.25, min_gap=0.0)[0] is False  # the weak beating the strong does
    easy = discrimination_row("e", 0.5, [PASS] * 4, [PASS] * 4, "identity", "reference")
    assert (easy.passed, easy.code, easy.value) == (False, "discrimination.gap_too_small", 0.0)
    fine = discrimination_row("e", 0.5, [FAIL, FAIL, PASS, FAIL], [PASS] * 4, "identity", "reference")
    assert (fine.passed, fine.code, fine.value) == (True, "discrimination.ok", 0.75)
    assert discrimination_row("e", 0.0, [INFRA], [PASS], "w", "s").code == "infra"


def test_learnability_reports_and_filters_only_when_asked():
    assert [learnability_code(r) for r in (0.0, 0.5, 1.0)] == [
        "learnability.unsolved", "learnability.ok", "learnability.solved"]
    solved = learnability_row("e", [PASS] * 4, "noisy:0.5", filtering=False)
    assert (solved.passed, solved.code, solved.value) == (True, "learnability.solved", 1.0)
    assert learnability_row("e", [FAIL] * 4, "p", filtering=True).passed is False
    assert learnability_row("e", [PASS, FAIL], "p", filtering=True).passed is True

"""Solvability and reproducibility decisions from the reference's verdicts."""

from __future__ import annotations

import pytest

from posttrain.admission.solvability import reference_is_sound, reproducibility_row, solvability_row
from posttrain.envs.verifiers.base import Verdict
from tests.admission.common import FAIL, INFRA, PART, PASS

pytestmark = pytest.mark.unit


def test_solvability_and_reproducibility_decisions():
    assert solvability_row("e", PASS).code == "solvability.ok"
    assert solvability_row("e", PART).code == "solvability.reference_failed"
    assert solvability_row("e", INFRA).detail == "infra: bwrap: cannot start"
    flaky = reproducibility_row("e", [PASS, PART, PASS])
    assert (flaky.passed, flaky.code, flaky.value) == (False, "reproducibility.flaky", 2.0)
    assert "2x [4/4 cases passed]; 1x [3/4 cases passed" in flaky.text
    varying_message = Verdict(**{**FAIL.__dict__, "detail": "0/4 cases passed; case 0: returned 7, expected 2"})
    assert reproducibility_row("e", [FAIL, varying_message, FAIL]).code == "reproducibility.flaky"
    assert reproducibility_row("e", [PASS]).code == "reproducibility.not_applicable"
    assert reproducibility_row("e", [PASS, INFRA]).code == "infra"
    assert reference_is_sound([PASS, PASS, PASS])
    assert not reference_is_sound([PASS, PART])
    assert not reference_is_sound([FAIL, FAIL])
    assert not reference_is_sound([PASS, INFRA])

"""The anti-hacking check: every probe must fail, an infra error is nobody's fault."""

from __future__ import annotations

import pytest

from posttrain.admission.anti_hacking import anti_hacking_row
from tests.admission.common import FAIL, INFRA, PART, PASS

pytestmark = pytest.mark.unit


def test_anti_hacking_needs_every_probe_to_fail():
    assert anti_hacking_row("e", {"a": FAIL, "b": PART}).code == "anti_hacking.ok"
    cheat = anti_hacking_row("e", {"empty program": FAIL, "always-equal object": PASS, "no-op def": PASS})
    assert (cheat.passed, cheat.code, cheat.value) == (False, "anti_hacking.probe_passed:always-equal object",
                                                       pytest.approx(1 / 3))
    assert "always-equal object (4/4), no-op def (4/4)" in cheat.text
    assert anti_hacking_row("e", {}).code == "anti_hacking.not_applicable"
    assert anti_hacking_row("e", {"a": FAIL, "b": INFRA}).code == "infra"

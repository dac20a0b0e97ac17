"""Every adversarial program of ``attack_programs.ATTACKS`` on every backend (bwrap, docker warm pool).

Each test runs one attack and its own containment assertions; the ``host`` fixture then checks the host was not
touched and that the backend's next executions start clean. A reference solution is scored too, as a control: the
verifier that refuses the cheats does pass an honest solution on the same backend.
"""

from __future__ import annotations

import pytest

from tests.sandbox.attacks import aggregate_limits, forgery  # noqa: F401 - they register their attacks in ATTACKS
from tests.sandbox.attacks import round2_slots  # noqa: F401 - registers its attacks in ATTACKS
from tests.sandbox.attacks import round2_forgery  # noqa: F401 - registers its attacks in ATTACKS
from tests.sandbox.attacks import round2_agent  # noqa: F401 - registers its attacks in ATTACKS
from tests.sandbox.attacks import round2_users  # noqa: F401 - registers its attacks in ATTACKS
from tests.sandbox.attacks.attack_programs import ADD, ATTACKS, verdict

pytestmark = pytest.mark.integration

CATEGORIES = sorted({category for category, _ in ATTACKS.values()})


def test_there_are_enough_attacks():
    assert len(ATTACKS) >= 25
    assert {"resources", "network", "confidentiality", "integrity", "verdict",
                                    "privilege", "isolation", "lifecycle"} <= set(CATEGORIES)


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_attack_is_contained(name, box, host):
    _, run_attack = ATTACKS[name]
    run_attack(box, host)


def test_honest_solution_still_passes(box):
    v = verdict(box, ADD, ADD.reference)
    assert v.passed, v
    assert v.reward == 1.0, v
    assert not v.excluded, v

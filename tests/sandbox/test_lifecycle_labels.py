"""Owner labels (no sandbox needed): they identify this process, so reapers spare live owners."""

from __future__ import annotations

import pytest

from posttrain.sandbox import lifecycle

pytestmark = pytest.mark.unit


def test_owner_labels_identify_this_process():
    labels = lifecycle.owner_labels()
    assert lifecycle.owner_alive(labels)
    assert not lifecycle.owner_alive({**labels, lifecycle.OWNER: "0"})
    assert lifecycle.once("test-key")
    assert not lifecycle.once("test-key")

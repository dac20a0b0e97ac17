"""The scripted policies admission samples as probes (reference, degenerate, noisy)."""

from __future__ import annotations

import pytest

from posttrain.admission.policies import DegeneratePolicy, NoisyReferencePolicy, ReferencePolicy, make_policy
from tests.admission.common import spec

pytestmark = pytest.mark.unit


def test_scripted_policies():
    s = spec()
    assert ReferencePolicy().solutions(s, 3, seed=0) == [s.reference] * 3
    assert DegeneratePolicy("noop").solutions(s, 1, 0) == ["def add_1(*args, **kwargs):\n    pass\n"]
    assert DegeneratePolicy("identity").solutions(spec(runtime="bash"), 1, 0) == [""]
    noisy = NoisyReferencePolicy(0.5).solutions(s, 40, seed=3)
    assert noisy == NoisyReferencePolicy(0.5).solutions(s, 40, seed=3)
    assert 5 < noisy.count(s.reference) < 35
    assert len(set(noisy)) > 2
    assert NoisyReferencePolicy(1.0).solutions(s, 5, 0) == [s.reference] * 5
    assert s.reference not in NoisyReferencePolicy(0.0).solutions(s, 5, 0)
    names = ("reference", "identity", "noop", "noisy:0.25")
    assert [make_policy(name).name for name in names] == list(names)
    assert [len(group) for group in make_policy("noisy:0.25").solutions_many([s, s], 3, seed=0)] == [3, 3]
    with pytest.raises(ValueError, match="not a scripted policy"):
        make_policy("/nonexistent/checkpoint")

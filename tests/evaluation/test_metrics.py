"""Unbiased pass@k against values computed by hand from 1 - C(n-c, k) / C(n, k)."""

from __future__ import annotations

import pytest

from posttrain.evaluation.metrics import pass_at_k

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("n", "c", "k", "expected"), [
    (5, 2, 1, 0.4),         # c / n
    (5, 2, 2, 0.7),         # 1 - C(3,2)/C(5,2) = 1 - 3/10
    (5, 2, 3, 0.9),         # 1 - C(3,3)/C(5,3) = 1 - 1/10
    (5, 2, 4, 1.0),         # n - c < k: every draw of 4 holds a pass
    (8, 1, 4, 0.5),         # 1 - C(7,4)/C(8,4) = 1 - 35/70
    (8, 0, 8, 0.0),
    (10, 3, 5, 11 / 12),    # 1 - C(7,5)/C(10,5) = 1 - 21/252
])
def test_pass_at_k_by_hand(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize(("n", "c", "k"), [(4, 5, 1), (4, -1, 1), (4, 1, 0), (4, 1, 5)])
def test_pass_at_k_refuses_impossible_counts(n, c, k):
    with pytest.raises(ValueError, match=f"n={n} c={c} k={k}"):
        pass_at_k(n, c, k)

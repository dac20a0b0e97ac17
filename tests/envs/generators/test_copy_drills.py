"""Copy drills over fresh lines (the demo build's copy phase): each answer is its prompt's lines as they are, the
lines are new (a pool learnt by heart cannot answer them), and they mix the given words with names and numbers."""

from __future__ import annotations

import random

import pytest

from posttrain.envs.generators.common import fresh_copy_drill

pytestmark = pytest.mark.unit

WORDS = ["def", "return", "Cash", "Revenue", "config/app.env", "cube"]


def test_fresh_drills_ask_for_their_own_lines_and_repeat_almost_none():
    rng = random.Random(0)
    drills = [fresh_copy_drill(rng, WORDS) for _ in range(500)]
    for prompt, answer in drills:
        assert prompt == "Copy these lines:\n" + answer + "Copy:\n" and answer.endswith("\n")
    lines = [line for _, answer in drills for line in answer.splitlines()]
    assert 1 <= min(len(a.splitlines()) for _, a in drills) < max(len(a.splitlines()) for _, a in drills) <= 3
    assert len(set(lines)) > 0.8 * len(lines)  # only one-part lines (one of six words, a short number) repeat
    text = "\n".join(lines)
    assert all(word in text for word in WORDS) and any(ch.isdigit() for ch in text) and any(
        line.isupper() for line in lines)


def test_fresh_drills_are_seeded():
    assert [fresh_copy_drill(random.Random(7), WORDS) for _ in range(3)] == \
        [fresh_copy_drill(random.Random(7), WORDS) for _ in range(3)]

"""``timed``: a block's seconds, added into a dict by name, also when the block raises."""

from __future__ import annotations

import itertools

import pytest

from posttrain.timing import timed

pytestmark = pytest.mark.unit


def ticking(step: float = 1.0):
    ticks = itertools.count(0.0, step)
    return lambda: next(ticks)


def test_a_repeated_name_adds_up_and_a_raising_block_still_counts():
    times, clock = {"time/update_s": 0.5}, ticking()
    with timed("time/reward_s", into=times, clock=clock):
        pass
    with pytest.raises(RuntimeError), timed("time/reward_s", into=times, clock=clock):
        raise RuntimeError("sandbox crashed")
    assert times == {"time/update_s": 0.5, "time/reward_s": 2.0}


def test_the_seconds_stop_with_the_block_and_run_on_without_one():
    clock = ticking()
    with timed(clock=clock) as block:
        assert block.seconds == 1.0  # read inside the block: so far
    assert block.seconds == block.seconds == 2.0  # after it: its duration, fixed
    stopwatch = timed(clock=clock)
    assert (stopwatch.seconds, stopwatch.seconds) == (1.0, 2.0)

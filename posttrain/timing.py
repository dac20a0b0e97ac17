"""Wall-clock time of a stage: ``timed``, the one stopwatch of every stage timer in the library and its tasks.

``timed()`` starts on creation; its ``seconds`` are the time so far, and once it ends the block it times (``with``),
that block's duration. ``timed(name, into=times)`` also adds the duration to ``times[name]`` when the block ends, so
one dict collects several blocks, a repeated one added up: keyed by MLflow metric names (``time/eval_score_s``) a
stage's times are metrics as they are. The block's time counts when it raises too.

Example (a clock that ticks 1.5 s per reading):
    >>> import itertools
    >>> ticks = itertools.count(0.0, 1.5)
    >>> times = {}
    >>> with timed("time/reward_s", into=times, clock=lambda: next(ticks)) as reward:
    ...     pass
    >>> reward.seconds, times
    (1.5, {'time/reward_s': 1.5})
    >>> update = timed(clock=lambda: next(ticks))  # a stopwatch across a function: read it where the stage ends
    >>> update.seconds, update.seconds
    (1.5, 3.0)
"""

from __future__ import annotations

import time
from typing import Callable


class timed:  # lower case: used like a function, ``with timed(...)`` or ``clock = timed()``
    """A stopwatch that starts when made; ``with`` it, it stops at the block's end (adding to ``into[name]``)."""

    def __init__(self, name: str = "", into: dict[str, float] | None = None,
                 clock: Callable[[], float] = time.perf_counter):
        self.name, self.into, self.clock = name, into, clock
        self.started, self.ended = clock(), None

    @property
    def seconds(self) -> float:
        """Seconds since the start: until the block's end, or so far."""
        return (self.clock() if self.ended is None else self.ended) - self.started

    def __enter__(self) -> timed:
        return self

    def __exit__(self, *exc) -> None:
        self.ended = self.clock()
        if self.into is not None:
            self.into[self.name] = self.into.get(self.name, 0.0) + self.seconds

"""Progress that suits where it runs: a live tqdm bar on a terminal, a one-line record every ``interval_s`` in a log.

Use ``progress(...)`` instead of ``tqdm`` directly. When the stream (stderr) is not a terminal (``pyflyte run`` into a
file, a pod's log, CI), a bar's redraws would each land in the log: thousands of them. There, ``LineProgress`` writes
one line per ``interval_s`` (and one when the description changes or the work ends) instead. Both take the tqdm calls
posttrain uses: ``update``, ``set_description``, ``total`` (read and assigned), ``refresh``, ``close``.

Example (a stream that is not a terminal, and a clock that ticks 4 s per call):
    >>> import io, itertools
    >>> out, ticks = io.StringIO(), itertools.count(0, 4)
    >>> bar = progress(total=100, desc="solvability", unit="run", stream=out, clock=lambda: next(ticks))
    >>> for _ in range(10):
    ...     bar.update(10)
    >>> bar.close()
    >>> print(out.getvalue(), end="")
    solvability: 30/100 run (30%), 2.5 run/s, 12 s
    solvability: 60/100 run (60%), 2.5 run/s, 24 s
    solvability: 90/100 run (90%), 2.5 run/s, 36 s
    solvability: 100/100 run (100%), 2.3 run/s, 44 s, done
"""

from __future__ import annotations

import os
import sys
import time
from typing import Callable, TextIO

INTERVAL_S = 10.0  # seconds between two progress lines in a log


def progress(total: int = 0, desc: str = "", unit: str = "it", enabled: bool = True, stream: TextIO | None = None,
             interval_s: float = INTERVAL_S, clock: Callable[[], float] = time.monotonic):
    """A tqdm bar on ``stream`` (default stderr) if it is a terminal, else a ``LineProgress``; nothing when not
    ``enabled``."""
    stream = stream or sys.stderr
    if enabled and not stream.isatty():
        return LineProgress(total, desc, unit, stream, interval_s, clock)
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, file=stream, disable=not enabled, dynamic_ncols=True, leave=True)


class LineProgress:
    """Progress as log lines: ``desc: n/total unit (pct%), rate unit/s, elapsed s``, at most one per ``interval_s``."""

    def __init__(self, total: int, desc: str, unit: str, stream: TextIO, interval_s: float,
                 clock: Callable[[], float]):
        self.total, self.desc, self.unit, self.stream = total, desc, unit, stream
        self.interval_s, self.clock = interval_s, clock
        self.n = self.reported = 0
        self.started = self.last_line = clock()

    def update(self, n: int = 1) -> None:
        self.n += n
        now = self.clock()
        if now - self.last_line >= self.interval_s:
            self._line(now)

    def set_description(self, desc: str) -> None:
        """A new phase: the last one's progress is written first, if a line has not said it yet."""
        if desc != self.desc and self.n != self.reported:
            self._line(self.clock())
        self.desc = desc

    def refresh(self) -> None:
        """Nothing to redraw: lines are written as the work advances."""

    def close(self) -> None:
        if self.n:
            self._line(self.clock(), " done")

    def _line(self, now: float, suffix: str = "") -> None:
        elapsed = now - self.started
        count = f"{self.n}/{self.total} {self.unit} ({100 * self.n / self.total:.0f}%)" if self.total \
            else f"{self.n} {self.unit}"
        rate = self.n / elapsed if elapsed > 0 else 0.0
        end = f",{suffix}" if suffix else ""
        print(f"{self.desc}: {count}, {rate:.1f} {self.unit}/s, {elapsed:.0f} s{end}", file=self.stream, flush=True)
        self.last_line, self.reported = now, self.n


LIBRARY_BAR_SWITCHES = {"HF_HUB_DISABLE_PROGRESS_BARS": "1", "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}


def quiet_library_bars(stream: TextIO | None = None) -> bool:
    """In a log (``stream``, default stderr, not a terminal), turn off the bars of the libraries posttrain drives:
    huggingface_hub and transformers (loading and saving weights) and MLflow (artifact transfers); each redraw would
    be a log line. A switch the user set is left as it is. Returns whether it turned them off. vLLM's weight-loading
    bar follows the same rule in ``rollout.engine``."""
    if (stream or sys.stderr).isatty():
        return False
    chosen = {name: os.environ.setdefault(name, value) for name, value in LIBRARY_BAR_SWITCHES.items()}
    if chosen["HF_HUB_DISABLE_PROGRESS_BARS"] == "1":
        from huggingface_hub.utils import disable_progress_bars
        from transformers.utils import logging as transformers_logging

        disable_progress_bars()  # read once at import by both: set it now as well
        transformers_logging.disable_progress_bar()
    return True
